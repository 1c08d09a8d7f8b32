"""The backfill plan onto job records: what squeue --start and scontrol show for a pending job.

Kept out of the store on purpose: a plan is recomputed every cycle, so it is applied to
the in-memory records only (a record is replaced, never mutated, which is how the squeue
line cache and the API's encoded documents notice the change); a restart simply plans
again. Only records whose plan changed are replaced, so a steady queue costs no churn.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from gateway.compat.hostlist import compress
from gateway.model.job import Job
from gateway.model.state import JobState
from gateway.scheduler.backfill import Planned

__all__ = ["apply_plan"]


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
    planned: Mapping[int, Planned],
) -> tuple[list[Job], list[Job]]:
    """`changed` (records about to be committed) with their plans, and the other pending
    records whose plan changed (`current` reads the live record of a job id)."""
    out = [
        _planned(j, planned.get(j.job_id)) if j.state is JobState.PENDING else j for j in changed
    ]
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
        updated = _planned(live, planned.get(job.job_id))
        if updated is not live:
            others.append(updated)
    return out, others
