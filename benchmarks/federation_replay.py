"""Multi-cluster trace replay (issue 12): one SWF trace split over a home and a burst cluster.

`python benchmarks/federation_replay.py TRACE [--jobs N] [--clusters 0.75,0.25]
[--burst-latency 120] [--burst-wait 600] [--margin 300] [--reroute 60] [--policy easy]
[--routing home,first,wait,caldera]`

Traces: the Parallel Workloads Archive's (D. G. Feitelson, D. Tsafrir, D. Krakov,
"Experience with using the Parallel Workloads Archive", JPDC 74(10), 2014), read from
/work/shared/data/swf, never copied. Prints what `caldera simulate --clusters` prints
(its lines verbatim), then a Markdown table row per routing for benchmarks/RESULTS.md,
with each replay's wall and CPU seconds, and the single-cluster replay of the home share
as the check that `home` reproduces it.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from gateway.simulate.engine import POLICIES, simulate
from gateway.simulate.multi import Routing, simulate_multi
from gateway.simulate.multi_cli import describe, parse_routings, split_sites
from gateway.simulate.swf import Trace, read_trace


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--jobs", type=int, default=0, help="the first N jobs only (0: all)")
    ap.add_argument("--clusters", default="0.75,0.25")
    ap.add_argument("--burst-latency", type=float, default=120.0)
    ap.add_argument("--burst-wait", type=float, default=600.0)
    ap.add_argument("--margin", type=float, default=300.0)
    ap.add_argument("--reroute", type=float, default=60.0, help="0: route at submission only")
    ap.add_argument("--policy", default="easy", choices=sorted(POLICIES))
    ap.add_argument("--routing", default="home,first,wait,caldera")
    args = ap.parse_args()
    parsed = read_trace(args.trace)
    if args.jobs:
        parsed = Trace(parsed.jobs[: args.jobs], parsed.max_procs, parsed.skipped)
    size = parsed.max_procs or max(j.procs for j in parsed.jobs)
    sites = split_sites(size, args.clusters, args.burst_latency)
    policy = POLICIES[args.policy]
    print(
        f"{args.trace.name}: {len(parsed.jobs)} jobs, {size} processors -> "
        + ", ".join(f"{s.name} {s.nodes} (latency {s.latency_s:.0f}s)" for s in sites)
        + f"; scheduler {policy.name} on each"
    )
    rows = []
    for name in parse_routings(args.routing):
        routing = Routing(name, args.burst_wait, args.margin, reroute_s=args.reroute or None)
        w, c = time.perf_counter(), time.process_time()
        o = simulate_multi(parsed, sites, policy, routing)
        wall, cpu = time.perf_counter() - w, time.process_time() - c
        for line in describe(o, policy.name):
            print(line, flush=True)
        ran = " / ".join(f"{c.jobs:,}" for c in o.clusters)
        rows.append(
            f"| {name} | {o.jobs:,} | {ran} | {o.mean_wait:,.0f} s | {o.mean_bsld:.2f} | "
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


if __name__ == "__main__":
    main()
