"""glibc 2.36's `qsort`, which is a top-down merge sort, replayed compare by compare.

Slurm sorts with `qsort` and comparators that are not strict orders (a zero start time is
always "greater"; hostlist's compare changes a range's zero-padding width as it compares),
so only the same merge, calling `cmp` in the same order, gives Slurm's order and ties.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

__all__ = ["msort"]

T = TypeVar("T")


def msort(items: Sequence[T], cmp: Callable[[T, T], int]) -> list[T]:
    """`items` in the order glibc's `qsort(items, cmp)` leaves them (stable on ties)."""
    n = len(items)
    if n <= 1:
        return list(items)
    n1 = n // 2
    left = msort(items[:n1], cmp)
    right = msort(items[n1:], cmp)
    out: list[T] = []
    i = j = 0
    while i < n1 and j < n - n1:
        if cmp(left[i], right[j]) <= 0:
            out.append(left[i])
            i += 1
        else:
            out.append(right[j])
            j += 1
    out.extend(left[i:])
    out.extend(right[j:])
    return out
