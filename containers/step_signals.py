"""Signals to a job's srun steps, as slurmstepd sends them: to every process of the running
steps (or of one step: `scancel ID.STEP`), tasks and what they started, found through srun's
records and checked to really be the job's processes.

A step cancelled alone is told as the test cluster tells it: srun's `Job step aborted`
line, slurmstepd's `*** STEP ID ON NODE CANCELLED AT ... ***` (named after the step's first
node), then SIGKILL to the step; srun is told through `steps/N.cancelled` (so it does not
add `Force Terminated`), and who cancelled it goes into `cancelled_steps.json` for sacct.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from pathlib import Path

import psutil

from containers.proc import descendants
from containers.spool import open_dir, read_json, write_json
from containers.step_rules import ABORTED_SUFFIX
from containers.steprecords import CANCELLED_STEPS, srun_records

__all__ = ["cancel_step", "signal_steps"]


def _step_processes(jobdir: Path, uid: int, only: str | None) -> list[psutil.Process]:
    mine = {p.pid: p for p in descendants()}
    out: dict[int, psutil.Process] = {}
    for sid, data in srun_records(jobdir, uid).items():
        pids = data.get("task_pids")
        if data.get("state") != "RUNNING" or not isinstance(pids, list):
            continue
        if only is not None and sid != only:
            continue
        for task in (mine[pid] for pid in pids if isinstance(pid, int) and pid in mine):
            out[task.pid] = task
            with contextlib.suppress(psutil.Error):
                out.update((p.pid, p) for p in task.children(recursive=True))
    return list(out.values())


def signal_steps(jobdir: Path, uid: int, sig: int, only: str | None = None) -> None:
    """`sig` to the running steps' processes (slurmstepd signals the step's whole cgroup:
    a task's `sleep` dies of a USR1 its shell traps)."""
    for proc in _step_processes(jobdir, uid, only):
        with contextlib.suppress(psutil.Error, ProcessLookupError, PermissionError):
            proc.send_signal(sig)


def cancel_step(
    jobdir: Path,
    uid: int,
    step: str,
    by: int,
    *,
    ident: str,
    kill_wait_s: float,
    at: str,
    write: Callable[[str], None],
) -> None:
    """scancel ID.STEP by uid `by`; `write` puts a line into the job's stderr."""
    record = srun_records(jobdir, uid).get(step)
    if not step.isdigit() or record is None or record.get("state") != "RUNNING":
        return
    nodes = record.get("nodes")
    node = str(nodes[0]) if isinstance(nodes, list) and nodes else "localhost"
    wait = int(kill_wait_s) + 2  # KillWait + srun's STEP_ABORT_TIME
    write(f"srun: Job step aborted: Waiting up to {wait} seconds for job step to finish.")
    write(f"slurmstepd-{node}: error: *** STEP {ident}.{step} ON {node} CANCELLED AT {at} ***")
    cancelled = read_json(jobdir / CANCELLED_STEPS)
    by_step = cancelled if isinstance(cancelled, dict) else {}
    write_json(jobdir / CANCELLED_STEPS, {**by_step, step: by}, mode=0o600)
    _tell_srun(jobdir / "steps", f"{step}{ABORTED_SUFFIX}")
    signal_steps(jobdir, uid, signal.SIGKILL, step)


def _tell_srun(steps: Path, name: str) -> None:
    """An empty file `name` in the user's step directory, made through its descriptor
    (never followed, never an existing file)."""
    fd = open_dir(steps)
    if fd is None:
        return
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        os.close(os.open(name, flags, 0o644, dir_fd=fd))
    except OSError:
        pass
    finally:
        os.close(fd)
