"""squeue's order by key sorts is the order of glibc's merge sort replayed compare by compare.

The sort passes were rewritten from a replay of `qsort` (10,000 jobs: 740 ms) to Python's
sort (issue 14: squeue with 10,000 jobs queued). The replay is kept here as the reference,
with squeue's comparators as they were, and both must agree on jobs full of ties, jobs
without a start time (the comparator that is not an order) and every key.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from gateway.compat.glibc_sort import msort
from gateway.compat.job_fmt_values import job_values
from gateway.compat.squeue_fmt import SqueueOptions
from gateway.compat.squeue_fmt_fields import SqueueRow
from gateway.compat.squeue_fmt_sort import _KEYS, _start, sort_rows
from gateway.model.state import JobState
from tests.support.builders import make_job

NOW = 1_800_000_000.0


def _sign(a: Any, b: Any) -> int:
    return int(a > b) - int(a < b)


def _reference_cmp(letter: str, reverse: bool) -> Callable[[SqueueRow, SqueueRow], int]:
    """squeue's comparators as the formatter replayed them before."""
    key = _KEYS[letter]
    if letter == "S":

        def cmp_start(a: SqueueRow, b: SqueueRow) -> int:
            if not a.job.start_time:
                return 1
            if not b.job.start_time:
                return -1
            diff = _sign(_start(a), _start(b))
            return -diff if reverse else diff

        return cmp_start

    def cmp(a: SqueueRow, b: SqueueRow) -> int:
        ka, kb = key(a), key(b)
        diff = _sign(ka.encode(), kb.encode()) if isinstance(ka, str) else _sign(ka, kb)
        return -diff if reverse else diff

    return cmp


def _reference(rows: list[SqueueRow], spec: str) -> list[SqueueRow]:
    out = msort(rows, _reference_cmp("S", True))
    i = len(spec) - 1
    while i >= 0:
        ch = spec[i]
        if ch in ",+-":
            i -= 1
            continue
        out = msort(out, _reference_cmp(ch, i > 0 and spec[i - 1] == "-"))
        i -= 1
    return out


def _rows(seed: int, n: int) -> list[SqueueRow]:
    rng = random.Random(seed)
    jobs = []
    for i in range(1, n + 1):
        b = make_job(i).name(rng.choice(["a", "b", "é", "B", "aa"])).user(rng.choice([0, 1001]))
        if rng.random() < 0.5:
            start = rng.choice([NOW - 50, NOW - 10, NOW + 30])
            b = b.state(rng.choice([JobState.RUNNING, JobState.PENDING]), start_time=start)
        jobs.append(
            replace(
                b.build(),
                priority=rng.choice([0, 5, 5, 9]),
                partition=rng.choice(["debug", "gpu", "cpu"]),
                time_limit=rng.choice([1, 5, 60]),
                submit_time=rng.choice([NOW - 100, NOW - 200]),
            )
        )
    site = SqueueOptions().site
    return [
        SqueueRow(job_values(j, None, site), NOW, j.partition, j.array_task_id, None) for j in jobs
    ]


@pytest.mark.parametrize("spec", ["", "P,t,-p", "S", "-S", "i", "-j,u", "V,l,-L", "-e,M,D,C"])
@pytest.mark.parametrize("seed", range(6))
def test_key_sorts_leave_glibc_merge_sorts_order(spec: str, seed: int) -> None:
    rows = _rows(seed, 1 + seed * 37)
    got = [r.job.job_id for r in sort_rows(rows, spec, NOW)]
    want = [r.job.job_id for r in _reference(rows, spec)]
    assert got == want


def test_rows_without_a_start_time_come_last_and_reversed() -> None:
    rows = _rows(99, 64)
    unknown = [r.job.job_id for r in rows if not r.job.start_time]
    got = [r.job.job_id for r in sort_rows(rows, "", NOW)]  # the start-time pass alone
    assert 0 < len(unknown) < len(rows)
    assert got[-len(unknown) :] == unknown[::-1]


def test_jobs_started_in_the_same_second_keep_the_list_order() -> None:
    """slurmctld's start times are whole seconds: three array tasks started in one pass
    tie and stay in list order (task 1 first, as the test cluster lists them), whatever
    the microseconds of Caldera's start times; a later second still comes first."""
    site = SqueueOptions().site
    starts = {1: NOW, 2: NOW + 0.3, 3: NOW + 0.6, 4: NOW + 1.0}  # started in that order
    jobs = [
        replace(make_job(i).state(JobState.RUNNING, start_time=t).build(), priority=5)
        for i, t in starts.items()
    ]
    rows = [SqueueRow(job_values(j, None, site), NOW, j.partition, None, None) for j in jobs]
    assert [r.job.job_id for r in sort_rows(rows, "P,t,-p", NOW)] == [4, 1, 2, 3]
