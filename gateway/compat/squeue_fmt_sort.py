"""squeue's ordering: first by start time (latest first, unknown last), then by each `-S`
key from last to first (default `P,t,-p`), each pass a glibc merge sort as squeue's
`list_sort` is, so ties keep slurmctld's (or the store's) order exactly as squeue does."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from gateway.compat.fmt_common import hostlist_compress, msort
from gateway.model.state import JobState
from gateway.model.values import INFINITE, NO_VAL

if TYPE_CHECKING:
    from gateway.compat.squeue_fmt_fields import SqueueRow

__all__ = ["DEFAULT_SORT", "SortError", "sort_rows"]

DEFAULT_SORT = "P,t,-p"  # partition, compact state, priority (highest first)
_U32 = 0xFFFFFFFF


class SortError(ValueError):
    """`Invalid sort specification: X` (squeue exits 1)."""


def _sign(a: Any, b: Any) -> int:
    return int(a > b) - int(a < b)


def _strcmp(a: str | None, b: str | None) -> int:
    # xstrcmp: NULL sorts before any string
    if a is None or b is None:
        return _sign(a is not None, b is not None)
    return _sign(a.encode(), b.encode())


Key = Callable[["SqueueRow"], Any]


def _start(row: SqueueRow) -> float:
    job = row.job
    start = job.start_time or 0
    if job.state is JobState.PENDING and start < row.now:
        return row.now
    return start


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


def _cmp_for(letter: str, reverse: bool) -> Callable[[SqueueRow, SqueueRow], int]:
    key = _KEYS[letter]

    if letter == "S":

        def cmp_start(a: SqueueRow, b: SqueueRow) -> int:
            # squeue: an unknown start time is "greater" whatever the order asked for
            if not a.job.start_time:
                return 1
            if not b.job.start_time:
                return -1
            diff = _sign(_start(a), _start(b))
            return -diff if reverse else diff

        return cmp_start

    def cmp(a: SqueueRow, b: SqueueRow) -> int:
        ka, kb = key(a), key(b)
        diff = _strcmp(ka, kb) if isinstance(ka, str) else _sign(ka, kb)
        return -diff if reverse else diff

    return cmp


def sort_rows(rows: Sequence[SqueueRow], sort: str | None, now: float) -> list[SqueueRow]:
    """Order rows as squeue does (`sort_jobs_by_start_time` then `sort_job_list`)."""
    del now  # each row carries it
    out = msort(list(rows), _cmp_for("S", True))
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
        out = msort(out, _cmp_for(ch, reverse))
        i -= 1
    return out
