"""Dependency tests with Slurm's semantics (after, afterany, afterok, afternotok, aftercorr,
singleton; `,` all must hold, `?` any may hold; a job gone from the records lifts its item).
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

from gateway.model.job import Job
from gateway.model.state import JobState
from gateway.model.values import ALL_TASKS, Dependency, DepItem, DepKind
from gateway.scheduler.snapshot import DepTarget, Snapshot

__all__ = ["DepResult", "evaluate", "prune_missing"]


class DepResult(Enum):
    """The state of a job's dependencies."""

    SATISFIED = "satisfied"
    WAITING = "waiting"
    FAILED = "failed"  # can never be satisfied


def _one(item: DepItem, t: DepTarget, now: float) -> DepResult:
    finished = t.state.is_finished
    pending = t.state is JobState.PENDING or t.pending_tasks > 0
    if item.kind is DepKind.AFTER:
        if pending:
            return DepResult.WAITING
        started = t.start_time or 0
        if item.minutes and now - started < item.minutes * 60:
            return DepResult.WAITING
        return DepResult.SATISFIED
    if not finished:
        return DepResult.WAITING
    ok = t.state is JobState.COMPLETED and t.exit_code == 0
    if item.kind in (DepKind.AFTER_ANY, DepKind.AFTER_BURST_BUFFER):
        return DepResult.SATISFIED
    if item.kind in (DepKind.AFTER_OK, DepKind.AFTER_CORR):
        return DepResult.SATISFIED if ok else DepResult.FAILED
    if item.kind is DepKind.AFTER_NOT_OK:
        return DepResult.FAILED if ok else DepResult.SATISFIED
    return DepResult.SATISFIED


def _combine_all(results: list[DepResult]) -> DepResult:
    if DepResult.FAILED in results:
        return DepResult.FAILED
    if DepResult.WAITING in results:
        return DepResult.WAITING
    return DepResult.SATISFIED


def _item(job: Job, item: DepItem, snap: Snapshot) -> DepResult:
    if item.kind is DepKind.SINGLETON:
        others = [j for j in snap.by_user_name.get((job.uid, job.spec.name), ()) if j < job.job_id]
        return DepResult.WAITING if others else DepResult.SATISFIED
    targets = snap.dep_targets.get(item.job_id, ())
    if item.kind is DepKind.AFTER_CORR and job.array_task_id is not None:
        task = job.array_task_id
        targets = tuple(t for t in targets if t.array_task_id in (task, None))
        mine = [t for t in targets if t.array_task_id == task]
        if mine:
            targets = tuple(mine)
        elif any(t.pending_tasks for t in targets):
            return DepResult.WAITING
        else:
            return DepResult.SATISFIED  # the corresponding task does not exist
    elif item.task is not None and item.task != ALL_TASKS:
        targets = tuple(t for t in targets if t.array_task_id == item.task)
    if not targets:
        return DepResult.SATISFIED  # the job is gone: Slurm lifts the dependency
    return _combine_all([_one(item, t, snap.now) for t in targets])


def evaluate(job: Job, dep: Dependency, snap: Snapshot) -> DepResult:
    """Where a job's dependencies stand now."""
    results = [_item(job, item, snap) for item in dep.items]
    if not dep.any_of:
        return _combine_all(results)
    if DepResult.SATISFIED in results:
        return DepResult.SATISFIED
    if DepResult.WAITING in results:
        return DepResult.WAITING
    return DepResult.FAILED


def prune_missing(dep: Dependency, exists: Callable[[int], bool]) -> Dependency | None:
    """What slurmctld keeps when it first tests a dependency: items naming a job it has no
    record of are dropped, and with `?` such an item satisfies the whole expression."""
    kept = tuple(i for i in dep.items if i.kind is DepKind.SINGLETON or exists(i.job_id))
    if len(kept) == len(dep.items):
        return dep
    if dep.any_of or not kept:
        return None
    return Dependency(kept)
