"""Array bookkeeping: splitting a task off an array's pending set, and naming targets
(`123`, `123_4`, `123_[1-3]`) the way scancel and scontrol accept them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from gateway.compat.cnum import strtol
from gateway.model.job import Job
from gateway.model.values import ArraySpec, IndexRange

__all__ = [
    "Target",
    "names_no_active_job",
    "one_per_task",
    "parse_targets",
    "remove_index",
    "split_task",
]


def remove_index(spec: ArraySpec, index: int) -> ArraySpec | None:
    """The pending set without `index`; None when nothing is left."""
    ranges: list[IndexRange] = []
    for r in spec.ranges:
        if index not in r:
            ranges.append(r)
            continue
        if r.first < index:
            last = index - r.step
            ranges.append(IndexRange(r.first, last, r.step if last > r.first else 1))
        if index < r.last:
            first = index + r.step
            ranges.append(IndexRange(first, r.last, r.step if r.last > first else 1))
    if not ranges:
        return None
    return ArraySpec(tuple(ranges), spec.throttle)


@dataclass(frozen=True, slots=True)
class Target:
    """A job id with, for arrays, the task indices meant (None: the whole job or array)."""

    job_id: int
    tasks: tuple[int, ...] | None = None


def _indices(body: str) -> tuple[int, ...] | None:
    out: list[int] = []
    for part in body.split(","):
        lo, dash, hi = part.partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            return None
        a, b = int(lo), int(hi) if dash else int(lo)
        if b < a or b - a + len(out) > 4_000_000:  # in all, not per range
            return None
        out.extend(range(a, b + 1))
    return tuple(out)


def parse_targets(text: str) -> list[Target] | None:
    """Job ids as scancel/scontrol read them; None when one is malformed.

    Accepts `12`, `12_3`, `12_[1-3,7]`, and lists of those separated by commas or spaces.
    """
    out: list[Target] = []
    i = 0
    s = text.strip()
    while i < len(s):
        if s[i] in ", ":
            i += 1
            continue
        value, end = strtol(s, i)
        if end == i or value <= 0 or value >= 2**32:
            return None
        tasks: tuple[int, ...] | None = None
        if s[end : end + 2] == "_[":
            close = s.find("]", end)
            if close < 0:
                return None
            tasks = _indices(s[end + 2 : close])
            if tasks is None:
                return None
            end = close + 1
        elif s[end : end + 1] == "_":
            t, end2 = strtol(s, end + 1)
            if end2 == end + 1 or t < 0:
                return None
            tasks, end = (t,), end2
        if end < len(s) and s[end] not in ", ":
            return None
        out.append(Target(value, tasks))
        i = end
    return out


def split_task(meta: Job, index: int, new_id: Callable[[], int]) -> tuple[Job, Job | None]:
    """Take one pending task out of an array meta record: (task record, new meta), the
    meta being None when it was the last task (the record becomes that task, as in
    slurmctld)."""
    assert meta.array_pending is not None
    remaining = remove_index(meta.array_pending, index)
    if remaining is None:
        return replace(meta, array_task_id=index, array_pending=None), None
    task = replace(meta, job_id=new_id(), array_task_id=index, array_pending=None)
    return task, replace(meta, array_pending=remaining)


def one_per_task(targets: list[Target]) -> list[Target]:
    """`12_[1-3]` as scancel lists it, three ids (`12_1`, `12_2`, `12_3`), one per task."""
    return [
        t2
        for t in targets
        for t2 in ([t] if t.tasks is None else [Target(t.job_id, (i,)) for i in t.tasks])
    ]


def names_no_active_job(targets: list[Target], jobs: list[Job]) -> list[Target]:
    """The targets that name no unfinished job, as scancel's `_verify_job_ids` finds them
    (a task id names a running task or an index still pending in its array's record)."""
    by_id: dict[int, list[Job]] = {}
    for job in jobs:
        if job.state.is_finished:
            continue
        by_id.setdefault(job.job_id, []).append(job)
        if job.array_job_id and job.array_job_id != job.job_id:
            by_id.setdefault(job.array_job_id, []).append(job)

    def named(t: Target, job: Job) -> bool:
        if t.tasks is None:
            return True
        if job.array_job_id != t.job_id:
            return False
        if job.array_task_id is not None:
            return job.array_task_id in t.tasks
        pending = job.array_pending
        return pending is not None and any(i in pending for i in t.tasks)

    return [t for t in targets if not any(named(t, j) for j in by_id.get(t.job_id, ()))]
