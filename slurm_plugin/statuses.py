"""Slurm's job states as Caldera sees them: the one table from a Slurm state to the event
vocabulary (`EVENT_OF_STATE`), and JobStatus rows from the model records that
`from_slurm_json` builds (squeue/slurmrestd)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from gateway.model.backend import EventKind
from gateway.model.job import Job
from gateway.model.state import JobState, Reason
from slurm_plugin.client import JobStatus
from slurm_plugin.mapping import SlurmRef

__all__ = ["EVENT_OF_STATE", "event_kind", "status_from_job"]

# Every state squeue/sacct/slurmrestd can report, and the event the watcher reports it as.
# Slurm places its jobs itself: its queue (PD) and its other non-final states are mirrored,
# only RUNNING is a start. REQUEUED/REQUEUE_HOLD/RESIZING are passing states of one Slurm job.
EVENT_OF_STATE: Mapping[JobState, EventKind] = MappingProxyType(
    {
        JobState.PENDING: EventKind.PENDING,
        JobState.REQUEUED: EventKind.PENDING,
        JobState.REQUEUE_HOLD: EventKind.PENDING,
        JobState.RUNNING: EventKind.STARTED,
        JobState.CONFIGURING: EventKind.OBSERVED,
        JobState.SUSPENDED: EventKind.OBSERVED,
        JobState.COMPLETING: EventKind.OBSERVED,
        JobState.SIGNALING: EventKind.OBSERVED,
        JobState.STAGE_OUT: EventKind.OBSERVED,
        JobState.STOPPED: EventKind.OBSERVED,
        JobState.RESIZING: EventKind.OBSERVED,
        JobState.COMPLETED: EventKind.FINISHED,
        JobState.CANCELLED: EventKind.FINISHED,
        JobState.FAILED: EventKind.FINISHED,
        JobState.TIMEOUT: EventKind.FINISHED,
        JobState.PREEMPTED: EventKind.FINISHED,
        JobState.NODE_FAIL: EventKind.FINISHED,
        JobState.BOOT_FAIL: EventKind.FINISHED,
        JobState.DEADLINE: EventKind.FINISHED,
        JobState.OUT_OF_MEMORY: EventKind.FINISHED,
        JobState.SPECIAL_EXIT: EventKind.FINISHED,
        JobState.REVOKED: EventKind.FINISHED,
    }
)


def event_kind(state: JobState) -> EventKind:
    """The event a Slurm job in `state` is reported as."""
    return EVENT_OF_STATE[state]


def status_from_job(job: Job) -> JobStatus:
    """A squeue-JSON / slurmrestd job record (as a Job of Slurm's ids) as a JobStatus.

    Their `exit_code` and `derived_exit_code` are wait statuses and correct in 22.05
    (unlike sacct's JSON)."""
    task = job.array_task_id
    ref = (
        SlurmRef(job.array_job_id, task)
        if task is not None and job.array_job_id
        else SlurmRef(job.job_id, None)
    )
    reason = job.reason.value if job.reason is not Reason.NONE else (job.state_desc or "None")
    return JobStatus(
        ref=ref,
        state=job.state,
        reason=reason,
        state_desc=job.state_desc,
        user=job.user,
        name=job.spec.name,
        partition=job.partition,
        comment=job.spec.comment or "",
        nodes=job.nodes,
        submit_time=job.submit_time or None,
        start_time=job.start_time,
        end_time=job.end_time,
        exit_code=job.exit_code,
        derived_exit_code=job.derived_exit_code,
        restart_count=job.restart_count,
        time_limit=job.time_limit,
        array_job_id=job.array_job_id if task is not None else 0,
        extra={"job_id": str(job.job_id)},
    )
