"""squeue's ordering: first by start time (latest first, unknown last), then by each `-S`
key from last to first (default `P,t,-p`), each pass a glibc merge sort as squeue's
`list_sort` is, so ties keep slurmctld's (or the store's) order exactly as squeue does."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from gateway.compat.fmt_common import hostlist_compress
from gateway.model.state import JobState
from gateway.model.values import INFINITE, NO_VAL

if TYPE_CHECKING:
    from gateway.compat.squeue_fmt_fields import SqueueRow

__all__ = ["DEFAULT_SORT", "SortError", "sort_rows"]

DEFAULT_SORT = "P,t,-p"  # partition, compact state, priority (highest first)
_U32 = 0xFFFFFFFF


class SortError(ValueError):
    """`Invalid sort specification: X` (squeue exits 1)."""


Key = Callable[["SqueueRow"], Any]


def _start(row: SqueueRow) -> int:
    """The start time in whole seconds, as slurmctld's time_t: tasks an array started in
    one pass tie, and keep slurmctld's list order (task 1 first, as on the test cluster),
    not the order of their microseconds."""
    job = row.job
    start = job.expected_start or 0
    if job.state is JobState.PENDING and start < row.now:
        return int(row.now)
    return int(start)


def _id_key(row: SqueueRow) -> tuple[int, int]:
    job = row.job
    ex = row.values.extras
    if ex.het_job_id:
        return ex.het_job_id, ex.het_job_offset
    if job.array_task_id is None:  # a job, or an array's pending meta record
        return job.job_id, NO_VAL
    return job.array_job_id, job.array_task_id


def _time_left(row: SqueueRow) -> int:
    limit = row.job.time_limit
    if limit in (INFINITE, NO_VAL):
        return INFINITE
    return limit * 60 - row.values.time_used(row.now)


def _u16(value: int | None) -> int:
    return 0xFFFE if value is None else value


_KEYS: dict[str, Key] = {
    "B": lambda r: r.values.batch_host or "",
    "C": lambda r: r.values.num_cpus,
    "d": lambda r: r.job.spec.tmp_mb or 0,
    "D": lambda r: r.values.num_nodes,
    "e": lambda r: int(r.job.end_time or 0),
    "g": lambda r: r.job.group,
    "G": lambda r: r.job.gid,
    "H": lambda r: _u16(r.job.spec.sockets_per_node),
    "i": _id_key,
    "I": lambda r: _u16(r.job.spec.cores_per_socket),
    "j": lambda r: r.job.spec.name,
    "J": lambda r: _u16(r.job.spec.threads_per_core),
    "l": lambda r: r.job.time_limit,
    "L": _time_left,
    "m": lambda r: r.values.memory[0],
    "M": lambda r: r.values.time_used(r.now),
    "N": lambda r: hostlist_compress(r.job.nodes),
    "p": lambda r: (0, r.job.priority & _U32),
    "P": lambda r: r.partition,
    "Q": lambda r: (0, r.job.priority & _U32),
    "S": _start,
    "t": lambda r: r.job.state.code,
    "T": lambda r: r.job.state.long,
    "u": lambda r: r.job.user,
    "U": lambda r: r.job.uid,
    "v": lambda r: r.job.spec.reservation or "",
    "V": lambda r: int(r.job.submit_time),
    "z": lambda r: (
        _u16(r.job.spec.sockets_per_node),
        _u16(r.job.spec.cores_per_socket),
        _u16(r.job.spec.threads_per_core),
    ),
}
_IGNORED = set("bcfhnO")  # accepted by squeue, no effect


def _by_start(rows: list[SqueueRow], reverse: bool) -> list[SqueueRow]:
    """squeue's start-time pass: glibc's merge sort under a comparator that calls a row
    without a start time "greater" than any row, even another such row. In every merge
    the rows with a start time come first, in stable order, then the right half's rows
    without one, then the left half's: over the whole sort, the latter end up reversed.
    The same order as replaying the merge (the tests check both), in O(n log n) C."""
    known = [r for r in rows if r.job.expected_start]
    unknown = [r for r in rows if not r.job.expected_start]
    unknown.reverse()
    return [*sorted(known, key=_start, reverse=reverse), *unknown]


def _by_key(rows: list[SqueueRow], letter: str, reverse: bool) -> list[SqueueRow]:
    """A pass on one `-S` key: its comparator is a total order (strings as strcmp compares
    their bytes), so any stable sort, here Python's, leaves glibc's merge sort's order."""
    key = _KEYS[letter]
    keys = [key(r) for r in rows]
    if any(isinstance(k, str) for k in keys):
        keys = [k.encode() for k in keys]
    order = sorted(range(len(rows)), key=keys.__getitem__, reverse=reverse)
    return [rows[i] for i in order]


def sort_rows(rows: Sequence[SqueueRow], sort: str | None, now: float) -> list[SqueueRow]:
    """Order rows as squeue does (`sort_jobs_by_start_time` then `sort_job_list`)."""
    del now  # each row carries it
    out = _by_start(list(rows), True)
    spec = sort if sort is not None else DEFAULT_SORT
    i = len(spec) - 1
    while i >= 0:
        ch = spec[i]
        if ch in ",+-":
            i -= 1
            continue
        reverse = i > 0 and spec[i - 1] == "-"
        if spec[: i + 1].lower().endswith("cluster"):
            i -= len("cluster")
            continue  # one cluster: nothing to order
        if ch in _IGNORED:
            i -= 1
            continue
        if ch not in _KEYS:
            raise SortError(f"Invalid sort specification: {ch}")
        out = _by_start(out, reverse) if ch == "S" else _by_key(out, ch, reverse)
        i -= 1
    return out
