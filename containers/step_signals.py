"""Signals to a job's srun steps, as slurmstepd sends them: to every process of the running
steps (or of one step: `scancel ID.STEP`), tasks and what they started, found through srun's
records and checked to really be the job's processes.

A step cancelled alone is told as the test cluster tells it: srun's `Job step aborted`
line, slurmstepd's `*** STEP ID ON NODE CANCELLED AT ... ***` (named after the step's first
node), then SIGKILL to the step; srun is told through `steps/N.cancelled` (so it does not
add `Force Terminated`), and who cancelled it goes into `cancelled_steps.json` for sacct.
When the whole job ends (scancel, the time limit, a preemption), every running step is told
the same way before the job's SIGCONT and SIGTERM, and srun leaves its tasks to them.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from containers.proc import descendants
from containers.spool import open_dir, read_json, write_json
from containers.step_rules import ABORTED_SUFFIX, JOB_ENDING, let_waiting_leave
from containers.steprecords import CANCELLED_STEPS, srun_record, srun_records

__all__ = [
    "Telling",
    "abort_steps",
    "cancel_step",
    "note_cancelled",
    "running_steps",
    "signal_steps",
]


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


def signal_steps(
    jobdir: Path, uid: int, sig: int, only: str | None = None, telling: Telling | None = None
) -> None:
    """`sig` to the running steps' processes (slurmstepd signals the step's whole cgroup:
    a task's `sleep` dies of a USR1 its shell traps). A TERM from scancel (`telling`) is
    said first: slurmstepd's CANCELLED line for each running step, once; the steps may
    trap it and run on."""
    if sig == signal.SIGTERM and telling is not None:
        for step, record in srun_records(jobdir, uid).items():
            if record.get("state") == "RUNNING" and step.isdigit() and only in (None, step):
                telling.cancelled(step, record)
    for proc in _step_processes(jobdir, uid, only):
        with contextlib.suppress(psutil.Error, ProcessLookupError, PermissionError):
            proc.send_signal(sig)


@dataclass(frozen=True, slots=True)
class Telling:
    """How a step's abort is told: the job's id, KillWait, the time stamp, the reason
    (` DUE TO TIME LIMIT`...), `write`, which puts a line into the job's stderr, and the
    steps whose slurmstepd has already said CANCELLED (it says it once: `msg_sent`)."""

    ident: str
    kill_wait_s: float
    at: str
    why: str
    write: Callable[[str], None]
    told: set[str] = field(default_factory=set)

    def abort(self, jobdir: Path, step: str, record: dict[str, Any]) -> None:
        """srun's and slurmstepd's lines, then srun told through `steps/N.cancelled`."""
        wait = int(self.kill_wait_s) + 2  # KillWait + srun's STEP_ABORT_TIME
        self.write(f"srun: Job step aborted: Waiting up to {wait} seconds for job step to finish.")
        self.cancelled(step, record)
        _tell_srun(jobdir / "steps", f"{step}{ABORTED_SUFFIX}")

    def cancelled(self, step: str, record: dict[str, Any]) -> None:
        """slurmstepd's `*** STEP ID ON NODE CANCELLED AT ... ***` (named after the step's
        first node), once per step: also for a SIGTERM that scancel sends the step alone
        (`_handle_signal_container` says it for TERM and KILL)."""
        if step in self.told:
            return
        self.told.add(step)
        nodes = record.get("nodes")
        node = str(nodes[0]) if isinstance(nodes, list) and nodes else "localhost"
        what = f"STEP {self.ident}.{step} ON {node} CANCELLED AT {self.at}{self.why}"
        self.write(f"slurmstepd-{node}: error: *** {what} ***")


def cancel_step(jobdir: Path, uid: int, step: str, by: int, telling: Telling) -> None:
    """scancel ID.STEP by uid `by`: told, recorded for sacct, SIGKILL to that step."""
    record = srun_record(jobdir, int(step), uid) if step.isdigit() else None
    if record is None or record.get("state") != "RUNNING":
        return
    telling.abort(jobdir, step, record)
    note_cancelled(jobdir, {step: by})
    signal_steps(jobdir, uid, signal.SIGKILL, step)


def note_cancelled(jobdir: Path, by_step: dict[str, int]) -> None:
    """Who cancelled these steps, added to `cancelled_steps.json` (sacct's `CANCELLED by`)."""
    cancelled = read_json(jobdir / CANCELLED_STEPS)
    known = cancelled if isinstance(cancelled, dict) else {}
    write_json(jobdir / CANCELLED_STEPS, {**known, **by_step}, mode=0o600)


def abort_steps(jobdir: Path, uid: int, telling: Telling | None) -> None:
    """The job ends (scancel, its time limit, a preemption): each running step is told
    (`telling`; None: srun alone is told, no line) before the caller's SIGCONT and SIGTERM
    reach every process. srun, told, leaves its tasks to them: SIGKILL only after KillWait,
    as slurmstepd does (a task's TERM trap runs to its end on the test cluster). An srun
    still waiting for its step is told too (`steps/job.ending`) and let go first (it is
    refused before slurmstepd signals: step_rules.let_waiting_leave)."""
    _tell_srun(jobdir / "steps", JOB_ENDING)
    fd = open_dir(jobdir / "steps")
    if fd is not None:
        try:
            let_waiting_leave(fd)
        finally:
            os.close(fd)
    for step, record in srun_records(jobdir, uid).items():
        if record.get("state") != "RUNNING" or not step.isdigit():
            continue
        if telling is None:
            _tell_srun(jobdir / "steps", f"{step}{ABORTED_SUFFIX}")
        else:
            telling.abort(jobdir, step, record)


def running_steps(jobdir: Path, uid: int) -> bool:
    """Whether an srun step has not recorded its end yet."""
    return any(r.get("state") == "RUNNING" for r in srun_records(jobdir, uid).values())


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
