"""Slurm's view of a job as BackendEvents for the gateway (pure).

- a job found by its tag after its submission's answer was lost -> `SUBMITTED`;
- not finished -> the kind `slurm_plugin.statuses.EVENT_OF_STATE` names for Slurm's state
  (`PENDING` while Slurm queues it, `STARTED` once it runs, with Slurm's start time and
  nodes, `OBSERVED` for SUSPENDED, COMPLETING ...), with its reason: the gateway shows what
  Slurm shows;
- finished -> `FINISHED` with state, reason, wait status and derived exit code, end time;
- a Slurm job that neither slurmctld nor slurmdbd knows -> `LOST`;
- a job Caldera withdrew (cancelled while held, never started) -> `WITHDRAWN`, not an end:
  the gateway places the same run again;
- the cluster cannot be reached -> `OBSERVED` with the job's last known state and
  `Reason.CLUSTER_UNREACHABLE`;
- sacct steps -> `STEP` events with Caldera's job id.
"""

from __future__ import annotations

from gateway.model.backend import BackendEvent, EventKind
from gateway.model.state import JobState, Reason
from slurm_plugin.client import JobStatus
from slurm_plugin.mapping import reason_from_slurm
from slurm_plugin.statuses import event_kind

__all__ = [
    "finished_event",
    "lost_event",
    "state_event",
    "submitted_event",
    "unreachable_event",
    "withdrawn_event",
]


def _nodes(row: JobStatus, prefix: str) -> tuple[str, ...]:
    return tuple(prefix + n for n in row.nodes)


def state_event(job_id: int, row: JobStatus, prefix: str, now: float, run: int = 0) -> BackendEvent:
    """A job Slurm has not finished: its state, reason and nodes."""
    reason, text = reason_from_slurm(row.reason)
    return BackendEvent(
        job_id=job_id,
        kind=event_kind(row.state),
        time=row.start_time if row.start_time and row.state is not JobState.PENDING else now,
        state=row.state,
        reason=reason,
        nodes=_nodes(row, prefix) if row.state is not JobState.PENDING else (),
        backend_id=row.ref.text,
        message=text or row.state_desc,
        run=run,
        started_at=row.start_time if row.start_time and row.state.is_active else None,
    )


def finished_event(
    job_id: int, row: JobStatus, prefix: str, now: float, run: int = 0
) -> BackendEvent:
    """A job Slurm finished."""
    reason, text = reason_from_slurm(row.reason)
    return BackendEvent(
        job_id=job_id,
        kind=EventKind.FINISHED,
        time=row.end_time or now,
        state=row.state,
        reason=reason,
        exit_code=row.exit_code or 0,
        derived_exit_code=row.derived_exit_code or 0,
        nodes=_nodes(row, prefix),
        backend_id=row.ref.text,
        message=text or row.state_desc,
        run=run,
        started_at=row.start_time or None,
    )


def withdrawn_event(
    job_id: int, row: JobStatus, cluster: str, now: float, run: int = 0
) -> BackendEvent:
    """Caldera withdrew the job from Slurm before it started: the run waits again."""
    return BackendEvent(
        job_id=job_id,
        kind=EventKind.WITHDRAWN,
        time=row.end_time or now,
        backend_id=row.ref.text,
        message=f"withdrawn from cluster {cluster}",
        run=run,
    )


def submitted_event(job_id: int, row: JobStatus, now: float, run: int = 0) -> BackendEvent:
    """Slurm holds the job: found by its tag (the submission's answer was lost)."""
    return BackendEvent(
        job_id=job_id, kind=EventKind.SUBMITTED, time=now, backend_id=row.ref.text, run=run
    )


def lost_event(
    job_id: int, backend_id: str | None, now: float, why: str, run: int = 0
) -> BackendEvent:
    """Slurm does not know the job (never submitted, or its records are gone)."""
    return BackendEvent(
        job_id=job_id,
        kind=EventKind.LOST,
        time=now,
        backend_id=backend_id,
        message=why,
        run=run,
    )


def unreachable_event(
    job_id: int, state: JobState, backend_id: str | None, now: float, why: str, run: int = 0
) -> BackendEvent:
    """The job keeps its last known state; the reason says the cluster is unreachable."""
    return BackendEvent(
        job_id=job_id,
        kind=EventKind.OBSERVED,
        time=now,
        state=state,
        reason=Reason.CLUSTER_UNREACHABLE,
        backend_id=backend_id,
        message=why,
        run=run,
    )
