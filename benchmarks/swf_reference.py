"""A textbook FCFS / EASY simulator on processor counts, independent of Caldera's scheduler.

Why it exists: `caldera simulate` replays traces through the gateway's own cycle and node-
level planner; this is the algorithm as the backfilling papers define it (D. Lifka, "The
ANL/IBM SP scheduling system", JSSPP 1995; A. Mu'alem and D. Feitelson, "Utilization,
predictability, workloads, and user runtime estimates in scheduling the IBM SP2 with
backfilling", IEEE TPDS 12(6), 2001): processors are counted, not named; the queue head
gets a reservation at the shadow time (when enough processors will be free, from running
jobs' requested times), and a later job may start now if it fits and either ends by the
shadow time or uses only the extra processors. Same trace reading (gateway.simulate.swf)
and same metrics, so the two can only differ through the scheduler itself.

    python benchmarks/swf_reference.py TRACE.swf.gz [--policy fcfs,easy] [--nodes N]
"""

from __future__ import annotations

import argparse
import heapq
import time
from pathlib import Path

from gateway.simulate.engine import bounded_slowdown
from gateway.simulate.swf import SwfJob, read_trace


def replay(jobs: list[SwfJob], procs: int, easy: bool) -> tuple[float, float, float, float]:
    """(mean wait, mean bounded slowdown, utilisation, makespan)."""
    jobs = [j for j in jobs if j.procs <= procs]
    queue: list[SwfJob] = []
    running: list[tuple[float, int, int]] = []  # (end by limit, procs, id)
    ends: list[tuple[float, int, int]] = []  # (actual end, procs, id)
    free, i, work = procs, 0, 0.0
    waits: list[float] = []
    bslds: list[float] = []
    first, last = jobs[0].submit, jobs[0].submit

    def start(job: SwfJob, now: float) -> None:
        nonlocal free, work, last
        free -= job.procs
        running.append((now + job.limit_min * 60, job.procs, job.job_id))
        heapq.heappush(ends, (now + job.run, job.procs, job.job_id))
        waits.append(now - job.submit)
        bslds.append(bounded_slowdown(now - job.submit, job.run))
        work += job.run * job.procs
        last = max(last, now + job.run)

    while i < len(jobs) or ends:
        now = min(jobs[i].submit if i < len(jobs) else float("inf"), ends[0][0] if ends else 1e300)
        while ends and ends[0][0] <= now:
            _, width, job_id = heapq.heappop(ends)
            free += width
            running[:] = [r for r in running if r[2] != job_id]
        while i < len(jobs) and jobs[i].submit <= now:
            queue.append(jobs[i])
            i += 1
        while queue and queue[0].procs <= free:
            start(queue.pop(0), now)
        if not queue or not easy:
            continue
        head, avail, shadow = queue[0], free, float("inf")
        for end, width, _ in sorted(running):
            avail += width
            if avail >= head.procs:
                shadow = end
                break
        extra = avail - head.procs
        rest: list[SwfJob] = [head]
        for job in queue[1:]:
            fits_now = job.procs <= free
            if fits_now and now + job.limit_min * 60 <= shadow:
                start(job, now)
            elif fits_now and job.procs <= extra:
                start(job, now)
                extra -= job.procs
            else:
                rest.append(job)
        queue = rest
    n = max(len(waits), 1)
    span = last - first
    return sum(waits) / n, sum(bslds) / n, work / (procs * span), span


def main() -> None:
    """Command line."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--policy", default="fcfs,easy")
    ap.add_argument("--nodes", type=int)
    ap.add_argument("--jobs", type=int, help="Only the first N jobs.")
    args = ap.parse_args()
    trace = read_trace(args.trace)
    procs = args.nodes or trace.max_procs or 128
    jobs = list(trace.jobs[: args.jobs] if args.jobs else trace.jobs)
    for name in args.policy.split(","):
        t0 = time.process_time()
        wait, bsld, util, span = replay(jobs, procs, name == "easy")
        print(
            f"ref-{name} jobs={len(jobs)} mean_wait={wait:.1f}s bsld={bsld:.2f} "
            f"util={util:.3f} makespan={span:.0f}s cpu={time.process_time() - t0:.1f}s"
        )


if __name__ == "__main__":
    main()
