"""Trace replay on a virtual clock through the live scheduler's own cycle.

Why the real `run_cycle` and not a model of it: the point of `caldera simulate` is to say
how *this* scheduler behaves (its ordering, its gang placement, its backfill planner), so
a result is evidence about the code that runs in production. Only the clock and the
backend are replaced: time jumps from event to event (a submission, a job reaching its
run time), and a start is a record update. Each SWF processor is one single-cpu node, so a
job of p processors is a gang of p nodes, which is how rigid parallel jobs are modelled in
the trace literature.

Pure: a trace and a policy in, an Outcome out; the caller does the printing.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from gateway.model.cluster import ClusterState, Node, Partition
from gateway.model.job import Job
from gateway.model.jobspec import JobSpec
from gateway.model.state import JobState
from gateway.scheduler.bf_params import BackfillParams
from gateway.scheduler.builtin import FACTORIES as BUILTIN
from gateway.scheduler.catalog import DEFAULT_PLUGINS, FACTORIES
from gateway.scheduler.cycle import run_cycle
from gateway.scheduler.plugins import Registry
from gateway.scheduler.snapshot import NodeFree, Snapshot
from gateway.simulate.swf import SwfJob, Trace

__all__ = ["POLICIES", "Outcome", "Policy", "Sample", "machine", "replay_job", "simulate"]

_FOREVER = 10 * 365 * 86400  # a planning window no trace reaches


@dataclass(frozen=True, slots=True)
class Policy:
    """A scheduler configuration to replay a trace under."""

    name: str
    plugins: tuple[str, ...]
    params: BackfillParams
    note: str


# the textbook policies test every queued job at one-second resolution with no window, as
# the backfilling literature defines them; `caldera` is the gateway's default configuration
POLICIES: dict[str, Policy] = {
    "fcfs": Policy(
        "fcfs",
        ("priority", "fit"),
        BackfillParams(mode="fcfs", resolution_s=1, window_s=_FOREVER, estimates=0),
        "first come first served, no backfill",
    ),
    "easy": Policy(
        "easy",
        ("priority", "fit"),
        BackfillParams(
            mode="easy", resolution_s=1, window_s=_FOREVER, max_job_test=10**9, estimates=0
        ),
        "EASY backfilling (one reservation, FCFS order)",
    ),
    "conservative": Policy(
        "conservative",
        ("priority", "fit"),
        BackfillParams(
            mode="conservative",
            depth=10**9,
            resolution_s=1,
            window_s=_FOREVER,
            max_job_test=10**9,
            estimates=0,
        ),
        "conservative backfilling (every queued job holds a reservation)",
    ),
    "caldera": Policy(
        "caldera",
        DEFAULT_PLUGINS,
        BackfillParams(estimates=0),
        "Caldera's default plugins and SchedulerParameters (EASY, bf_resolution=60, "
        "bf_window=1440, bf_max_job_test=500; no display estimates)",
    ),
}


@dataclass(frozen=True, slots=True)
class Sample:
    """The queue and the machine at one instant (for the plot)."""

    t: float
    queued: int
    busy: int


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a replay measured."""

    policy: str
    nodes: int
    jobs: int
    too_big: int  # jobs wider than the machine (never replayed)
    mean_wait: float
    mean_bsld: float
    utilisation: float
    makespan: float
    cycles: int
    seconds: float
    samples: tuple[Sample, ...] = field(repr=False)

    def summary(self) -> str:
        """One line a script can read: the policy's name first, then key=value."""
        return (
            f"{self.policy} jobs={self.jobs} mean_wait={self.mean_wait:.1f}s "
            f"bsld={self.mean_bsld:.2f} util={self.utilisation:.3f} "
            f"makespan={self.makespan:.0f}s cycles={self.cycles} wall={self.seconds:.1f}s"
        )


def bounded_slowdown(wait: float, run: float, tau: float = 10.0) -> float:
    """max(1, (wait + run) / max(run, tau)) (Feitelson et al., JSSPP 1997)."""
    return max(1.0, (wait + run) / max(run, tau))


def machine(nodes: int) -> tuple[ClusterState, dict[str, NodeFree]]:
    names = tuple(f"p{i:05d}" for i in range(nodes))
    members = tuple(Node(name=n, cpus=1, memory_mb=1, partitions=("sim",)) for n in names)
    cluster = ClusterState(
        name="sim", nodes=members, partitions=(Partition(name="sim", nodes=names, default=True),)
    )
    return cluster, {n.name: NodeFree(n, 1, 1, frozenset()) for n in members}


def replay_job(sj: SwfJob) -> Job:
    spec = JobSpec(
        name=f"swf{sj.job_id}",
        workdir="/",
        nodes_min=sj.procs,
        ntasks=sj.procs,
        time_limit=sj.limit_min,
    )
    return Job(
        job_id=sj.job_id,
        spec=spec,
        user=str(sj.user),
        uid=max(sj.user, 0),
        group="swf",
        gid=0,
        submit_time=sj.submit,
        partition="sim",
        time_limit=sj.limit_min,
    )


def simulate(
    trace: Trace,
    nodes: int,
    policy: Policy,
    progress: Callable[[int, int], None] | None = None,
    sample_every: float = 3600.0,
) -> Outcome:
    """Replay `trace` on `nodes` single-cpu nodes under `policy`."""
    t0 = time.perf_counter()
    factories = {**BUILTIN, **FACTORIES}
    reg = Registry.build(policy.plugins, factories)
    reg.backfill = policy.params
    cluster, free = machine(nodes)
    clusters = {"sim": cluster}
    jobs = [j for j in trace.jobs if j.procs <= nodes]
    run_of = {j.job_id: j.run for j in jobs}
    pending: dict[int, Job] = {}
    widths: list[tuple[int, int]] = []  # (procs, job id) of pending jobs, stale ones lazily
    running: dict[int, Job] = {}
    ends: list[tuple[float, int]] = []
    idle = nodes
    i = done = cycles = 0
    waits: list[float] = []
    bslds: list[float] = []
    work = 0.0
    samples: list[Sample] = []
    next_sample = jobs[0].submit if jobs else 0.0
    first = jobs[0].submit if jobs else 0.0
    last_end = first
    while i < len(jobs) or ends:
        now = min(jobs[i].submit if i < len(jobs) else float("inf"), ends[0][0] if ends else 1e300)
        while ends and ends[0][0] <= now:
            _, job_id = heapq.heappop(ends)
            job = running.pop(job_id)
            for p in job.placement:
                free[p.node] = NodeFree(free[p.node].node, 1, 1, frozenset())
            idle += len(job.placement)
            done += 1
        while i < len(jobs) and jobs[i].submit <= now:
            pending[jobs[i].job_id] = replay_job(jobs[i])
            heapq.heappush(widths, (jobs[i].procs, jobs[i].job_id))
            i += 1
        while widths and widths[0][1] not in pending:
            heapq.heappop(widths)
        # a cycle can start nothing while even the narrowest waiting gang needs more nodes
        # than are idle (every node has one cpu): skip it, the outcome is the same
        if pending and widths[0][0] <= idle:
            snap = Snapshot(
                now=now,
                pending=tuple(pending.values()),
                running=tuple(running.values()),
                clusters=clusters,
                free=free,
            )
            result = run_cycle(snap, reg)
            cycles += 1
            for d in result.starts:
                job = pending.pop(d.job.job_id)
                nodes_of = tuple(p.node for p in d.placement)
                running[job.job_id] = replace(
                    job,
                    state=JobState.RUNNING,
                    start_time=now,
                    nodes=nodes_of,
                    placement=d.placement,
                )
                for n in nodes_of:
                    free[n] = NodeFree(free[n].node, 0, 0, frozenset(), 0, 1)
                idle -= len(nodes_of)
                run = run_of[job.job_id]
                heapq.heappush(ends, (now + run, job.job_id))
                last_end = max(last_end, now + run)
                wait = now - job.submit_time
                waits.append(wait)
                bslds.append(bounded_slowdown(wait, run))
                work += run * len(nodes_of)
        if now >= next_sample:
            samples.append(Sample(now, len(pending), nodes - idle))
            next_sample = now + sample_every
            if progress is not None:
                progress(done, len(jobs))
    if progress is not None:
        progress(done, len(jobs))
    makespan = last_end - first
    count = max(len(waits), 1)
    return Outcome(
        policy=policy.name,
        nodes=nodes,
        jobs=len(waits),
        too_big=len(trace.jobs) - len(jobs),
        mean_wait=sum(waits) / count,
        mean_bsld=sum(bslds) / count,
        utilisation=work / (nodes * makespan) if makespan > 0 else 0.0,
        makespan=makespan,
        cycles=cycles,
        seconds=time.perf_counter() - t0,
        samples=tuple(samples),
    )
