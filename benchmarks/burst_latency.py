"""Burst latency: from "home cannot start this job" to the job running on another cluster.

A gateway whose home is its local site (one 2-CPU node, kept full by a long job) routes each
new job to the real Slurm test cluster (testenv/slurm), which starts it at once. For every
job: Caldera's latency = the time Caldera's sbatch returned -> the moment the job is seen
R in Slurm's own squeue (found by the tag Caldera gives its copy): routing, the start
prediction it waits for, the launch and Slurm's own start. Baseline, in the same run, on the
same cluster: the same job submitted with Slurm's own sbatch -> seen R in Slurm's squeue
(that cluster's own start latency). The goal is Caldera's p99 <= 2 s plus the
baseline.

    python benchmarks/burst_latency.py [--jobs 20]

Needs root and the Slurm test cluster (`bash testenv/slurm/up.sh`).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from slurm_plugin.mapping import make_tag
from tests.support.gateway_env import Gateway, start_gateway, stop_gateway
from tests.support.slurm_stack import ensure_up, run_sbatch, slurm_env

SLURM_CONF = "/tmp/caldera-slurm/etc/slurm.conf"


def _config(instance: str) -> str:
    return (
        'cluster_name = "home"\n'
        '[[nodes]]\nname = "benchhome"\ncpus = 2\nmemory_mb = 2000\n'
        '[[partitions]]\nname = "debug"\ndefault = true\n'
        '[slurm]\n[[slurm.cluster]]\nname = "hpc"\ntransport = "cli"\n'
        f'slurm_conf = "{SLURM_CONF}"\ninstance = "{instance}"\n'
        '[[slurm.cluster.partition]]\nslurm = "real"\nname = "debug"\n'
        '[routing]\nhome = "home"\nmargin = "30s"\n'
    )


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def _slurm_state(tag: str) -> str:
    """The state letters of the Slurm jobs whose comment starts with `tag`."""
    rows = subprocess.run(
        ["squeue", "-h", "-o", "%k|%t"], env=slurm_env(), capture_output=True, text=True
    ).stdout.splitlines()
    return "".join(st for c, _, st in (r.partition("|") for r in rows) if c.split()[0] == tag)


def _caldera(gw: Gateway, instance: str, jobs: int) -> list[float]:
    """Caldera's sbatch returned -> its copy runs in Slurm (R in Slurm's own squeue, found
    by Caldera's tag), and -> Caldera's own record shows RUNNING on Slurm's nodes."""
    out: list[float] = []
    for _ in range(jobs):
        job = gw.sbatch("-t", "2", "-o", "/dev/null", "--wrap", "sleep 3")
        t1 = time.monotonic()
        tag = make_tag(instance, job)
        while _slurm_state(tag) != "R":
            assert time.monotonic() - t1 < 60, gw.job(job)
            time.sleep(0.02)
        out.append(time.monotonic() - t1)
        gw.wait(job, timeout=60)
    return out


def _slurm(jobs: int) -> list[float]:
    env = slurm_env()
    out: list[float] = []
    for _ in range(jobs):
        argv = ["-p", "real", "-t", "2", "-o", "/dev/null", "--parsable", "--wrap", "sleep 3"]
        done = run_sbatch(None, argv)
        t1 = time.monotonic()
        job = done.stdout.strip().split(";")[0]
        while True:
            st = subprocess.run(
                ["squeue", "-h", "-j", job, "-o", "%t"], env=env, capture_output=True, text=True
            ).stdout.strip()
            if st == "R":
                break
            assert time.monotonic() - t1 < 60, st
            time.sleep(0.02)
        out.append(time.monotonic() - t1)
        while subprocess.run(
            ["squeue", "-h", "-j", job], env=env, capture_output=True, text=True
        ).stdout.strip():
            time.sleep(0.2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20)
    args = parser.parse_args()
    ensure_up()
    base = Path(tempfile.mkdtemp(prefix="caldera-burst-bench-", dir="/tmp"))
    instance = f"bench-{base.name}"
    gw = start_gateway(base, _config(instance))
    try:
        blocker = gw.sbatch("-t", "30", "-c", "2", "-o", "/dev/null", "--wrap", "sleep 900")
        gw.wait(blocker, states=("RUNNING",), timeout=60)
        base_lat = _slurm(args.jobs)
        ours = _caldera(gw, instance, args.jobs)
        gw.run(["scancel", str(blocker)])
    finally:
        stop_gateway(gw)
    rows = (("slurm sbatch -> R (baseline)", base_lat), ("caldera sbatch -> R in Slurm", ours))
    for name, vals in rows:
        print(
            f"{name:32s} n={len(vals)} p50={statistics.median(vals):.2f}s "
            f"p99={_pct(vals, 99):.2f}s max={max(vals):.2f}s"
        )
    extra = _pct(ours, 99) - _pct(base_lat, 99)
    print(f"caldera p99 minus Slurm's own p99: {extra:.2f}s (goal <= 2 s)")


if __name__ == "__main__":
    main()
