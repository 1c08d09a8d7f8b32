"""Backfill benchmarks: one full scheduling cycle at scale, and whole-trace replay.

    python benchmarks/bench_backfill.py cycle [--pending 100000] [--nodes 16384] [--cycles 30]
    python benchmarks/bench_backfill.py swf TRACE.swf.gz [--policy fcfs,easy]

`cycle`: a machine of 16,384 nodes (64 cpus, 256 GiB each, 32 nodes per leaf switch) that
is full of running jobs (a few hundred nodes idle, end times spread over a day), and
100,000 pending jobs (1 to 512 nodes, 1 to 64 cpus per node, limits 10 min to 1 day, a
quarter of them exclusive). The registry is Caldera's default (priority order, holds, begin,
dependencies, array throttle, partition limits, fit, binpack, rdma, gpu-memory, fabric,
topology) with the default SchedulerParameters (EASY, bf_max_job_test=500, estimates for
every tested job). It times `run_cycle` (snapshot in, decisions and plan out) and prints
wall and CPU percentiles, since the machine these run on is shared.

`swf`: the replay `caldera simulate` performs, timed per policy (wall and CPU).
"""

from __future__ import annotations

import argparse
import hashlib
import random
import statistics
import time
from dataclasses import replace
from pathlib import Path

from gateway.model.cluster import ClusterState, Node, Partition
from gateway.model.job import Job, RankPlacement
from gateway.model.jobspec import JobSpec, Sharing
from gateway.model.state import JobState
from gateway.scheduler.bf_params import parse_scheduler_parameters
from gateway.scheduler.catalog import DEFAULT_PLUGINS, FACTORIES
from gateway.scheduler.cycle import CycleResult, run_cycle
from gateway.scheduler.plugins import Registry
from gateway.scheduler.snapshot import NodeFree, Snapshot

NOW = 1_800_000_000.0


def _machine(nodes: int) -> ClusterState:
    names = tuple(f"c{i:05d}" for i in range(nodes))
    members = tuple(
        Node(
            name=n,
            cpus=64,
            memory_mb=256_000,
            partitions=("batch",),
            switch=f"leaf{i // 32}",
        )
        for i, n in enumerate(names)
    )
    return ClusterState(
        name="bench",
        nodes=members,
        partitions=(Partition(name="batch", nodes=names, default=True),),
    )


def _size(rng: random.Random) -> int:
    roll = rng.random()
    if roll < 0.6:
        return 1
    if roll < 0.9:
        return rng.choice((2, 4, 8, 16))
    return rng.choice((32, 64, 128, 256, 512))


def _job(job_id: int, rng: random.Random, nodes: int, state: JobState, **kw: object) -> Job:
    exclusive = rng.random() < 0.25
    cpus = 64 if exclusive else rng.choice((1, 2, 4, 8, 16, 32, 64))
    limit = rng.choice((10, 30, 60, 120, 240, 480, 720, 1440))
    spec = JobSpec(
        name=f"j{job_id}",
        workdir="/",
        nodes_min=nodes,
        ntasks=nodes,
        cpus_per_task=cpus,
        mem_per_node_mb=cpus * 2000,
        time_limit=limit,
        sharing=Sharing.EXCLUSIVE if exclusive else None,
    )
    return Job(
        job_id=job_id,
        spec=spec,
        user=f"u{job_id % 500}",
        uid=1000 + job_id % 500,
        group="g",
        gid=1000,
        submit_time=NOW - 86400 + job_id * 0.5,
        priority=1_000_000 - job_id,
        partition="batch",
        time_limit=limit,
        state=state,
        **kw,  # type: ignore[arg-type]
    )


def build_snapshot(pending: int, nodes: int, idle: int, seed: int = 7) -> Snapshot:
    """A full machine with `idle` nodes left over, and `pending` jobs queued."""
    rng = random.Random(seed)  # noqa: S311 - a reproducible synthetic workload
    cluster = _machine(nodes)
    free = {n.name: NodeFree(n, n.cpus, n.memory_mb, frozenset()) for n in cluster.nodes}
    running: list[Job] = []
    names = [n.name for n in cluster.nodes]
    i, job_id = 0, 1
    while i < nodes - idle:
        width = min(_size(rng), nodes - idle - i)
        job = _job(job_id, rng, width, JobState.RUNNING)
        job = replace(
            job,
            spec=replace(job.spec, sharing=Sharing.EXCLUSIVE),
            start_time=NOW - rng.uniform(0, job.time_limit * 60),
        )
        placement = tuple(RankPlacement(n, 1, 64, 256_000) for n in names[i : i + width])
        job = replace(
            job, nodes=tuple(names[i : i + width]), placement=placement, num_cpus=64 * width
        )
        for p in placement:
            free[p.node] = replace(free[p.node], cpus=0, memory_mb=0, exclusive_jobs=1, jobs=1)
        running.append(job)
        i += width
        job_id += 1
    queue = [_job(job_id + k, rng, _size(rng), JobState.PENDING) for k in range(pending)]
    return Snapshot(
        now=NOW,
        pending=tuple(queue),
        running=tuple(running),
        clusters={"bench": cluster},
        free=free,
    )


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _digest(result: CycleResult) -> str:
    """A short hash of the cycle's decisions (starts with their nodes, reasons, plan), to
    check that an optimisation leaves every decision as it was."""
    h = hashlib.sha256()
    for d in result.starts:
        h.update(repr((d.job.job_id, d.task, d.cluster, d.partition, d.placement)).encode())
    h.update(repr(sorted((k, v.value) for k, v in result.reasons.items())).encode())
    h.update(repr(sorted(result.planned.items())).encode())
    return h.hexdigest()[:12]


def bench_cycle(pending: int, nodes: int, idle: int, cycles: int, params: str) -> None:
    """Time `run_cycle` on one snapshot, `cycles` times (the clock advances a second each)."""
    t0 = time.perf_counter()
    snap = build_snapshot(pending, nodes, idle)
    print(
        f"snapshot: {len(snap.pending)} pending, {len(snap.running)} running on {nodes} nodes "
        f"({idle} idle), built in {time.perf_counter() - t0:.1f}s"
    )
    reg = Registry.build(DEFAULT_PLUGINS, FACTORIES)
    reg.backfill = parse_scheduler_parameters(params)
    print(f"SchedulerParameters={params!r}: {reg.backfill}")
    walls: list[float] = []
    cpus: list[float] = []
    rounds: dict[bool, list[float]] = {True: [], False: []}  # with bf_interval: by kind
    for k in range(cycles):
        one = replace(snap, now=NOW + k)
        w, c = time.perf_counter(), time.thread_time()
        result = run_cycle(one, reg)
        cpus.append(time.thread_time() - c)
        walls.append(time.perf_counter() - w)
        rounds[result.estimated].append(cpus[-1])
    print(
        f"cycle: starts={len(result.starts)} planned={len(result.planned)} "
        f"reasons={len(result.reasons)} decisions={_digest(result)}"
    )
    print(
        f"run_cycle x{cycles}: wall p50={statistics.median(walls):.3f}s "
        f"p99={_pct(walls, 0.99):.3f}s max={max(walls):.3f}s | "
        f"cpu p50={statistics.median(cpus):.3f}s p99={_pct(cpus, 0.99):.3f}s"
    )
    if reg.backfill.interval_s:  # the clock moves 1 s per cycle: one round per bf_interval
        for kind, label in ((True, "with a round of estimates"), (False, "without")):
            got = rounds[kind]
            if got:
                print(
                    f"  {label}: {len(got)} cycles, cpu p50={statistics.median(got):.3f}s "
                    f"p99={_pct(got, 0.99):.3f}s"
                )


def bench_swf(trace: Path, policies: str, nodes: int | None, prefix: int | None) -> None:
    """Replay a trace (its first `prefix` jobs, when given: for profiling while iterating)
    under each policy; print the summary line and wall/CPU seconds."""
    from gateway.simulate.engine import POLICIES, simulate
    from gateway.simulate.swf import read_trace

    w, c = time.perf_counter(), time.process_time()
    parsed = read_trace(trace)
    print(
        f"read {trace.name}: {len(parsed.jobs)} jobs ({parsed.skipped} skipped) in "
        f"{time.perf_counter() - w:.1f}s wall, {time.process_time() - c:.1f}s cpu"
    )
    size = nodes or parsed.max_procs or 128
    if prefix is not None:
        parsed = replace(parsed, jobs=parsed.jobs[:prefix])
    for name in policies.split(","):
        w, c = time.perf_counter(), time.process_time()
        outcome = simulate(parsed, size, POLICIES[name])
        print(outcome.summary())
        print(
            f"{name} timing: {time.perf_counter() - w:.1f}s wall, "
            f"{time.process_time() - c:.1f}s cpu"
        )


def main() -> None:
    """Command line."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    cyc = sub.add_parser("cycle")
    cyc.add_argument("--pending", type=int, default=100_000)
    cyc.add_argument("--nodes", type=int, default=16_384)
    cyc.add_argument("--idle", type=int, default=300)
    cyc.add_argument("--cycles", type=int, default=30)
    cyc.add_argument("--params", default="", help="SchedulerParameters (default: none)")
    swf = sub.add_parser("swf")
    swf.add_argument("trace", type=Path)
    swf.add_argument("--policy", default="fcfs,easy")
    swf.add_argument("--nodes", type=int)
    swf.add_argument("--jobs", type=int, help="replay only the trace's first N jobs")
    args = ap.parse_args()
    if args.what == "cycle":
        bench_cycle(args.pending, args.nodes, args.idle, args.cycles, args.params)
    else:
        bench_swf(args.trace, args.policy, args.nodes, args.jobs)


if __name__ == "__main__":
    main()
