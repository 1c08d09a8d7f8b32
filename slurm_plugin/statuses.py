"""JobStatus rows from the model records that `from_slurm_json` builds (squeue/slurmrestd)."""

from __future__ import annotations

from gateway.model.job import Job
from gateway.model.state import Reason
from slurm_plugin.mapping import SlurmRef

__all__ = ["status_from_job"]

from slurm_plugin.client import JobStatus


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
