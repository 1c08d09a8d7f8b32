"""What the local backend reports, read from the spool: each run's start, steps and end.

Nothing here is kept in memory that the spool does not also hold (only which events were
already reported), so a new reader over the same spool (after the gateway was killed) reports
every run again from its files. A run whose supervisor died is ended and recorded as lost
here (containers.attempts) before it is reported; a finished run's directory is removed once
MinJobAge has passed since its end.
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from containers.attempts import (
    END_WAIT_S,
    SPAWN_GRACE_S,
    alive,
    job_lock,
    record_loss,
    release,
)
from containers.spool import LOG_ONLY, JobResult, SupervisorInfo, read_json
from containers.steprecords import read_steps
from gateway.model.backend import BackendEvent, EventKind, step_event
from gateway.model.job import Step
from gateway.model.state import JobState, Reason

__all__ = ["RunEvents", "Tracked", "end_event", "unknown_run_event"]

log = logging.getLogger("caldera.local")


@dataclass
class Tracked:
    """One run as the backend follows it: what was reported of it so far."""

    started: bool = False
    finished: bool = False  # its end was reported by poll/reconcile
    steps: dict[str, tuple[str, float | None]] = field(default_factory=dict)
    cpus: int = 0
    end_time: float | None = None  # of a finished run: when MinJobAge starts counting


class RunEvents:
    """The runs under `<spool>/jobs` of the node `node_name`."""

    def __init__(self, jobs_dir: Path, node_name: str) -> None:
        self.jobs_dir = jobs_dir
        self.node_name = node_name

    def job_dir(self, job_id: int, run: int = 0) -> Path:
        """The spool directory of one run of a job (a requeued job runs again: run > 0)."""
        return self.jobs_dir / (str(job_id) if run == 0 else f"{job_id}.{run}")

    def backend_id(self, job_id: int) -> str:
        return f"{self.node_name}:{job_id}"

    def steps(self, job_id: int, run: int = 0) -> list[Step]:
        """Every step recorded for a run (batch first, then srun steps in order); srun's
        records, written by the job's user, are read as containers.steprecords allows."""
        return read_steps(self.job_dir(job_id, run), job_id)

    def result(self, job_id: int, run: int = 0) -> JobResult | None:
        """How the run ended, if it has (no event consumed)."""
        return JobResult.from_json(read_json(self.job_dir(job_id, run) / "result.json"))

    def supervisor(self, jobdir: Path) -> SupervisorInfo | None:
        return SupervisorInfo.from_json(read_json(jobdir / "supervisor.json"))

    def events(self, job_id: int, tracked: Tracked, run: int = 0) -> list[BackendEvent]:
        """What happened to the run since `tracked` was last updated (started, steps, end)."""
        jobdir = self.job_dir(job_id, run)
        events: list[BackendEvent] = []
        info = self.supervisor(jobdir)
        bid = self.backend_id(job_id)
        if info is not None and not tracked.started:
            tracked.started = True
            events.append(
                BackendEvent(
                    job_id=job_id,
                    kind=EventKind.STARTED,
                    time=info.start_time,
                    state=JobState.RUNNING,
                    backend_id=bid,
                    run=run,
                )
            )
        events.extend(self.step_events(job_id, tracked, run))
        result = self.result(job_id, run)
        if result is None and not self._running(jobdir, info):
            # the supervisor died (kill -9, OOM): its orphans (processes, container) are ended
            # and the loss recorded before it is reported; never LOST while any may still run
            with job_lock(self.jobs_dir, job_id):
                result = self.result(job_id, run)  # it may have finished in between
                if result is None:
                    result = record_loss(jobdir, job_id, run, info, END_WAIT_S)
        if result is None:
            return events
        tracked.end_time = result.end_time
        tracked.finished = True
        if result.state is not JobState.NODE_FAIL:  # a recorded loss has no final steps
            events.extend(self.step_events(job_id, tracked, run))
            release(jobdir)
        events.append(end_event(job_id, run, result, bid))
        return events

    def step_events(self, job_id: int, tracked: Tracked, run: int = 0) -> list[BackendEvent]:
        """Steps that are new or changed since they were last reported."""
        events: list[BackendEvent] = []
        for step in self.steps(job_id, run):
            sig = (step.state.long, step.end_time)
            if tracked.steps.get(step.step_id) == sig:
                continue
            tracked.steps[step.step_id] = sig
            now = step.start_time or time.time()
            events.append(step_event(job_id, step, now, run, self.backend_id(job_id)))
        return events

    def _running(self, jobdir: Path, info: SupervisorInfo | None) -> bool:
        if info is not None:
            return alive(info)
        try:
            spawned = (jobdir / "spawned").stat().st_mtime
        except FileNotFoundError:
            return False
        return time.time() - spawned < SPAWN_GRACE_S

    # --- removal ------------------------------------------------------------------------------

    def expired(self, job_id: int, run: int, min_job_age: float) -> bool:
        """Whether the run ended at least `min_job_age` seconds ago (Slurm's MinJobAge)."""
        result = self.result(job_id, run)
        return result is not None and time.time() - result.end_time >= min_job_age

    def remove(self, job_id: int, run: int = 0) -> bool:
        """Remove a finished run's spool directory (once the gateway stored its result).
        rmtree works through directory descriptors and never follows a symlink (checked):
        the user's `steps/` inside cannot point it elsewhere."""
        jobdir = self.job_dir(job_id, run)
        if not (jobdir / "result.json").exists() or not shutil.rmtree.avoids_symlink_attacks:
            return False
        with job_lock(self.jobs_dir, job_id) as lock:
            release(jobdir)
            shutil.rmtree(jobdir, ignore_errors=True)
            if not any(self.jobs_dir.glob(f"{job_id}")) and not any(
                self.jobs_dir.glob(f"{job_id}.*")
            ):
                lock.drop()  # no run of the job is left (a later requeue starts a new file)
        return True

    def runs_on_disk(self) -> list[tuple[int, int]]:
        """(job id, run) of every run directory in the spool."""
        found: list[tuple[int, int]] = []
        try:
            entries = list(self.jobs_dir.iterdir())
        except OSError:
            return found
        for entry in entries:
            job, _, run = entry.name.partition(".")
            if job.isdigit() and (run == "" or run.isdigit()):
                found.append((int(job), int(run or 0)))
        return found


# --- the table: a run's spool records -> the gateway's event vocabulary ---------------------
#
#   supervisor.json appears             -> STARTED (RUNNING, the supervisor's start time)
#   a step record new or changed        -> STEP (the step, its state and exit code)
#   result.json, any state but NODE_FAIL -> FINISHED (the result's state, reason, codes)
#   result.json with NODE_FAIL           -> LOST (a supervisor that died; its loss recorded)
#   no `spawned` for a run the gateway
#   thinks is running (reconcile)       -> LOST (NODE_FAIL: "not known to the local backend")
#
# The nodes are left empty: the gateway placed the run, its placement names them.


def end_event(job_id: int, run: int, result: JobResult, backend_id: str) -> BackendEvent:
    """How a run ended (result.json) as the gateway's event: LOST for a recorded loss. What
    Slurm would write only to the node's log (why the job's files could not be opened) goes
    into the gateway's, not into the event (scontrol shows no words for it)."""
    if LOG_ONLY in result.extra:
        log.warning("job %s: launch failed: %s", job_id, result.extra[LOG_ONLY])
    if result.state is JobState.NODE_FAIL:
        return BackendEvent(
            job_id=job_id,
            kind=EventKind.LOST,
            time=result.end_time,
            state=JobState.NODE_FAIL,
            reason=Reason.NONE,
            backend_id=backend_id,
            run=run,
            message=result.message,
        )
    return BackendEvent(
        job_id=job_id,
        kind=EventKind.FINISHED,
        time=result.end_time,
        state=result.state,
        reason=result.reason,
        exit_code=result.exit_code,
        derived_exit_code=result.derived_exit_code,
        backend_id=backend_id,
        message=result.message,
        run=run,
    )


def unknown_run_event(job_id: int, run: int) -> BackendEvent:
    """A run the gateway holds as running that was never spawned here (reconcile)."""
    return BackendEvent(
        job_id=job_id,
        kind=EventKind.LOST,
        time=time.time(),
        state=JobState.NODE_FAIL,
        reason=Reason.NONE,
        run=run,
        message="not known to the local backend",
    )
