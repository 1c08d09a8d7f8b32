"""/metrics with 100,000 jobs queued (issue 15: goal <= 100 ms), against squeue's render of
the same job table measured in the same run.

A real Gateway object over a real SQLite store, with two clusters described by
configuration (`sites`: 2 x 128 nodes, 8 GPUs of 80 GiB each per node) and a job table
filled in memory: 100,000 jobs by default (85 % pending with a mix of reasons, held jobs,
arrays; 15 % running, placed on nodes), 500 users, 40 accounts, 4 partitions. What is timed:

- `/metrics`: `gateway_page(gw)` -- the whole page the route answers with (count in one
  pass, allocations, node and partition families, histograms), then its `.encode()`;
- baseline: `render_squeue` of the same jobs (squeue's default format, the gateway's route
  code with its line cache, cold then warm), as `POST /v1/squeue/render` runs it;
- `--socket N`: also GET /metrics over the API socket of a real `caldera up` gateway
  holding N held jobs (submitted through the API), against `squeue` (the shim) there.

    python benchmarks/metrics_bench.py [--jobs 100000] [--runs 15] [--socket 0]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gateway.compat.squeue_fmt import SqueueOptions, render_squeue  # noqa: E402
from gateway.compat.squeue_fmt_cache import LineCache  # noqa: E402
from gateway.control.config import GatewayConfig  # noqa: E402
from gateway.control.gateway import Gateway  # noqa: E402
from gateway.metrics.collect import count_jobs  # noqa: E402
from gateway.metrics.source import gateway_page  # noqa: E402
from gateway.model.cluster import ClusterState, Gpu, Node, Partition  # noqa: E402
from gateway.model.job import Hold, Job, RankPlacement  # noqa: E402
from gateway.model.jobspec import JobSpec  # noqa: E402
from gateway.model.state import JobState, Reason  # noqa: E402
from gateway.store.sqlite import SqliteStore  # noqa: E402

GIB = 2**30
REASONS = (Reason.PRIORITY, Reason.RESOURCES, Reason.DEPENDENCY, Reason.BEGIN_TIME)


def cluster(name: str, nodes: int, partitions: tuple[str, str]) -> ClusterState:
    names = tuple(f"{name}-n{i:03d}" for i in range(nodes))
    return ClusterState(
        name=name,
        nodes=tuple(
            Node(
                name=n,
                cpus=128,
                memory_mb=1024 * 1024,
                partitions=partitions,
                gres=(("gpu", "h100", 8),),
                gpus=tuple(
                    Gpu(index=g, memory_total=80 * GIB, memory_free=80 * GIB) for g in range(8)
                ),
            )
            for n in names
        ),
        partitions=(
            Partition(name=partitions[0], nodes=names, default=name == "alpha"),
            Partition(name=partitions[1], nodes=names[: nodes // 2]),
        ),
    )


def job_table(count: int, clusters: dict[str, ClusterState]) -> list[Job]:
    """`count` jobs: 15 % running (one node, 8 cpus, 1 GPU each), the rest pending."""
    now = time.time()
    spec = JobSpec(name="train", workdir="/tmp")
    nodes = [(c, n.name) for c in clusters.values() for n in c.nodes]
    slots: dict[str, int] = {}
    out = []
    for i in range(count):
        c, node = nodes[i % len(nodes)]
        part = c.partitions[i % 2].name
        user = f"user{i % 500:03d}"
        job = Job(
            job_id=i + 1,
            spec=replace(spec, name=f"job-{i % 97}"),
            user=user,
            uid=10_000 + i % 500,
            group="hpc",
            gid=100,
            submit_time=now - count + i,
            partition=part,
            account=f"acct{i % 40:02d}",
            cluster=c.name,
            time_limit=60,
        )
        if i % 7 == 0 and slots.get(node, 0) < 8:  # running, placed
            gpu = slots[node] = slots.get(node, 0) + 1
            job = replace(
                job,
                state=JobState.RUNNING,
                start_time=now - 60,
                nodes=(node,),
                num_cpus=8,
                placement=(RankPlacement(node, 1, 8, 65536, (gpu - 1,)),),
            )
        elif i % 11 == 0:
            job = replace(job, hold=Hold.USER, reason=Reason.JOB_HELD_USER, priority=0)
        else:
            job = replace(job, reason=REASONS[i % len(REASONS)])
        out.append(job)
    return out


def timed(fn: Callable[[], object], runs: int, cpu: list[float] | None = None) -> list[float]:
    """Wall-clock seconds of each call (`cpu`: also this thread's CPU seconds)."""
    out = []
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.thread_time()
        fn()
        out.append(time.perf_counter() - t0)
        if cpu is not None:
            cpu.append(time.thread_time() - c0)
    return out


def ms(values: list[float]) -> str:
    values = sorted(values)
    p90 = values[min(len(values) - 1, int(len(values) * 0.9))]
    return (
        f"min {values[0] * 1e3:7.1f} ms  median {statistics.median(values) * 1e3:7.1f} ms  "
        f"p90 {p90 * 1e3:7.1f} ms  ({len(values)} runs)"
    )


def in_process(count: int, runs: int) -> None:
    clusters = {
        "alpha": cluster("alpha", 128, ("gpu", "gpu-short")),
        "beta": cluster("beta", 128, ("batch", "batch-short")),
    }
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        config = GatewayConfig(
            home=home,
            socket_path=home / "sock",
            db_path=home / "jobs.db",
            spool_dir=home / "spool",
            agents=False,
        )
        gw = Gateway(config, SqliteStore(config.db_path), backends={}, sites=clusters)
        for job in job_table(count, clusters):
            gw.jobs[job.job_id] = job
        running = sum(1 for j in gw.jobs.values() if j.state is JobState.RUNNING)
        print(f"in process: {len(gw.jobs):,} jobs ({running:,} running), 256 nodes, 2 clusters")
        page = gateway_page(gw)
        lines = page.count("\n")
        print(f"  page: {len(page.encode()):,} bytes, {lines:,} lines")
        cpu: list[float] = []
        metrics = timed(lambda: gateway_page(gw).encode(), runs, cpu)
        print(f"  /metrics page (gateway_page + encode)  wall {ms(metrics)}")
        print(f"                                          CPU {ms(cpu)}")
        full: list[float] = []
        recount = timed(lambda: count_jobs(gw.jobs.values()), runs, full)
        print(f"  (counting every job instead of the index) wall {ms(recount)}")
        jobs = gw.visible_jobs()
        opts = SqueueOptions()
        now = time.time()
        sq_cpu: list[float] = []
        cold = timed(
            lambda: render_squeue(jobs, opts, now=now, cache=LineCache()), max(3, runs // 5)
        )
        print(f"  baseline: squeue render, cold line cache wall {ms(cold)}")
        cache = LineCache()
        render_squeue(jobs, opts, now=now, cache=cache)
        warm = timed(
            lambda: render_squeue(gw.visible_jobs(), opts, now=now, cache=cache), runs, sq_cpu
        )
        print(f"  baseline: squeue render, warm line cache wall {ms(warm)}")
        print(f"                                          CPU {ms(sq_cpu)}")
        slowest = max(metrics)
        verdict = "met" if slowest <= 0.1 else "NOT met"
        print(f"  goal <= 100 ms (slowest run, wall): {verdict} ({slowest * 1e3:.1f} ms)")
        gw.committer.close()
        gw.store.close()


def over_socket(count: int, runs: int) -> None:
    from benchmarks.bench_control import HELD, submit
    from benchmarks.bench_gateway import start, stop

    base = Path(tempfile.mkdtemp(prefix="caldera-metrics-bench-", dir="/tmp"))
    env = start(base / "home", "agents = false\n")
    try:
        sock = env["CALDERA_SOCKET"]
        t0 = time.perf_counter()
        submit(sock, HELD, count)
        print(f"over the socket: {count:,} held jobs submitted in {time.perf_counter() - t0:.0f} s")
        curl = ["curl", "-sf", "--unix-socket", sock, "-o", "/dev/null", "http://caldera/metrics"]
        page = timed(lambda: subprocess.run(curl, check=True), runs)
        print(f"  GET /metrics (curl)                        {ms(page)}")
        squeue = [str(Path(env["CALDERA_HOME"]) / "shims" / "squeue")]
        sq = timed(lambda: subprocess.run(squeue, env=env, check=True, capture_output=True), runs)
        print(f"  baseline: squeue (the shim, to /dev/null)   {ms(sq)}")
    finally:
        stop(env)
        shutil.rmtree(base, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--socket", type=int, default=0, help="jobs for the live-gateway run")
    args = ap.parse_args()
    in_process(args.jobs, args.runs)
    if args.socket:
        over_socket(args.socket, max(5, args.runs // 3))
    return 0


if __name__ == "__main__":
    sys.exit(main())
