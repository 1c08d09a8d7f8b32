"""SlurmBackend.predict_start and withdraw on the real test cluster: per-call latency.

Run (root, test cluster up: testenv/slurm/up.sh):

    python benchmarks/bench_slurm_predict.py [--samples 100] [--cached 20000] [--withdraws 30]

1. `sbatch --test-only` alone (the command the backend runs) vs `predict_start` with the
   cache off (`predict_ttl_s = 0`: scontrol ping + partition State + sbatch --test-only),
   alternating call by call so the shared machine's load hits both alike;
2. `predict_start` answered from the cache (same job shape and partition within the TTL);
3. `withdraw` of a pending job (mark, hold, scontrol show job, scancel, confirmed), jobs
   pending in a DOWN partition made for the run (deleted afterwards).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slurm_plugin.backend import SlurmBackend  # noqa: E402
from slurm_plugin.config import OfferedPartition, SlurmClusterConfig  # noqa: E402
from tests.support.slurm_jobs import make_launch, wrap  # noqa: E402

BASE = Path(os.environ.get("CALDERA_SLURM_BASE", "/tmp/caldera-slurm"))
CONF = BASE / "etc" / "slurm.conf"
ENV = {**os.environ, "SLURM_CONF": str(CONF), "TZ": "UTC"}
PART = f"bench{os.getpid()}"


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _line(name: str, values: list[float], unit: float = 1e3, suffix: str = "ms") -> str:
    return (
        f"| {name} | {len(values)} | {_pct(values, 0.5) * unit:.3g} {suffix} | "
        f"{_pct(values, 0.9) * unit:.3g} {suffix} | {_pct(values, 0.99) * unit:.3g} {suffix} |"
    )


def _config(ttl: float) -> SlurmClusterConfig:
    return SlurmClusterConfig(
        name="slurm",
        slurm_conf=str(CONF),
        instance=f"bp{os.getpid()}",
        predict_ttl_s=ttl,
        partitions=(OfferedPartition("real", "real", True), OfferedPartition(PART, "w")),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--cached", type=int, default=20000)
    parser.add_argument("--withdraws", type=int, default=30)
    args = parser.parse_args()
    job = make_launch(1, wrap("true"), partitions=("real",), time_limit=5).job
    uncached = SlurmBackend(_config(0.0), watcher=False)
    direct: list[float] = []
    through: list[float] = []
    for _ in range(args.samples):
        t = time.perf_counter()
        subprocess.run(
            ["sbatch", "--test-only", "--partition=real", "--time=5"],
            input="#!/bin/sh\ntrue\n",
            env=ENV,
            capture_output=True,
            text=True,
            check=True,
        )
        direct.append(time.perf_counter() - t)
        t = time.perf_counter()
        assert uncached.predict_start(job, "real") is not None
        through.append(time.perf_counter() - t)
    cached = SlurmBackend(_config(3600.0), watcher=False)
    cached.predict_start(job, "real")
    hits: list[float] = []
    for _ in range(args.cached):
        t = time.perf_counter()
        cached.predict_start(job, "real")
        hits.append(time.perf_counter() - t)
    subprocess.run(
        ["scontrol", "create", f"PartitionName={PART}", "Nodes=node04", "State=DOWN"],
        env=ENV,
        check=True,
    )
    backend = SlurmBackend(_config(5.0), watcher=False)
    withdraws: list[float] = []
    try:
        for k in range(args.withdraws):
            launch = make_launch(100 + k, wrap("true"), partitions=("w",), time_limit=1)
            backend.submit(launch)
            t = time.perf_counter()
            assert backend.withdraw(launch.job)
            withdraws.append(time.perf_counter() - t)
    finally:
        subprocess.run(["scancel", "-p", PART], env=ENV, check=False)
        subprocess.run(["scontrol", "delete", f"PartitionName={PART}"], env=ENV, check=False)
    load = os.getloadavg()[0]
    print("| call | samples | p50 | p90 | p99 |")
    print("| --- | --- | --- | --- | --- |")
    print(_line("`sbatch --test-only` alone", direct))
    print(_line("`predict_start`, not cached", through))
    print(_line("`predict_start`, cached", hits, 1e6, "us"))
    print(_line("`withdraw` of a pending job", withdraws))
    ratio = statistics.median(through) / statistics.median(direct)
    print(f"\nuncached/direct (medians): {ratio:.2f}; load (1 min): {load:.1f}")


if __name__ == "__main__":
    main()
