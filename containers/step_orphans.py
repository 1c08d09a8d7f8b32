"""srun steps whose srun died without recording their end, ended as slurmstepd ends them.

An srun killed with SIGKILL cannot record anything. On the test cluster its step does not
run on to the job's end: slurmstepd loses srun's connection, SIGKILLs the step's tasks at
once and slurmctld records the step `CANCELLED by <the job's uid>`, ExitCode 0:9, ended
then (its `*** STEP ... CANCELLED ***` line goes to srun's dead connection, so the job's
output has none). The supervisor looks for such steps about once a second and closes
them the same way: tasks killed, the verdict in its own `closed_steps.json`, who in
`cancelled_steps.json`.
"""

from __future__ import annotations

import contextlib
import signal
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil

from containers.proc import descendants
from containers.spool import parse_step, read_json, step_to_json, write_json
from containers.step_signals import note_cancelled, signal_steps
from containers.steprecords import CLOSED_STEPS, srun_record, srun_records
from gateway.model.job import Step, wait_status
from gateway.model.state import JobState

__all__ = ["OrphanWatch", "close_steps", "killed_step"]

_CHECK_EVERY_S = 1.0


def killed_step(step: Step, end: float) -> Step:
    """A running step ended by SIGKILL at `end` (slurmstepd's verdict: CANCELLED, 0:9)."""
    return replace(
        step, state=JobState.CANCELLED, end_time=end, exit_code=wait_status(signal=signal.SIGKILL)
    )


def close_steps(jobdir: Path, steps: list[Step]) -> None:
    """Add these verdicts to the supervisor's `closed_steps.json` (earlier ones kept)."""
    if not steps:
        return
    closed = read_json(jobdir / CLOSED_STEPS)
    merged: dict[str, Any] = dict(closed) if isinstance(closed, dict) else {}
    merged.update((s.step_id, step_to_json(s)) for s in steps)
    write_json(jobdir / CLOSED_STEPS, merged)


class OrphanWatch:
    """Finds and ends a batch job's running steps whose srun is gone."""

    def __init__(self, jobdir: Path, job_id: int, uid: int) -> None:
        self.dir, self.job_id, self.uid = jobdir, job_id, uid
        self.next_check = 0.0
        self.closed: set[str] = set()  # ended: by srun's own record, or closed here

    def check(self, now: float) -> None:
        """At most once a second: close every orphaned step (see the module's docstring)."""
        if now < self.next_check:
            return
        self.next_check = now + _CHECK_EVERY_S
        orphans = self._orphans()
        if not orphans:
            return
        for sid in orphans:
            signal_steps(self.dir, self.uid, signal.SIGKILL, sid)
        note_cancelled(self.dir, dict.fromkeys(orphans, self.uid))
        close_steps(self.dir, [killed_step(step, now) for step in orphans.values()])
        self.closed.update(orphans)

    def _orphans(self) -> dict[str, Step]:
        records: dict[str, dict[str, Any]] = {}
        for sid, data in srun_records(self.dir, self.uid, self.closed).items():
            if data.get("state") == "RUNNING":
                records[sid] = data
            else:  # a step's end is final: its record is not read again (a farm's thousands)
                self.closed.add(sid)
        if not records:
            return {}
        alive = {p.pid for p in descendants() if _running(p)}
        out: dict[str, Step] = {}
        for sid, data in records.items():
            extra = data.get("extra")
            pid = extra.get("srun_pid") if isinstance(extra, dict) else None
            if not isinstance(pid, str) or not pid.isdigit() or int(pid) in alive:
                continue
            again = srun_record(self.dir, int(sid), self.uid)  # srun may have ended it since
            step = parse_step(again, self.job_id, sid) if again is not None else None
            if step is not None and step.state is JobState.RUNNING:
                out[sid] = replace(
                    step, extra={k: v for k, v in step.extra.items() if k != "requid"}
                )
        return out


def _running(proc: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        return proc.status() != psutil.STATUS_ZOMBIE
    return False
