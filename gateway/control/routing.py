"""Multi-cluster routing: which cluster each pending job waits for, and moving a job that
waits on one cluster's own queue when another would start it sooner.

Every cycle, before the scheduler runs, each pending job the gateway still holds is routed:
the clusters that may run it (gateway/federation/eligibility.py) are given a predicted
start - Slurm's own planner for a cluster that places jobs itself (`PredictsStart`, asked in
a worker thread and cached per request shape), the gateway's estimate for the others
(gateway/federation/estimate.py) - and `choose` (gateway/federation/routing.py) picks one.
The scheduler then only considers that cluster (`selection.Routed`). Routes are reviewed
every `review_s`: a job still waiting may be routed elsewhere (with hysteresis), and a job
pending in another system's queue is moved.

Never twice: a job is in at most one system's queue at a time. Moving a job out of a
cluster's queue is a withdrawal that the cluster confirms (`Withdraws`: hold, check, cancel);
if the job started meanwhile it stays where it started. A withdrawal cut short by a gateway
restart is finished by the adapter (Slurm: the job is marked before it is held, and its
watcher completes or undoes a marked withdrawal and reports WITHDRAWN if it completed). A
cluster that stops answering keeps the jobs it holds (a withdrawal cannot be confirmed);
after `outage_timeout_s` the jobs routed to it but not yet handed over go elsewhere.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from gateway.control.transitions import withdrawn
from gateway.federation.config import RoutingConfig, parse_routing
from gateway.federation.eligibility import burst_of, eligibility, home_of
from gateway.federation.estimate import cpus_needed, start_after_ends
from gateway.federation.routing import WAITING_NOTE, Prediction, Route, choose
from gateway.model.backend import BackendError
from gateway.model.cluster import ClusterState
from gateway.model.job import HANDING, Job
from gateway.model.jobspec import JobSpec
from gateway.model.state import JobState, Reason
from gateway.model.values import INFINITE
from gateway.scheduler.cycle import fits_now, place_now
from gateway.scheduler.request import node_request
from gateway.scheduler.selection import Routed, targets_on
from gateway.scheduler.snapshot import NodeFree, Snapshot
from gateway.store.base import StoreError

if TYPE_CHECKING:
    from gateway.control.gateway import Gateway

__all__ = ["Router", "router_for"]

log = logging.getLogger("caldera.gateway")

_PREDICTION_TTL_S = 10.0
_REVIEW_S = 5.0  # how often routes are reviewed (and queued jobs considered for a move)
_ROUTES_PER_CYCLE = 5000


@dataclass(frozen=True, slots=True)
class _Decision:
    job: Job
    route: Route


class Router:
    """Routes one gateway's pending jobs over its clusters (module docstring)."""

    def __init__(self, gw: Gateway, cfg: RoutingConfig) -> None:
        self.gw = gw
        self.cfg = cfg
        self.policy = cfg.policy()
        self._sizes: dict[str, tuple[ClusterState, int]] = {}  # per description
        # (cluster, partition, request shape) -> (predicted start, monotonic time asked)
        self._preds: dict[tuple[str, str, Hashable], tuple[float | None, float]] = {}
        self._asking: set[tuple[str, str, Hashable]] = set()
        self._ask_slots = asyncio.Semaphore(4)
        self._tasks: set[asyncio.Task[None]] = set()
        self._down_since: dict[str, float] = {}
        self._held: dict[str, int] = {}  # cluster -> Caldera's jobs there (max_jobs)
        self._limited = any(c.max_jobs is not None for c in cfg.per_cluster.values())
        self._moving: set[int] = set()  # job ids being withdrawn from a cluster
        self._next_review: dict[int, float] = {}  # job id -> monotonic time of its review
        # job id -> (its spec, the cluster descriptions, their eligibility verdicts)
        self._verdicts: dict[
            int, tuple[JobSpec, tuple[ClusterState, ...], Mapping[str, str | None]]
        ] = {}

    # --- the cycle's hook -----------------------------------------------------------

    async def before_cycle(self, snap: Snapshot) -> bool:
        """Route new pending jobs; review routes and move queued jobs every review_s.
        True when a route changed (the cycle needs a fresh snapshot)."""
        now = snap.now
        self._track_outages(snap, now)
        clock = time.monotonic()
        self._forget_reviews(snap)
        free = dict(snap.free)
        self._held = {}
        if self._limited:  # a count over the running jobs, only where max_jobs is set
            for held in (*self.gw.jobs.active.values(), *self.gw.jobs.queued.values()):
                self._held[held.cluster] = self._held.get(held.cluster, 0) + 1
        decided: list[_Decision] = []
        waiting: list[Job] = []
        budget = _ROUTES_PER_CYCLE  # the rest wait for the next cycle (a flood of submissions)
        for job in tuple(self.gw.jobs.queued.values()):  # in a cluster's own queue
            due = self._next_review.get(job.job_id, 0.0) <= clock
            if not due or job.job_id in self._moving or budget <= 0 or job.backend_id == HANDING:
                continue  # (being handed to its cluster: nothing there to withdraw yet)
            budget -= 1
            if self._review_queued(job, snap, free, now):
                self._next_review[job.job_id] = clock + _REVIEW_S
        for job in snap.pending:
            due = self._next_review.get(job.job_id, 0.0) <= clock
            if job.routed_to is not None and not due and not self._is_out(job.routed_to, now):
                continue
            if budget <= 0:
                break
            budget -= 1
            route = self._route(job, snap, free, now, current=job.routed_to)
            if route is None:
                if job.route_note != WAITING_NOTE and job.routed_to is None:
                    waiting.append(replace(job, route_note=WAITING_NOTE))
                continue
            self._next_review[job.job_id] = clock + _REVIEW_S
            if route.cluster != job.routed_to or not job.route_note:
                decided.append(_Decision(job, route))
        await self._commit_routes(decided, waiting)
        return bool(decided)

    # --- routing ---------------------------------------------------------------------

    def _route(
        self,
        job: Job,
        snap: Snapshot,
        free: dict[str, NodeFree],
        now: float,
        current: str | None,
    ) -> Route | None:
        """The route of one job; None while a cluster's prediction is still being asked."""
        verdicts = self._eligibility(job, snap)
        preds: list[Prediction] = []
        for name, why in verdicts.items():
            if why is not None:
                continue
            start, known = self._predict(job, name, snap, free, now, current)
            if not known:
                return None
            preds.append(Prediction(name, start, self._size(name, snap.clusters[name])))
        home = home_of(job.spec, self.cfg)
        policy = self.policy if home == self.policy.home else replace(self.policy, home=home)
        route = choose(
            preds,
            policy,
            burst_of(job.spec),
            waited_s=max(now - job.submit_time, 0.0),
            burst_after_s=self.cfg.burst_after_for(job.spec),
            now=now,
            current=current,
            length_s=job.time_limit * 60.0 if 0 < job.time_limit < INFINITE else None,
        )
        skipped = [why for why in verdicts.values() if why is not None]
        note = route.reason + (f"; skipped {'; '.join(skipped)}" if skipped else "")
        target = route.cluster
        if target is not None and not self._places_itself(target):  # its room is taken
            on = targets_on(job, snap.clusters[target], target)
            place_now(job, on, free, self.gw.registry, snap)
        return Route(route.cluster, note, route.compared)

    def _size(self, name: str, state: ClusterState) -> int:
        """A cluster's CPUs, for `[routing] pack` (0 when packing is off: never favoured)."""
        if not self.policy.pack_s:
            return 0
        hit = self._sizes.get(name)
        if hit is None or hit[0] is not state:
            hit = self._sizes[name] = (state, sum(n.cpus for n in state.nodes))
        return hit[1]

    def _eligibility(self, job: Job, snap: Snapshot) -> Mapping[str, str | None]:
        """`eligibility`, kept per job while the clusters' descriptions are the same objects
        (they are immutable; a review then costs only the predictions)."""
        states = tuple(snap.clusters.values())
        hit = self._verdicts.get(job.job_id)
        if hit is not None and hit[0] is job.spec and hit[1] == states:
            return hit[2]
        verdicts = eligibility(job, snap.clusters, self.cfg, snap.def_mem_per_cpu_mb)
        self._verdicts[job.job_id] = (job.spec, states, verdicts)
        return verdicts

    def _predict(
        self,
        job: Job,
        name: str,
        snap: Snapshot,
        free: dict[str, NodeFree],
        now: float,
        current: str | None,
    ) -> tuple[float | None, bool]:
        """(predicted start, known yet) of the job on one cluster. A cluster that does not
        answer now gets no new job (what it predicted before is stale); the jobs already
        routed to it keep it until `outage_timeout_s` (a blip moves nothing)."""
        cluster = snap.clusters.get(name)
        if cluster is None or self._is_out(name, now) or self._full(name):
            return None, True
        if not cluster.reachable and name != current:
            return None, True
        targets = targets_on(job, cluster, name)
        if not targets:
            return None, True
        caps = self.gw.caps.get(name)
        asks = None if caps is None else caps.predicts_start
        if asks is None:
            if self._places_itself(name):  # it keeps its own books and cannot tell us (Volcano)
                return None, True
            if fits_now(job, targets, free, self.gw.registry, snap):
                return now, True
            members = {n for t in targets if (p := cluster.partition(t.partition)) for n in p.nodes}
            nodes = [f for n, f in free.items() if n in members]
            running = [j for j in snap.running if j.cluster == name]
            return start_after_ends(cpus_needed(node_request(job.spec)), nodes, running, now), True
        partition = targets[0].partition
        key = (name, partition, (node_request(job.spec), job.time_limit, job.spec.constraint))
        hit = self._preds.get(key)
        fresh = hit is not None and time.monotonic() - hit[1] < _PREDICTION_TTL_S
        if not fresh and key not in self._asking:
            self._asking.add(key)
            task = asyncio.get_running_loop().create_task(self._ask(key, job, partition))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return (None, False) if hit is None else (hit[0], True)

    async def _ask(self, key: tuple[str, str, Hashable], job: Job, partition: str) -> None:
        """Ask a cluster's own planner in a worker thread; wake the gateway with the answer."""
        caps = self.gw.caps.get(key[0])
        asks = None if caps is None else caps.predicts_start
        start: float | None = None
        try:
            if asks is not None:
                async with self._ask_slots:
                    start = await asyncio.to_thread(asks.predict_start, job, partition)
        except BackendError as exc:
            log.info("cluster %s: no start prediction: %s", key[0], exc)
        finally:
            self._preds[key] = (start, time.monotonic())
            self._asking.discard(key)
            self.gw.wake()

    def _full(self, name: str) -> bool:
        """The cluster holds its `max_jobs` of Caldera's jobs (running or in its queue)."""
        limit = self.cfg.cluster(name).max_jobs
        return limit is not None and self._held.get(name, 0) >= limit

    def _places_itself(self, name: str) -> bool:
        caps = self.gw.caps.get(name)
        return caps is not None and caps.places_itself

    def _track_outages(self, snap: Snapshot, now: float) -> None:
        for name, cluster in snap.clusters.items():
            if cluster.reachable:
                self._down_since.pop(name, None)
            else:
                self._down_since.setdefault(name, now)

    def _is_out(self, name: str, now: float) -> bool:
        """Silent for longer than the outage timeout: its unstarted jobs go elsewhere."""
        since = self._down_since.get(name)
        return since is not None and now - since >= self.cfg.outage_timeout_s

    # --- moving a job out of a cluster's own queue -------------------------------------

    def _review_queued(
        self, job: Job, snap: Snapshot, free: dict[str, NodeFree], now: float
    ) -> bool:
        """Withdraw a job from the queue it waits in when another cluster would start it
        sooner. False while a prediction it needs is still being asked (reviewed again next
        cycle)."""
        caps = self.gw.caps.get(job.cluster)
        if caps is None or caps.withdraws is None or job.hold is not None:
            return True
        route = self._route(job, snap, free, now, current=job.cluster)
        if route is None:
            return False
        if route.cluster in (None, job.cluster):
            return True
        self._moving.add(job.job_id)
        task = asyncio.get_running_loop().create_task(self._withdraw(job, route))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    def _forget_reviews(self, snap: Snapshot) -> None:
        """Drop the review times of jobs no longer pending (kept bounded by the queue)."""
        if len(self._next_review) > 2 * (len(snap.pending) + len(self.gw.jobs.queued)) + 1024:
            pending = {j.job_id for j in snap.pending} | set(self.gw.jobs.queued)
            self._next_review = {k: v for k, v in self._next_review.items() if k in pending}
            self._verdicts = {k: v for k, v in self._verdicts.items() if k in pending}

    async def _withdraw(self, job: Job, route: Route | None) -> None:
        caps = self.gw.caps.get(job.cluster)
        try:
            if caps is None or caps.withdraws is None:
                return
            try:
                gone = await asyncio.to_thread(caps.withdraws.withdraw, job)
            except BackendError as exc:
                log.info("job %s: not withdrawn from %s: %s", job.job_id, job.cluster, exc)
                return
            current = self.gw.jobs.get(job.job_id)
            if not gone or current is None or current.backend_id != job.backend_id:
                return  # it started there (it stays), or it changed meanwhile
            if current.state is not JobState.PENDING:
                return
            target = None if route is None else route.cluster
            note = f"revoked on {job.cluster}" + ("" if route is None else f"; {route.reason}")
            moved = replace(
                withdrawn(current, Reason.NONE, None),
                cluster=target or current.cluster,
                routed_to=target,
                route_note=note,
                route_start=predicted_start(route),
            )
            detail = _detail(route)
            await self.gw.commit([moved], "revoke", cluster=job.cluster, **detail)
        except StoreError as exc:  # the next review, or a restart's reconcile, finishes it
            log.error("job %s: withdrawal from %s not stored: %s", job.job_id, job.cluster, exc)
        finally:
            self._moving.discard(job.job_id)

    # --- records -----------------------------------------------------------------------

    async def _commit_routes(self, decided: list[_Decision], waiting: list[Job]) -> None:
        if waiting:
            for job in waiting:  # in memory only: nothing was decided
                self.gw.remember(job)
        commits = []
        for d in decided:
            live = self.gw.jobs.get(d.job.job_id)
            if live is None or live.state is not JobState.PENDING or live.backend_id:
                continue
            viable = ",".join(p.cluster for p in d.route.compared)
            routed = replace(
                live,
                routed_to=d.route.cluster,
                cluster=d.route.cluster or live.cluster,
                viable=viable,
                origin=home_of(live.spec, self.cfg),
                route_note=d.route.reason,
                route_start=predicted_start(d.route),
            )
            detail = _detail(d.route)
            if live.routed_to and live.routed_to != d.route.cluster:
                detail["from"] = live.routed_to  # queued in Caldera's queue for another one
            commits.append(self.gw.commit([routed], "route", **detail))
        try:
            await asyncio.gather(*commits)
        except StoreError as exc:
            log.error("routing decisions not stored: %s", exc)


def predicted_start(route: Route | None) -> float | None:
    """The start predicted on the cluster a decision chose (None: nowhere, or unknown)."""
    if route is None or route.cluster is None:
        return None
    return next((p.start for p in route.compared if p.cluster == route.cluster), None)


def _detail(route: Route | None) -> dict[str, object]:
    """A routing decision as an event's detail: where, why, and what it compared."""
    if route is None:
        return {}
    return {
        "to": route.cluster,
        "why": route.reason,
        "compared": {p.cluster: p.start for p in route.compared},
    }


def router_for(gw: Gateway) -> Router | None:
    """The gateway's router when caldera.toml has a [routing] table (ConfigError when it is
    wrong); the scheduler then considers only each job's routed cluster."""
    if gw.config.routing is None:
        return None
    where = str(gw.config.home / "caldera.toml")
    cfg = parse_routing({"routing": gw.config.routing}, tuple(gw.clusters), where)
    gw.registry.selector = Routed()
    return Router(gw, cfg)
