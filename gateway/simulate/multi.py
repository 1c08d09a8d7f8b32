"""Trace replay over several clusters: how a routing policy spreads one queue (issue 12).

Each cluster is the single-cluster replay's machine (gateway/simulate/engine.py: one
single-cpu node per SWF processor, the scheduler's own `run_cycle` under one Policy); the
clusters share one virtual clock. A job is *dispatched* to a cluster, where it can start
after that cluster's latency (a burst cluster's provisioning or remote submission); a job
dispatched to several clusters is held there as siblings, and the first cluster whose
cycle starts it wins: the others are revoked at once, so no job ever runs twice. Within one
instant the clusters run their cycles in the order given (home first).

Routings compared (all send a job only where it fits):
- `home`: home only (jobs wider than home are not replayed, like the single replay's);
- `first`: MultiKueue-style "first to admit": dispatched everywhere at submission;
- `wait`: dispatched home, and after a fixed wait still pending, everywhere too;
- `caldera`: one cluster, chosen by `gateway.federation.routing.choose` over each cluster's
  own backfill plan (gateway/simulate/predict.py) and size (`pack_s`) at submission; with
  `reroute_s` the first pending jobs are routed again every that many seconds when any
  cluster changed meanwhile (moved: withdrawn and dispatched again, with `current`
  hysteresis).

Pure: a trace and clusters in, a MultiOutcome out.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from gateway.federation.routing import Burst, Prediction, RoutePolicy, choose
from gateway.model.job import Job
from gateway.model.state import JobState
from gateway.scheduler.builtin import FACTORIES as BUILTIN
from gateway.scheduler.catalog import FACTORIES
from gateway.scheduler.cycle import run_cycle
from gateway.scheduler.plugins import Registry
from gateway.scheduler.snapshot import NodeFree, Snapshot
from gateway.simulate.engine import Policy, bounded_slowdown, machine, replay_job
from gateway.simulate.predict import Profile, plan
from gateway.simulate.swf import SwfJob, Trace

__all__ = ["ROUTINGS", "ClusterFigures", "MultiOutcome", "Routing", "Site", "simulate_multi"]

ROUTINGS = ("home", "first", "wait", "caldera")


@dataclass(frozen=True, slots=True)
class Site:
    """One cluster of the replay; the first one given is home."""

    name: str
    nodes: int
    latency_s: float = 0.0  # from dispatch until the job may start there


@dataclass(frozen=True, slots=True)
class Routing:
    """A routing policy and its knobs."""

    name: str  # one of ROUTINGS
    wait_s: float = 600.0  # `wait`: how long at home before bursting
    margin_s: float = 300.0  # `caldera`: home preferred within this margin
    depth: int = 64  # `caldera`: queued jobs each cluster's plan looks at
    reroute_s: float | None = None  # `caldera`: route pending jobs again this often
    pack_s: float = 0.0  # `caldera`: RoutePolicy.pack_s (the smaller cluster favoured)

    def __post_init__(self) -> None:
        if self.name not in ROUTINGS:
            raise ValueError(f"unknown routing {self.name!r}; known: {', '.join(ROUTINGS)}")


@dataclass(frozen=True, slots=True)
class ClusterFigures:
    name: str
    nodes: int
    jobs: int  # jobs that ran there
    mean_wait: float
    mean_bsld: float
    utilisation: float  # over the federation's makespan


@dataclass(frozen=True, slots=True)
class MultiOutcome:
    """What a multi-cluster replay measured (means over every replayed job)."""

    routing: str
    jobs: int
    too_big: int  # wider than every cluster: never replayed
    mean_wait: float
    mean_bsld: float
    utilisation: float  # work / (all clusters' nodes x makespan)
    makespan: float
    moved: int  # times `caldera` re-routing moved a pending job
    clusters: tuple[ClusterFigures, ...]
    seconds: float
    runs: tuple[tuple[int, str, float], ...] = field(repr=False)  # (job id, cluster, start)

    def summary(self) -> str:
        """One line a script can read: the routing's name first, then key=value."""
        away = ",".join(f"{c.name}:{c.jobs}" for c in self.clusters)
        return (
            f"{self.routing} jobs={self.jobs} mean_wait={self.mean_wait:.1f}s "
            f"bsld={self.mean_bsld:.2f} util={self.utilisation:.3f} "
            f"makespan={self.makespan:.0f}s ran={away} moved={self.moved} "
            f"wall={self.seconds:.1f}s"
        )


class _Cluster:
    """One cluster's mutable replay state."""

    def __init__(self, site: Site, policy: Policy, records: dict[int, Job]) -> None:
        self.site = site
        self.records = records  # every replayed job by id (in-flight ones are not pending)
        self.reg = Registry.build(policy.plugins, {**BUILTIN, **FACTORIES})
        self.reg.backfill = policy.params
        cluster, self.free = machine(site.nodes)
        self.clusters = {"sim": cluster}
        self.pending: dict[int, Job] = {}
        self.widths: list[tuple[int, int]] = []
        self.running: dict[int, Job] = {}
        self.idle = site.nodes
        self.inflight: dict[int, float] = {}  # job id -> arrival time
        self.version = 0  # bumped on every change (the plan cache's key)
        self.cached: tuple[int, float, Profile, float] | None = None
        self.waits: list[float] = []
        self.bslds: list[float] = []
        self.work = 0.0

    def add(self, job: Job) -> None:
        self.inflight.pop(job.job_id, None)
        self.pending[job.job_id] = job
        heapq.heappush(self.widths, (_len_of(job), job.job_id))
        self.version += 1

    def withdraw(self, job_id: int) -> None:
        held = self.pending.pop(job_id, None), self.inflight.pop(job_id, None)
        if held != (None, None):
            self.version += 1

    def holds(self, job_id: int) -> bool:
        return job_id in self.pending or job_id in self.inflight

    def running_ends(self, now: float) -> list[tuple[float, int]]:
        """(end at the requested limit, processors) of the running jobs (the plan's view)."""
        return [
            (
                (now if j.start_time is None else j.start_time) + 60.0 * (j.time_limit or 0),
                len(j.placement),
            )
            for j in self.running.values()
        ]

    def may_start(self) -> bool:
        while self.widths and self.widths[0][1] not in self.pending:
            heapq.heappop(self.widths)
        return bool(self.pending) and self.widths[0][0] <= self.idle

    def predict(self, now: float, job: SwfJob, depth: int) -> float:
        """The job's predicted start here if it were dispatched now (behind the queue)."""
        if self.cached is None or self.cached[:2] != (self.version, now):
            running = self.running_ends(now)
            arrival = {**{k: now for k in self.pending}, **self.inflight}
            queued = sorted(
                (self.records[k] for k in arrival), key=lambda j: (j.submit_time, j.job_id)
            )
            queue = [(_len_of(j), 60.0 * (j.time_limit or 0), arrival[j.job_id]) for j in queued]
            prof, floor = plan(now, self.site.nodes, running, queue, depth)
            self.cached = (self.version, now, prof, floor)
        _, _, prof, floor = self.cached
        ready = now + self.site.latency_s
        return max(prof.earliest(job.procs, 60.0 * job.limit_min, ready), floor)


def _len_of(job: Job) -> int:
    return job.spec.nodes_min or 1


def simulate_multi(
    trace: Trace, sites: Sequence[Site], policy: Policy, routing: Routing
) -> MultiOutcome:
    """Replay `trace` over `sites` (the first is home) under one scheduler `policy` per
    cluster and `routing` between them."""
    t0 = time.perf_counter()
    if not sites:
        raise ValueError("no cluster to replay on")
    widest = max(s.nodes for s in sites)
    home_only = routing.name == "home"
    jobs = [j for j in trace.jobs if j.procs <= (sites[0].nodes if home_only else widest)]
    swf = {j.job_id: j for j in jobs}
    records = {j.job_id: replay_job(j) for j in jobs}
    cl = [_Cluster(s, policy, records) for s in sites]
    route = RoutePolicy(sites[0].name, routing.margin_s, pack_s=routing.pack_s)
    arrivals: list[tuple[float, int, int]] = []  # (time, job id, cluster index)
    timers: list[tuple[float, int]] = []  # (time, job id): `wait` bursts
    ends: list[tuple[float, int, int]] = []
    started: dict[int, tuple[int, float]] = {}
    moved = 0
    i = 0
    first = jobs[0].submit if jobs else 0.0
    last_end = first

    def dispatch(job_id: int, c: int, now: float) -> None:
        lat = cl[c].site.latency_s
        if lat <= 0:
            cl[c].add(records[job_id])
        else:
            cl[c].inflight[job_id] = now + lat
            cl[c].version += 1
            heapq.heappush(arrivals, (now + lat, job_id, c))

    def fits(job_id: int) -> list[int]:
        return [c for c in range(len(cl)) if swf[job_id].procs <= cl[c].site.nodes]

    def routed(job_id: int, now: float) -> int:
        where = fits(job_id)
        preds = [
            Prediction(
                cl[c].site.name, cl[c].predict(now, swf[job_id], routing.depth), cl[c].site.nodes
            )
            for c in where
        ]
        r = choose(preds, route, Burst.ALLOWED, now=now, length_s=60.0 * swf[job_id].limit_min)
        return where[0] if r.cluster is None else where[[p.cluster for p in preds].index(r.cluster)]

    def reroute(now: float) -> int:
        """Route the first `depth` pending jobs (priority order) again, each against every
        cluster's plan of the jobs before it (as one conservative plan over the federation,
        so moves do not herd); moving away from the current cluster needs the margin."""
        held = {k for s in cl for k in (*s.pending, *s.inflight)}
        order = sorted(held, key=lambda k: (records[k].submit_time, k))[: routing.depth]
        profiles = [Profile(now, s.site.nodes, s.running_ends(now)) for s in cl]
        moves = 0
        for k in order:
            cur = next(c for c in range(len(cl)) if cl[c].holds(k))
            where = fits(k)
            ready = {
                c: cl[c].inflight.get(k, now) if c == cur else now + cl[c].site.latency_s
                for c in where
            }
            procs, dur = swf[k].procs, 60.0 * swf[k].limit_min
            preds = [
                Prediction(
                    cl[c].site.name, profiles[c].earliest(procs, dur, ready[c]), cl[c].site.nodes
                )
                for c in where
            ]
            r = choose(
                preds, route, Burst.ALLOWED, now=now, current=cl[cur].site.name, length_s=dur
            )
            target = (
                cur if r.cluster is None else where[[p.cluster for p in preds].index(r.cluster)]
            )
            profiles[target].reserve(procs, dur, ready[target])
            if target != cur:
                cl[cur].withdraw(k)
                dispatch(k, target, now)
                moves += 1
        return moves

    inf = float("inf")
    tick = routing.reroute_s if routing.name == "caldera" and routing.reroute_s else None
    next_tick = first + tick if tick else inf
    seen: tuple[int, ...] = ()
    while i < len(jobs) or ends or arrivals or (timers and len(started) < len(jobs)):
        now = min(
            jobs[i].submit if i < len(jobs) else inf,
            ends[0][0] if ends else inf,
            arrivals[0][0] if arrivals else inf,
            timers[0][0] if timers else inf,
            next_tick,
        )
        while ends and ends[0][0] <= now:
            _, job_id, c = heapq.heappop(ends)
            job = cl[c].running.pop(job_id)
            for p in job.placement:
                cl[c].free[p.node] = NodeFree(cl[c].free[p.node].node, 1, 1, frozenset())
            cl[c].idle += len(job.placement)
            cl[c].version += 1
        while i < len(jobs) and jobs[i].submit <= now:
            job_id = jobs[i].job_id
            i += 1
            where = fits(job_id)
            if routing.name == "caldera":
                dispatch(job_id, routed(job_id, now), now)
            elif routing.name == "first":
                for c in where:
                    dispatch(job_id, c, now)
            else:
                dispatch(job_id, where[0], now)
                if routing.name == "wait" and len(where) > 1:
                    heapq.heappush(timers, (now + routing.wait_s, job_id))
        while timers and timers[0][0] <= now:
            _, job_id = heapq.heappop(timers)
            if job_id not in started:
                for c in fits(job_id):
                    if not cl[c].holds(job_id):
                        dispatch(job_id, c, now)
        if tick and now >= next_tick:
            if tuple(s.version for s in cl) != seen:  # nothing changed: same decisions
                moved += reroute(now)
                seen = tuple(s.version for s in cl)
            next_tick = now + tick
        while arrivals and arrivals[0][0] <= now:
            t, job_id, c = heapq.heappop(arrivals)
            if job_id not in started and cl[c].inflight.get(job_id) == t:
                cl[c].add(records[job_id])
        for c, state in enumerate(cl):
            if not state.may_start():
                continue
            snap = Snapshot(
                now=now,
                pending=tuple(state.pending.values()),
                running=tuple(state.running.values()),
                clusters=state.clusters,
                free=state.free,
            )
            for d in run_cycle(snap, state.reg).starts:
                job = state.pending.pop(d.job.job_id)
                if job.job_id in started:
                    raise AssertionError(f"job {job.job_id} started twice")
                started[job.job_id] = (c, now)
                for other in cl:
                    other.withdraw(job.job_id)  # revoke the siblings
                nodes_of = tuple(p.node for p in d.placement)
                state.running[job.job_id] = replace(
                    job,
                    state=JobState.RUNNING,
                    start_time=now,
                    nodes=nodes_of,
                    placement=d.placement,
                )
                for n in nodes_of:
                    state.free[n] = NodeFree(state.free[n].node, 0, 0, frozenset(), 0, 1)
                state.idle -= len(nodes_of)
                state.version += 1
                run = swf[job.job_id].run
                heapq.heappush(ends, (now + run, job.job_id, c))
                last_end = max(last_end, now + run)
                wait = now - job.submit_time
                state.waits.append(wait)
                state.bslds.append(bounded_slowdown(wait, run))
                state.work += run * len(nodes_of)
    makespan = last_end - first
    waits = [w for s in cl for w in s.waits]
    bslds = [b for s in cl for b in s.bslds]
    count = max(len(waits), 1)
    total_nodes = sum(s.nodes for s in sites)

    def util(work: float, nodes: int) -> float:
        return work / (nodes * makespan) if makespan > 0 else 0.0

    return MultiOutcome(
        routing=routing.name,
        jobs=len(waits),
        too_big=len(trace.jobs) - len(jobs),
        mean_wait=sum(waits) / count,
        mean_bsld=sum(bslds) / count,
        utilisation=util(sum(s.work for s in cl), total_nodes),
        makespan=makespan,
        moved=moved,
        clusters=tuple(
            ClusterFigures(
                s.site.name,
                s.site.nodes,
                len(s.waits),
                sum(s.waits) / max(len(s.waits), 1),
                sum(s.bslds) / max(len(s.bslds), 1),
                util(s.work, s.site.nodes),
            )
            for s in cl
        ),
        seconds=time.perf_counter() - t0,
        runs=tuple((j, cl[c].site.name, t) for j, (c, t) in sorted(started.items())),
    )
