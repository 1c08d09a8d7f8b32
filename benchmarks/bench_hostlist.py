"""Timings of `gateway.compat.hostlist` on typical and large inputs.

Run: `python benchmarks/bench_hostlist.py` (best of five runs, milliseconds).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from gateway.compat.hostlist import compress, compress_sorted, count, expand, uniq


def _best_ms(fn: Callable[[], object], runs: int = 5) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1000


def main() -> None:
    rnd = random.Random(1)  # noqa: S311 (a fixed shuffle, not a secret)
    names = [f"node{i:04d}" for i in range(1, 5001)]
    shuffled = names[:]
    rnd.shuffle(shuffled)
    mixed = [f"n{i}" for i in range(1, 3000)] + [f"n{i:03d}" for i in range(1, 2000)]
    rnd.shuffle(mixed)
    cases: list[tuple[str, Callable[[], object]]] = [
        ("expand n[00001-10000]", lambda: expand("n[00001-10000]")),
        ("expand rack[1-10]-node[001-1000]", lambda: expand("rack[1-10]-node[001-1000]")),
        ("expand n[1-65536] (largest range)", lambda: expand("n[1-65536]")),
        ("count n[1-60000],m[1-60000]", lambda: count("n[1-60000],m[1-60000]")),
        ("compress 5000 names in order", lambda: compress(names)),
        ("compress 5000 names shuffled", lambda: compress(shuffled)),
        ("compress_sorted 5000 names shuffled", lambda: compress_sorted(shuffled)),
        ("compress_sorted 5000 mixed widths", lambda: compress_sorted(mixed)),
        ("uniq 10000 names (each twice)", lambda: uniq(shuffled + shuffled)),
    ]
    for label, fn in cases:
        print(f"{label:40s} {_best_ms(fn):8.2f} ms")


if __name__ == "__main__":
    main()
