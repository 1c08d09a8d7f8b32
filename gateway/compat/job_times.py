"""AccrueTime and LastSchedEval of Caldera's own job records, as slurmctld would keep them.

slurmctld reports both for every job (`scontrol show job`); a record that came from a real
slurmctld carries them in its `JobExtras`, Caldera's own records do not, and they are
derived here from what the record does hold.
"""

from __future__ import annotations

from gateway.compat.fmt_common import JobExtras
from gateway.model.job import Job
from gateway.model.state import JobState

__all__ = ["own_extras"]


def own_extras(job: Job, now: float) -> JobExtras:
    """The extras of a Caldera record: AccrueTime is when a job outside an array became
    eligible (priority/basic starts its age then; an array's records accrue by slurmctld's
    scheduling passes, left Unknown); LastSchedEval is when the scheduler started it, or
    for a waiting job its evaluation at submission."""
    eligible = job.eligible_time
    accrue = None
    if not job.array_job_id and eligible is not None and eligible <= now:
        accrue = eligible
    started = job.start_time is not None and job.state is not JobState.PENDING
    return JobExtras(
        accrue_time=accrue,
        last_sched_eval=job.start_time if started else job.submit_time or None,
    )
