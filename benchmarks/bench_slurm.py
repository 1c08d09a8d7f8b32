"""SlurmBackend on the real test cluster: submission throughput and state propagation.

Run (root, test cluster up: testenv/slurm/up.sh):

    python benchmarks/bench_slurm.py [--jobs 1000] [--samples 200] [--transport cli|rest]

1. Submission: `--jobs` jobs through `SlurmBackend.submit` vs the same submissions with
   `sbatch` directly (the same options and script on stdin, as the backend renders them),
   alternating blocks of `--block` jobs so that load from other users of the shared
   machine hits both alike. The jobs are tiny and pending (`--begin` a day ahead, on
   partition `real`): they never run and are cancelled afterwards.
2. Propagation: `--samples` state changes made in Slurm by another process (`scancel` of
   a pending job: PD -> CA, and `scontrol hold`: reason -> JobHeldUser), each timed from
   just before the command starts until the backend's `poll()` returns the event. The
   consumer polls every 10 ms (the gateway polls every cycle, 0.2 s by default, which adds
   up to one cycle).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gateway.model.backend import EventKind  # noqa: E402
from gateway.model.state import Reason  # noqa: E402
from slurm_plugin.backend import SlurmBackend  # noqa: E402
from slurm_plugin.client import Identity  # noqa: E402
from slurm_plugin.config import SlurmClusterConfig, Transport  # noqa: E402
from slurm_plugin.submit_args import build_request  # noqa: E402
from tests.support.slurm_jobs import EventLog, make_launch, wrap  # noqa: E402

BASE = Path(os.environ.get("CALDERA_SLURM_BASE", "/tmp/caldera-slurm"))
CONF = BASE / "etc" / "slurm.conf"
ENV = {**os.environ, "SLURM_CONF": str(CONF)}


def _cancel(ids: list[str]) -> None:
    for i in range(0, len(ids), 500):
        subprocess.run(["scancel", *ids[i : i + 500]], env=ENV, capture_output=True, check=False)


def _config(transport: str, instance: str, interval: float = 0.25) -> SlurmClusterConfig:
    rest = transport == "rest"
    return SlurmClusterConfig(
        poll_interval_s=interval,
        name="slurm",
        slurm_conf=str(CONF),
        instance=instance,
        transport=Transport.REST if rest else Transport.CLI,
        rest_url=f"unix:{BASE / 'rest' / 'slurmrestd.sock'}" if rest else None,
        rest_user="tester" if rest else None,
    )


def bench_submit(jobs: int, block: int, transport: str, workdir: str) -> dict[str, float]:
    """Wall time of `jobs` submissions each way, in alternating blocks."""
    instance = f"bench{os.getpid()}"
    backend = SlurmBackend(_config(transport, instance))
    begin = int(time.time()) + 86400
    user = "tester" if transport == "rest" else "root"
    fields: dict[str, Any] = {
        "partitions": ("real",),
        "time_limit": 1,
        "begin": begin,
        "stdout": "/dev/null",
    }
    launches = [
        make_launch(100000 + i, wrap("true"), user=user, workdir=workdir, **fields)
        for i in range(jobs)
    ]
    identity = Identity("root", 0, 0)
    direct_argvs = []
    for i in range(jobs):
        req = build_request(
            make_launch(200000 + i, wrap("true"), workdir=workdir, **fields),
            backend.config,
            identity,
        )
        direct_argvs.append((["sbatch", "--parsable", *req.options], req.script))
    ids: list[str] = []
    t_backend = t_direct = 0.0
    try:
        backend.describe()
        for n, start in enumerate(range(0, jobs, block)):

            def direct(lo: int = start) -> float:
                t0 = time.perf_counter()
                for argv, script in direct_argvs[lo : lo + block]:
                    proc = subprocess.run(
                        argv,
                        input=script,
                        capture_output=True,
                        text=True,
                        env=ENV,
                        cwd="/",
                        check=True,
                    )
                    ids.append(proc.stdout.strip())
                return time.perf_counter() - t0

            def through(lo: int = start) -> float:
                t0 = time.perf_counter()
                for launch in launches[lo : lo + block]:
                    ids.append(backend.submit(launch))
                return time.perf_counter() - t0

            # alternate who goes first: the queue grows, later submissions are slower
            if n % 2 == 0:
                t_direct += direct()
                t_backend += through()
            else:
                t_backend += through()
                t_direct += direct()
    finally:
        backend.close()
        _cancel(ids)
    return {
        "jobs": jobs,
        "direct_s": round(t_direct, 2),
        "backend_s": round(t_backend, 2),
        "ratio": round(t_backend / t_direct, 3),
        "direct_ms_per_job": round(1000 * t_direct / jobs, 2),
        "backend_ms_per_job": round(1000 * t_backend / jobs, 2),
    }


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def bench_propagation(
    samples: int, transport: str, workdir: str, interval: float
) -> dict[str, float]:
    """Latency from a state change made in Slurm to the event out of poll()."""
    instance = f"prop{os.getpid()}"
    cfg = _config(transport, instance, interval)
    backend = SlurmBackend(cfg)
    log = EventLog(backend)
    begin = int(time.time()) + 86400
    user = "tester" if transport == "rest" else "root"
    launches = [
        make_launch(
            300000 + i,
            wrap("true"),
            user=user,
            workdir=workdir,
            partitions=("real",),
            time_limit=1,
            begin=begin,
            stdout="/dev/null",
        )
        for i in range(samples)
    ]
    ids = [backend.submit(launch) for launch in launches]
    rnd = random.Random(7)  # noqa: S311 (spacing, not a secret)
    latencies: list[float] = []
    kinds: dict[str, list[float]] = {"scancel": [], "hold": []}
    try:
        for launch in launches:  # every job announced PENDING first
            wanted = launch.job.job_id
            log.wait(lambda e: e.job_id == wanted, 120, "PENDING")  # noqa: B023
        for i, (launch, bid) in enumerate(zip(launches, ids, strict=True)):
            time.sleep(rnd.uniform(0, 0.3))
            job_id = launch.job.job_id
            hold = i % 2 == 1
            argv = ["scontrol", "uhold", bid] if hold else ["scancel", bid]
            t0 = time.time()
            subprocess.run(argv, env=ENV, check=True, capture_output=True)
            while True:
                new = backend.poll()
                t1 = time.time()
                log.events.extend(new)
                if any(
                    e.job_id == job_id
                    and (e.reason is Reason.JOB_HELD_USER if hold else e.kind is EventKind.FINISHED)
                    for e in new
                ):
                    break
                if t1 - t0 > 30:
                    raise TimeoutError(f"no event for {bid} after 30 s")
                time.sleep(0.01)
            latencies.append(t1 - t0)
            kinds["hold" if hold else "scancel"].append(t1 - t0)
    finally:
        backend.close()
        _cancel(ids)
    return {
        "samples": len(latencies),
        "p50_ms": round(1000 * _pct(latencies, 0.5), 1),
        "p90_ms": round(1000 * _pct(latencies, 0.9), 1),
        "p99_ms": round(1000 * _pct(latencies, 0.99), 1),
        "max_ms": round(1000 * max(latencies), 1),
        "mean_ms": round(1000 * statistics.fmean(latencies), 1),
        "scancel_p50_ms": round(1000 * _pct(kinds["scancel"], 0.5), 1),
        "hold_p50_ms": round(1000 * _pct(kinds["hold"], 0.5), 1),
        "poll_interval_s": cfg.poll_interval_s,
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--block", type=int, default=100)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--transport", choices=("cli", "rest"), default="cli")
    parser.add_argument("--interval", type=float, default=0.25, help="poll_interval_s")
    parser.add_argument("--skip-submit", action="store_true")
    parser.add_argument("--skip-propagation", action="store_true")
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="bench-slurm-", dir=str(BASE / "jobs"))
    os.chmod(workdir, 0o1777)  # noqa: S103 (shared job directory, like the cluster's)
    out: dict[str, object] = {"transport": args.transport}
    if not args.skip_submit:
        out["submit"] = bench_submit(args.jobs, args.block, args.transport, workdir)
        print(json.dumps(out["submit"]), flush=True)
    if not args.skip_propagation:
        out["propagation"] = bench_propagation(args.samples, args.transport, workdir, args.interval)
        print(json.dumps(out["propagation"]), flush=True)
    print(json.dumps(out, indent=2))
    os.rmdir(workdir)


if __name__ == "__main__":
    main()
