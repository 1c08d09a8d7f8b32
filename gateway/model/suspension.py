"""Suspending and resuming a job record, and the clocks suspension pauses (pure).

Slurm 22.05's bookkeeping (slurmctld job_mgr.c `_suspend_job`/`_resume_job_nodes`,
`job_time_used`), checked on the burst test cluster (tests/data/slurm_suspend_22.05.json):

- suspend: JobState SUSPENDED, Reason unchanged, SuspendTime = now, SecsPreSuspend = the
  seconds run so far; an operator's suspend (`scontrol suspend`) also sets Priority 0 so
  that nothing resumes the job but `scontrol resume` (a preemption's does not);
- resume: RUNNING, SuspendTime = now (the resume), the pause is added to the suspended
  total (sacct `Suspended`) and to EndTime (the time limit clock stood still);
- RunTime: SecsPreSuspend while suspended, SecsPreSuspend + (now - SuspendTime) after a
  resume; sacct Elapsed = end - start - suspended.

Suspending a suspended job again succeeds and changes nothing but the priority (as
slurmctld's re-suspend of an operator); refusals are gateway/control/suspend.py's.
"""

from __future__ import annotations

from dataclasses import replace

from gateway.model.job import Job
from gateway.model.state import JobState

__all__ = [
    "SUSPENDED_BY_OPERATOR",
    "caldera_suspended",
    "ended_suspended",
    "expected_end",
    "resumed",
    "run_seconds",
    "suspended",
    "suspended_seconds",
]

SUSPENDED_BY_OPERATOR = 0  # Job.suspended_by for `scontrol suspend` (else: the preemptor)


def run_seconds(job: Job, now: float) -> int:
    """`job_time_used`: the seconds the job has run, suspensions left out."""
    if job.start_time is None or job.state is JobState.PENDING:
        return 0
    if job.state is JobState.SUSPENDED:
        return job.pre_sus_time
    end = now if job.state.is_active or not job.end_time else job.end_time
    if job.suspend_time:
        return max(int(end - job.suspend_time) + job.pre_sus_time, 0)
    return max(int(end) - int(job.start_time), 0)


def suspended_seconds(job: Job, now: float) -> int:
    """sacct `Suspended`: every pause so far, the current one included."""
    if job.state is JobState.SUSPENDED and job.suspend_time is not None:
        return job.suspended_s + max(int(now - job.suspend_time), 0)
    return job.suspended_s


def suspended(job: Job, now: float, by: int) -> Job:
    """The running job stopped at `now` by `by` (SUSPENDED_BY_OPERATOR or a preemptor);
    already suspended: only an operator's hold on its priority is added."""
    hold = by == SUSPENDED_BY_OPERATOR
    now = float(int(now))  # whole seconds, as slurmctld's time_t: the clocks add up exactly
    if job.state is JobState.SUSPENDED:
        if not hold:
            return job
        return replace(job, priority=0, suspended_by=SUSPENDED_BY_OPERATOR)
    return replace(
        job,
        state=JobState.SUSPENDED,
        pre_sus_time=run_seconds(job, now),
        suspend_time=now,
        suspended_by=by,
        priority=0 if hold else job.priority,
    )


def resumed(job: Job, now: float, priority: int) -> Job:
    """The suspended job running again at `now` with `priority` (slurmctld recomputes it)."""
    now = float(int(now))
    paused = max(int(now - (job.suspend_time or now)), 0)
    return replace(
        job,
        state=JobState.RUNNING,
        suspend_time=now,
        suspended_s=job.suspended_s + paused,
        suspended_by=None,
        priority=priority,
    )


def ended_suspended(before: Job, after: Job) -> Job:
    """A job that ends while suspended (scancel, a lost node) ended, for the record, when
    it was suspended: slurmctld sets end_time = suspend_time (checked on the burst
    cluster: EndTime = SuspendTime, RunTime = SecsPreSuspend, and sacct's Suspended leaves
    the last pause out, so Elapsed = RunTime)."""
    if before.state is not JobState.SUSPENDED or not after.state.is_finished:
        return after
    return replace(after, end_time=before.suspend_time or after.end_time, suspended_by=None)


def caldera_suspended(job: Job) -> bool:
    """Suspended by the gateway itself (scontrol suspend, a preemption): what a backend
    reports about the stopped run must not make it RUNNING again."""
    return job.state is JobState.SUSPENDED and job.suspended_by is not None


def expected_end(job: Job, limit_s: float) -> float:
    """EndTime of a started job with a limit: start + limit + the pauses before the last
    resume (slurmctld moves end_time on each resume, not while suspended)."""
    return (job.start_time or 0.0) + limit_s + job.suspended_s
