"""What the local runner and Kubernetes pods decide the same way: srun's per-task file names
(`-o out-%t.txt`, -e, -i), the status and state a finished step is recorded with, and when
--signal's warning is due (shipped to job pods beside the launcher: standard library only)."""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Mapping, Sequence

__all__ = [
    "ABORTED_SUFFIX",
    "JOB_ENDING",
    "PERIODIC_TIMEOUT_S",
    "WAITING_PREFIX",
    "let_waiting_leave",
    "recorded_state",
    "recorded_status",
    "task_file_name",
    "warning_time",
]

# `steps/N.cancelled`: the supervisor tells srun that step N was cancelled (scancel ID.N)
ABORTED_SUFFIX = ".cancelled"
# `steps/job.ending`: the job ends (scancel, time limit, preemption); an srun still waiting
# for its step's resources then says only that the step was refused, as slurmctld answers
JOB_ENDING = "job.ending"

# `steps/.waiting-PID`: srun PID waits for its step's resources. slurmctld refuses such a
# step as soon as the job ends, before slurmstepd signals the job's processes: the job's
# end lets them go first (`let_waiting_leave`), so that they say so and the script goes on
WAITING_PREFIX = ".waiting-"
_WAITING_SCAN = 4096  # directory entries looked at

PERIODIC_TIMEOUT_S = 30.0  # slurmctld.h: job_time_limit() runs this often (controller.c)

_FIELD = re.compile(r"%(\d*)([tnNjsJu%])")


def task_file_name(
    pattern: str | None,
    *,
    rank: int,
    node_index: int,
    node: str,
    job: str,
    step_id: int,
    user: str,
) -> str | None:
    """The name for one task (%t task, %n node index, %N node, %j job, %s step, %J
    job.step, %u user, %% a percent sign; a width as in %3t); None: srun's own stream."""
    if pattern is None or pattern == "none":
        return None
    values = {
        "t": str(rank),
        "n": str(node_index),
        "N": node,
        "j": job,
        "s": str(step_id),
        "J": f"{job}.{step_id}",
        "u": user,
        "%": "%",
    }
    return _FIELD.sub(lambda m: values[m.group(2)].zfill(int(m.group(1) or 0)), pattern)


def recorded_status(statuses: Mapping[int, int], node_of: Sequence[int]) -> int:
    """The step's exit status as slurmctld records it (sacct's ExitCode), from each task's
    wait status and the index of the node each rank ran on. Each node's slurmstepd reports
    the first of its tasks killed by a signal, else its last task's status (22.05's
    `_get_exit_code` keeps the last, not the highest: tasks 0 exit 3 and 1 exit 0 on one
    node give 0:0, as the test cluster shows); slurmctld keeps the highest node's."""
    per_node: dict[int, int] = {}
    signalled: set[int] = set()
    for rank in sorted(statuses):
        node, status = node_of[rank], statuses[rank]
        if node in signalled:
            continue
        per_node[node] = status
        if status & 0x7F:
            signalled.add(node)
    return max(per_node.values(), default=0)


def recorded_state(status: int) -> str:
    """The step's State for that status: a signal is CANCELLED, a code FAILED."""
    if status & 0x7F:
        return "CANCELLED"
    return "FAILED" if status else "COMPLETED"


def warning_time(deadline: float, lead_s: float, period_s: float, not_before: float) -> float:
    """When slurmctld's --signal warning reaches a job ending at `deadline`: at the first of
    its periodic time-limit checks (controller.c runs job_time_limit() every
    PERIODIC_TIMEOUT, on one clock for every job: here multiples of `period_s` since the
    epoch) at which the end is at most `lead_s + period_s` away (send_job_warn_signal), and
    not before `not_before`. A lead beyond the time limit is due at once, yet still waits
    for that check: a job that ends sooner gets no signal."""
    due = max(deadline - lead_s - period_s, not_before)
    return math.ceil(due / period_s) * period_s if period_s > 0 else due


def let_waiting_leave(dir_fd: int, limit_s: float = 3.0) -> None:
    """Wait (at most `limit_s`: a loaded machine) until no srun marked in the directory
    `dir_fd` still waits for its step (`WAITING_PREFIX`): each has been told the job ends
    and leaves (within a tenth of a second when it gets the CPU)."""
    deadline = time.monotonic() + limit_s
    waited = False
    while _waiting(dir_fd) and time.monotonic() < deadline:
        time.sleep(0.02)
        waited = True
    if waited:  # its shell, which reaped it, runs on a moment (`echo rc=$?`)
        time.sleep(0.1)


def _waiting(dir_fd: int) -> bool:
    try:
        names = os.listdir(dir_fd)[:_WAITING_SCAN]
    except OSError:
        return False
    for name in names:
        pid = name[len(WAITING_PREFIX) :]
        if not name.startswith(WAITING_PREFIX) or not pid.isdigit() or len(pid) > 9:
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            continue
        except OSError:  # alive, another user's (a pid reused: the wait is bounded)
            pass
        return True
    return False
