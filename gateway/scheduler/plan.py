"""The backfill plan onto job records: what squeue --start and scontrol show for a pending job.

Kept out of the store on purpose: a plan is recomputed every cycle (every bf_interval for
the estimates of jobs that hold no reservation), so it is applied to the in-memory records
only (a record is replaced, never mutated, which is how the squeue line cache and the API's
encoded documents notice the change); a restart simply plans again. Only records whose
plan changed are replaced, so a steady queue costs no churn.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from gateway.compat.hostlist import compress
from gateway.model.job import Job
from gateway.model.state import JobState, Reason
from gateway.scheduler.backfill import Planned
from gateway.scheduler.cycle import CycleResult

__all__ = ["apply_plan", "eligible_since"]

# the reasons of a job that is not eligible yet: slurmctld's job_independent() sets its
# EligibleTime (details->begin_time) once no dependency, --begin or hold stops it
_NOT_ELIGIBLE = frozenset(
    {
        Reason.NONE,
        Reason.DEPENDENCY,
        Reason.DEPENDENCY_NEVER_SATISFIED,
        Reason.BEGIN_TIME,
        Reason.JOB_HELD_USER,
        Reason.JOB_HELD_ADMIN,
    }
)


def eligible_since(job: Job, now: float) -> Job:
    """A pending job the cycle found waiting for anything else (Resources, Priority, a
    limit) became eligible now, unless it already was: EligibleTime (and the age it
    accrues) then shows while it waits, as slurmctld's does."""
    if job.state is not JobState.PENDING or job.eligible_time is not None:
        return job
    if job.reason in _NOT_ELIGIBLE or job.hold is not None:
        return job
    return replace(job, eligible_time=now)


def _planned(job: Job, plan: Planned | None) -> Job:
    start = None if plan is None else plan.start
    nodes = None if plan is None else compress(list(plan.nodes))
    if job.sched_start == start and job.sched_nodes == nodes:
        return job
    return replace(job, sched_start=start, sched_nodes=nodes)


def apply_plan(
    changed: list[Job],
    pending: Iterable[Job],
    current: Callable[[int], Job | None],
    result: CycleResult,
) -> tuple[list[Job], list[Job]]:
    """`changed` (records about to be committed) with the cycle's plans, and the other
    pending records whose plan changed (`current` reads the live record of a job id). A
    cycle that made no round of estimates (bf_interval) replaces only the plans it made."""
    planned, fresh = result.planned, result.estimated

    def plan_of(job: Job) -> Job:
        if not fresh and job.job_id not in planned:
            return job
        return _planned(job, planned.get(job.job_id))

    out = [plan_of(eligible_since(j, result.now)) if j.state is JobState.PENDING else j
           for j in changed]  # fmt: skip
    seen = {j.job_id for j in changed}
    others: list[Job] = []
    for job in pending:
        if job.job_id in seen:
            continue
        live = current(job.job_id)
        if live is None or live.state is not JobState.PENDING:
            continue
        if live.sched_start is None and job.job_id not in planned:
            continue
        updated = plan_of(live)
        if updated is not live:
            others.append(updated)
    return out, others
