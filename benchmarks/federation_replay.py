"""Multi-cluster trace replay (issue 12): one SWF trace split over a home and a burst cluster.

`python benchmarks/federation_replay.py TRACE [--jobs N] [--skip N] [--clusters 0.75,0.25]
[--burst-latency 120] [--burst-wait 600] [--margin 300] [--reroute 60] [--pack 3600,0]
[--policy easy] [--routing home,first,wait,caldera]`

Traces: the Parallel Workloads Archive's (D. G. Feitelson, D. Tsafrir, D. Krakov,
"Experience with using the Parallel Workloads Archive", JPDC 74(10), 2014), read from
/work/shared/data/swf, never copied. Prints what `caldera simulate --clusters` prints
(its lines verbatim), then a Markdown table row per routing for benchmarks/RESULTS.md,
with each replay's wall and CPU seconds, the single-cluster replay of the home share
as the check that `home` reproduces it, and the ratios of each `caldera` row to the best
baseline. `caldera` runs once per `--pack` value (RoutePolicy.pack_s; 0: the unpacked
routing, predicted start and home margin only).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from gateway.simulate.engine import POLICIES, simulate
from gateway.simulate.multi import MultiOutcome, Routing, simulate_multi
from gateway.simulate.multi_cli import describe, parse_routings, split_sites
from gateway.simulate.swf import Trace, read_trace


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--jobs", type=int, default=0, help="the first N jobs only (0: all)")
    ap.add_argument("--skip", type=int, default=0, help="start at the trace's job N+1")
    ap.add_argument("--clusters", default="0.75,0.25")
    ap.add_argument("--burst-latency", type=float, default=120.0)
    ap.add_argument("--burst-wait", type=float, default=600.0)
    ap.add_argument("--margin", type=float, default=300.0)
    ap.add_argument("--reroute", type=float, default=60.0, help="0: route at submission only")
    ap.add_argument("--pack", default="3600", help="caldera's pack_s values, comma-separated")
    ap.add_argument("--policy", default="easy", choices=sorted(POLICIES))
    ap.add_argument("--routing", default="home,first,wait,caldera")
    args = ap.parse_args()
    parsed = read_trace(args.trace)
    if args.jobs or args.skip:
        end = args.skip + args.jobs if args.jobs else None
        parsed = Trace(parsed.jobs[args.skip : end], parsed.max_procs, parsed.skipped)
    size = parsed.max_procs or max(j.procs for j in parsed.jobs)
    sites = split_sites(size, args.clusters, args.burst_latency)
    policy = POLICIES[args.policy]
    print(
        f"{args.trace.name}: {len(parsed.jobs)} jobs, {size} processors -> "
        + ", ".join(f"{s.name} {s.nodes} (latency {s.latency_s:.0f}s)" for s in sites)
        + f"; scheduler {policy.name} on each"
    )
    packs = [float(p) for p in args.pack.split(",") if p.strip()]
    runs = [
        (f"{name}, pack {p:.0f} s" if name == "caldera" else name, name, p)
        for name in parse_routings(args.routing)
        for p in (packs if name == "caldera" else [0.0])
    ]
    rows = []
    done: dict[str, MultiOutcome] = {}
    for label, name, pack in runs:
        routing = Routing(
            name, args.burst_wait, args.margin, reroute_s=args.reroute or None, pack_s=pack
        )
        w, c = time.perf_counter(), time.process_time()
        o = simulate_multi(parsed, sites, policy, routing)
        wall, cpu = time.perf_counter() - w, time.process_time() - c
        done[label] = o
        print(f"# {label}", flush=True)
        for line in describe(o, policy.name):
            print(line, flush=True)
        ran = " / ".join(f"{c.jobs:,}" for c in o.clusters)
        rows.append(
            f"| {label} | {o.jobs:,} | {ran} | {o.mean_wait:,.0f} s | {o.mean_bsld:.2f} | "
            f"{o.utilisation:.3f} | {o.clusters[0].utilisation:.3f} | "
            f"{o.clusters[1].utilisation:.3f} | {o.moved:,} | {cpu:.1f} s | {wall:.1f} s |"
        )
    single = simulate(parsed, sites[0].nodes, policy)
    print(f"single-cluster replay on home's {sites[0].nodes} nodes: {single.summary()}")
    print(
        "| routing | jobs | ran home / burst | mean wait | mean bsld | util | util home "
        "| util burst | moves | CPU | wall |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print(row)
    for line in compare(done):
        print(line)


def compare(done: dict[str, MultiOutcome]) -> list[str]:
    """Each `caldera` run against each baseline that ran: bsld and utilisation ratios."""
    base = {k: o for k, o in done.items() if not k.startswith("caldera")}
    out = []
    for label, o in done.items():
        if label.startswith("caldera"):
            out += [
                f"{label} vs {k}: bsld {o.mean_bsld / b.mean_bsld:.3f}x, "
                f"util {o.utilisation - b.utilisation:+.4f}"
                + (" (bsld lower)" if o.mean_bsld < b.mean_bsld else " (bsld NOT lower)")
                for k, b in base.items()
                if b.mean_bsld > 0
            ]
    return out


if __name__ == "__main__":
    main()
