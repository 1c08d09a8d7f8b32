"""Routing decisions for 100,000 pending jobs over 3 clusters (issue 12: >= 10,000 jobs/s).

`python benchmarks/routing_bench.py [--jobs 100000] [--repeat 3]`

Inputs are random but seeded: each job has a predicted start per cluster (5 % unknown),
a burst mode (80 % allowed, 10 % never, 10 % prefer), a wait, a time limit (packing's cap)
and, for a quarter of the jobs, a burst-after and a current cluster; the clusters have
sizes and the policy packs (pack_s 3600, the replay's value), so every rule is exercised.
Timed, best of --repeat, CPU and wall:
- baseline: building the inputs the gateway would hand over (the Prediction records);
- `choose`: one call per job, with its one-line reason (what `scontrol show job` shows);
- `choose_batch`: the same decisions without reasons (replays, mass re-routing).
The two paths must agree job for job (checked here, and by tests/unit/test_routing.py and
tests/unit/test_federation_routing_pack.py).
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from typing import TypeVar

from gateway.federation.routing import Burst, Prediction, RoutePolicy, choose, choose_batch

T = TypeVar("T")
CLUSTERS = ("home", "cloud", "partner")
SIZES = (1024, 256, 512)
NOW = 1_800_000_000.0


def _timed(fn: Callable[[], T], repeat: int) -> tuple[T, float, float]:
    """fn's result and its best CPU and wall seconds over `repeat` runs."""
    cpu = wall = float("inf")
    out: T | None = None
    for _ in range(repeat):
        c0, w0 = time.process_time(), time.perf_counter()
        out = fn()
        cpu = min(cpu, time.process_time() - c0)
        wall = min(wall, time.perf_counter() - w0)
    assert out is not None
    return out, cpu, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rng = random.Random(12)  # noqa: S311 - a seeded workload, not a secret
    n = args.jobs
    starts: list[list[float | None]] = [
        [None if rng.random() < 0.05 else NOW + rng.uniform(0, 86400) for _ in CLUSTERS]
        for _ in range(n)
    ]
    bursts = rng.choices(list(Burst), weights=(10, 80, 10), k=n)
    waited = [rng.uniform(0, 7200) for _ in range(n)]
    after: list[float | None] = [
        rng.uniform(0, 3600) if rng.random() < 0.25 else None for _ in range(n)
    ]
    current: list[int | None] = [
        rng.randrange(3) if rng.random() < 0.25 else None for _ in range(n)
    ]
    lengths: list[float | None] = [60.0 * rng.randint(1, 2880) for _ in range(n)]
    policy = RoutePolicy("home", 300.0, {"cloud": 600.0}, pack_s=3600.0)

    def build() -> list[list[Prediction]]:
        return [
            [Prediction(c, s, z) for c, s, z in zip(CLUSTERS, row, SIZES, strict=True)]
            for row in starts
        ]

    preds, b_cpu, b_wall = _timed(build, args.repeat)

    def scalar() -> list[int | None]:
        out: list[int | None] = []
        for j in range(n):
            cur = current[j]
            r = choose(
                preds[j],
                policy,
                bursts[j],
                waited[j],
                after[j],
                NOW,
                None if cur is None else CLUSTERS[cur],
                lengths[j],
            )
            out.append(None if r.cluster is None else CLUSTERS.index(r.cluster))
        return out

    def batch() -> list[int | None]:
        return choose_batch(
            CLUSTERS, starts, policy, bursts, waited, after, NOW, current, SIZES, lengths
        )

    one, s_cpu, s_wall = _timed(scalar, args.repeat)
    many, v_cpu, v_wall = _timed(batch, args.repeat)
    if one != many:
        raise SystemExit("choose and choose_batch disagree")
    away = sum(1 for x in one if x not in (0, None))
    packed = one.count(CLUSTERS.index("cloud"))
    print(
        f"{n} jobs x {len(CLUSTERS)} clusters; {away} routed away from home "
        f"({packed} to the smallest), {one.count(None)} nowhere"
    )
    print("path | CPU s | wall s | jobs/s (CPU) | jobs/s (wall)")
    for name, cpu, wall in (
        ("baseline: build Prediction inputs", b_cpu, b_wall),
        ("choose (with reasons)", s_cpu, s_wall),
        ("choose_batch", v_cpu, v_wall),
    ):
        print(f"{name} | {cpu:.3f} | {wall:.3f} | {n / cpu:,.0f} | {n / wall:,.0f}")


if __name__ == "__main__":
    main()
