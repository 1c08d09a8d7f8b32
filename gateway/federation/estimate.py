"""When a job would start on a cluster the gateway places jobs on itself (local, Kubernetes).

A Slurm cluster answers this itself (`sbatch --test-only`, its own backfill planner); for the
clusters Caldera places, the router asks this module. The answer is an estimate with the
same basis as Slurm's: running jobs end at start + time limit. "Now" when the job fits on
what is free now (the cycle's own placement decides, with every filter and plugin); else the
moment enough running jobs of that cluster have ended to free the CPUs it needs; None when
that never happens (jobs without a time limit, or the cluster is too small).

Pure: reads a snapshot, performs no IO.
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.model.job import Job
from gateway.model.values import INFINITE
from gateway.scheduler.request import NodeRequest
from gateway.scheduler.snapshot import NodeFree

__all__ = ["cpus_needed", "start_after_ends"]


def cpus_needed(req: NodeRequest) -> int:
    """The CPUs a request takes in all (its widest node's share times its node count)."""
    return max(req.cpus, 1) * max(req.nodes, 1)


def start_after_ends(
    need_cpus: int,
    free: Iterable[NodeFree],
    running: Iterable[Job],
    now: float,
) -> float | None:
    """The earliest time the cluster's free CPUs (`free`: its nodes) plus the CPUs of its
    running jobs that have ended by then reach `need_cpus`; None when they never do."""
    have = sum(max(f.cpus, 0) for f in free)
    if have >= need_cpus:
        return now
    ends: list[tuple[float, int]] = []
    for job in running:
        if job.time_limit in (0, INFINITE) or job.start_time is None:
            continue
        ends.append((max(job.start_time + job.time_limit * 60.0, now), job.num_cpus))
    ends.sort()
    for at, cpus in ends:
        have += cpus
        if have >= need_cpus:
            return at
    return None
