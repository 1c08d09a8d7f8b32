"""Topology-aware gang placement on synthetic fat trees under a real job mix.

    python benchmarks/bench_topology.py [--sizes 1024,4096,16384] [--jobs 3000] [--seed 1]

Fat trees of N nodes: 32 nodes per leaf switch, 16 leaves per spine (a pod), one core.
The job mix comes from the Parallel Workloads Archive (../shared/data/swf: NASA-iPSC,
KTH-SP2, SDSC-SP2, HPC2N; D. G. Feitelson, D. Tsafrir, D. Krakov, "Experience with using the
Parallel Workloads Archive", JPDC 74(10), 2014): jobs are taken round-robin from the four
traces, each keeping its size as a share of its own machine (scaled to N nodes) and its
run time. The whole backlog is queued at t=0 and replayed: jobs start in queue order while
they fit (later jobs may pass a blocked one, looking 64 jobs ahead), time jumps to the next
completion, so the machine stays full and the free nodes fragment as they would.

Each policy replays the same jobs: Caldera's `topology` plugin (TopologyPlacement.choose,
through the scheduler's PlacementPlugin interface), first-fit (lowest-numbered free nodes)
and random. For every multi-node job: the leaf switches it spans, the fewest the free nodes
allowed at that moment ("optimum"), and ceil(nodes/32) (the ideal on an empty machine).
Placement latency is the time of one `choose` call, on the 16,384-node tree.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gateway.model.cluster import Node  # noqa: E402
from gateway.model.topology import Topology  # noqa: E402
from gateway.scheduler.request import NodeRequest  # noqa: E402
from gateway.scheduler.snapshot import NodeFree, Snapshot  # noqa: E402
from gateway.scheduler.topology_plugin import TopologyPlacement  # noqa: E402

SWF = ROOT.parent / "shared" / "data" / "swf"
TRACES = (
    "NASA-iPSC-1993-3.1-cln.swf.gz",
    "KTH-SP2-1996-2.1-cln.swf.gz",
    "SDSC-SP2-1998-4.2-cln.swf.gz",
    "HPC2N-2002-2.1-cln.swf.gz",
)
PER_LEAF = 32
LEAVES_PER_SPINE = 16


@dataclass(frozen=True)
class TraceJob:
    nodes: int  # as in the trace
    share: float  # of the trace's machine
    runtime: float

    def size(self, machine: int, scale: bool) -> int:
        """Nodes on a machine of `machine` nodes: as in the trace, or the same share."""
        return max(1, round(self.share * machine)) if scale else min(self.nodes, machine)


def read_trace(path: Path) -> Iterator[TraceJob]:
    """Jobs of an SWF trace: allocated (else requested) processors as a machine share."""
    max_nodes = max_procs = 0
    with gzip.open(path, "rt") as fh:
        for line in fh:
            if line.startswith(";"):
                if "MaxNodes:" in line:
                    max_nodes = int(line.split(":")[1])
                elif "MaxProcs:" in line:
                    max_procs = int(line.split(":")[1])
                continue
            f = line.split()
            if len(f) < 18:
                continue
            procs = int(f[4]) if int(f[4]) > 0 else int(f[7])
            runtime = float(f[3])
            if procs <= 0 or runtime <= 0:
                continue
            per_node = max(max_procs // max(max_nodes, 1), 1)
            nodes = math.ceil(procs / per_node)
            yield TraceJob(nodes, min(nodes / max(max_nodes, 1), 1.0), runtime)


def job_mix(count: int) -> list[TraceJob]:
    """`count` jobs, round-robin over the four traces."""
    iters = [read_trace(SWF / t) for t in TRACES]
    out: list[TraceJob] = []
    while len(out) < count and iters:
        for it in list(iters):
            job = next(it, None)
            if job is None:
                iters.remove(it)
            else:
                out.append(job)
    return out[:count]


def fat_tree(n: int) -> Topology:
    paths = {}
    for i in range(n):
        leaf = i // PER_LEAF
        paths[f"n{i:05d}"] = [f"leaf{leaf:03d}", f"spine{leaf // LEAVES_PER_SPINE:02d}", "core"]
    return Topology.from_paths(paths)


def request(nodes: int) -> NodeRequest:
    return NodeRequest(
        nodes=nodes,
        max_nodes=nodes,
        tasks=nodes,
        tasks_per_node=(1,) * nodes,
        cpus=64,
        memory_mb=None,
        mem_per_cpu_mb=None,
        gpus=0,
        gpu_type=None,
        gpu_memory_mb=None,
        exclusive=True,
        constraint=None,
        nodelist=(),
        exclude=frozenset(),
        partitions=(),
        time_limit=None,
        switches=None,
        switches_wait_s=None,
    )


Policy = Callable[[int, list[NodeFree]], Sequence[NodeFree]]


@dataclass
class Result:
    policy: str
    size: int
    placed: int = 0
    multi: int = 0
    leaves: list[int] = field(default_factory=list)
    optimum: list[int] = field(default_factory=list)
    ideal: list[int] = field(default_factory=list)
    latency_ns: list[int] = field(default_factory=list)
    cpu_ns: list[int] = field(default_factory=list)

    def summary(self) -> dict[str, object]:
        at_opt = sum(1 for a, b in zip(self.leaves, self.optimum, strict=True) if a == b)
        out: dict[str, object] = {
            "policy": self.policy,
            "nodes": self.size,
            "jobs_placed": self.placed,
            "multi_node_jobs": self.multi,
            "mean_leaves": round(statistics.fmean(self.leaves), 3),
            "mean_optimum": round(statistics.fmean(self.optimum), 3),
            "mean_ideal": round(statistics.fmean(self.ideal), 3),
            "share_at_optimum": round(at_opt / max(len(self.leaves), 1), 4),
        }
        if self.latency_ns:
            out.update(percentiles(self.latency_ns, self.cpu_ns))
        return out


def percentiles(wall_ns: list[int], cpu_ns: list[int]) -> dict[str, float]:
    """p50/p99/max of wall-clock and of this thread's CPU time, in ms."""
    out: dict[str, float] = {}
    for label, values in (("wall", sorted(wall_ns)), ("cpu", sorted(cpu_ns))):
        out[f"choose_{label}_p50_ms"] = round(values[len(values) // 2] / 1e6, 3)
        out[f"choose_{label}_p99_ms"] = round(values[int(len(values) * 0.99)] / 1e6, 3)
        out[f"choose_{label}_max_ms"] = round(values[-1] / 1e6, 3)
    return out


def optimum(k: int, free: list[NodeFree], topo: Topology) -> int:
    counts: dict[str, int] = {}
    for f in free:
        g = topo.group_index[f.node.name]
        counts[g] = counts.get(g, 0) + 1
    acc = need = 0
    for c in sorted(counts.values(), reverse=True):
        acc += c
        need += 1
        if acc >= k:
            break
    return need


def replay(
    policy_name: str,
    size: int,
    jobs: list[TraceJob],
    seed: int,
    scale: bool = False,
    lookahead: int = 64,
) -> Result:
    topo = fat_tree(size)
    names = list(topo.nodes())
    nf = {
        n: NodeFree(Node(name=n, cpus=64, memory_mb=256_000), 64, 256_000, frozenset())
        for n in names
    }
    busy: set[str] = set()
    snap = Snapshot(now=0.0, pending=(), running=(), clusters={}, free=nf)
    plugin = TopologyPlacement(topo)
    rng = random.Random(seed)  # noqa: S311 - reproducible benchmark, not crypto
    res = Result(policy_name, size)

    def caldera(k: int, cands: list[NodeFree]) -> Sequence[NodeFree]:
        req = request(k)
        c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
        chosen = plugin.choose(req, cands, snap)
        res.latency_ns.append(time.perf_counter_ns() - t0)
        res.cpu_ns.append(time.thread_time_ns() - c0)
        assert chosen is not None
        return chosen

    policies: dict[str, Policy] = {
        "caldera": caldera,
        "first-fit": lambda k, cands: cands[:k],
        "random": lambda k, cands: rng.sample(cands, k),
    }
    place = policies[policy_name]
    queue = [j.size(size, scale) for j in jobs]
    runtimes = [j.runtime for j in jobs]
    ends: list[tuple[float, list[str]]] = []
    now = 0.0
    pending = list(range(len(queue)))
    while pending:
        started = False
        free_count = size - len(busy)
        for pos, idx in enumerate(pending[:lookahead]):
            k = queue[idx]
            if k > free_count:
                continue
            cands = [nf[n] for n in names if n not in busy]
            if k > 1:
                res.optimum.append(optimum(k, cands, topo))
                res.ideal.append(math.ceil(k / PER_LEAF))
            chosen = place(k, cands)
            if k > 1:
                res.leaves.append(topo.span(f.node.name for f in chosen))
                res.multi += 1
            taken = [f.node.name for f in chosen]
            busy.update(taken)
            ends.append((now + runtimes[idx], taken))
            res.placed += 1
            pending.pop(pos)
            started = True
            break
        if started:
            continue
        if not ends:
            break
        ends.sort(key=lambda e: e[0])
        now, freed = ends.pop(0)
        busy.difference_update(freed)
    return res


def latency(
    size: int, jobs: list[TraceJob], free_share: float, samples: int, seed: int, scale: bool
) -> dict[str, object]:
    """choose() on a fragmented tree: `free_share` of the nodes free, picked at random."""
    topo = fat_tree(size)
    names = list(topo.nodes())
    rng = random.Random(seed)  # noqa: S311 - reproducible benchmark, not crypto
    nf = {
        n: NodeFree(Node(name=n, cpus=64, memory_mb=256_000), 64, 256_000, frozenset())
        for n in names
    }
    snap = Snapshot(now=0.0, pending=(), running=(), clusters={}, free=nf)
    plugin = TopologyPlacement(topo)
    lat: list[int] = []
    cpu: list[int] = []
    for i in range(samples):
        free = sorted(rng.sample(names, int(size * free_share)))
        cands = [nf[n] for n in free]
        k = min(max(2, jobs[i % len(jobs)].size(size, scale)), len(cands))
        req = request(k)
        c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
        plugin.choose(req, cands, snap)
        lat.append(time.perf_counter_ns() - t0)
        cpu.append(time.thread_time_ns() - c0)
    return {
        "nodes": size,
        "free_share": free_share,
        "samples": samples,
        "scaled_sizes": scale,
        **percentiles(lat, cpu),
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1024,4096,16384")
    p.add_argument("--jobs", type=int, default=3000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--latency-samples", type=int, default=1000)
    p.add_argument(
        "--scale",
        action="store_true",
        help="scale each job to the same share of the machine (default: the trace's node count)",
    )
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    jobs = job_mix(args.jobs)
    rows: list[dict[str, object]] = []
    print(json.dumps({"loadavg_at_start": [round(x, 2) for x in os.getloadavg()]}), flush=True)
    for size in (int(s) for s in args.sizes.split(",")):
        for policy in ("caldera", "first-fit", "random"):
            t0 = time.perf_counter()
            row = replay(policy, size, jobs, args.seed, args.scale).summary()
            row["wall_s"] = round(time.perf_counter() - t0, 1)
            row["scaled_sizes"] = args.scale
            rows.append(row)
            print(json.dumps(row), flush=True)
    for share in (0.25, 0.5, 1.0):
        row = latency(16384, jobs, share, args.latency_samples, args.seed, args.scale)
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(json.dumps({"loadavg_at_end": [round(x, 2) for x in os.getloadavg()]}), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
