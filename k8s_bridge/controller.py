"""The controller of KubernetesBackend: one pass (`tick`) over every gang it tracks.

Run by the backend's thread whenever an informer sees a change (or once a second): finish
creations, place and bind waiting gangs (mode CALDERA: the binder binds a gateway-placed gang
where the gateway put it and places only gangs the gateway left unplaced; withdraw.py hands
back a placement that can no longer be bound), turn pod phases into verdicts (lifecycle.py),
enforce time limits, kill what remains of an ended gang and clean up once the gateway has
the verdict. Kept apart from the backend's port methods (backend.py), which only record
what the gateway asked for and hand out the events this produces.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gateway.model.backend import BackendEvent
from gateway.model.job import Job
from gateway.model.state import JobState, Reason
from k8s_bridge.binder import GangBinder
from k8s_bridge.gang import Gang, Verdict
from k8s_bridge.informer import Informer
from k8s_bridge.inventory import NodeInfo, PodUsage
from k8s_bridge.kube import CONFIGMAPS, KubeClient, KubeError
from k8s_bridge.launch import hosts_text, rank_ips
from k8s_bridge.lifecycle import PodState, gang_status
from k8s_bridge.objects import GangObjects
from k8s_bridge.options import GangMode, K8sOptions
from k8s_bridge.states import LOST
from k8s_bridge.withdraw import Withdrawals

__all__ = ["GangController"]

log = logging.getLogger("k8s_bridge.backend")

Obj = dict[str, Any]


class GangController:
    """The controller half of KubernetesBackend (its state is the backend's own)."""

    name: str
    opts: K8sOptions
    clock: Callable[[], float]
    client: KubeClient
    namespace: str
    binder: GangBinder
    objects: GangObjects
    withdrawals: Withdrawals
    pods: Informer[PodState]
    nodes: Informer[NodeInfo]
    usage: Informer[PodUsage]
    ticks: int
    _ticker: ThreadPoolExecutor  # ticks gangs in parallel (not the pool objects.py uses)
    _lock: threading.RLock
    _tick_lock: threading.Lock
    _gangs: dict[tuple[int, int], Gang]
    _events: list[BackendEvent]
    _polls: int
    _mode: GangMode | None

    def _adopt(self, job: Job, root: Obj | None) -> Gang | None:
        """A gang for a job the gateway believes running here (backend.py)."""
        raise NotImplementedError

    def push_time_limit(self, gang: Gang) -> None:
        """A time limit updated before the gang ran, to rank 0's init (signals.py)."""
        raise NotImplementedError

    def _decided(self, gang: Gang, verdict: Verdict) -> None:
        with self._lock:
            gang.verdict = verdict
            self._events.extend(gang.events(verdict, self.clock()))

    def _release(self, gang: Gang) -> None:
        """The binder stops counting the gang's pods it assumed (the watch counts what
        still exists of them)."""
        self.binder.release(gang.names.pod(r) for r in range(gang.ranks))

    def _verify_adopted(self, gang: Gang, now: float) -> None:
        """A job adopted while the API server did not answer: adopt it properly, or
        report it lost when the cluster has no objects of it."""
        root = self.client.get(CONFIGMAPS, self.namespace, gang.names.root)
        if root is not None:
            with self._lock:
                self._gangs.pop(gang.key, None)
            self._adopt(gang.job, root)
            return
        verdict = Verdict(LOST, message=f"cluster {self.name} has no objects of this job")
        with self._lock:
            gang.blind = False
            gang.verdict = verdict
            gang.verdict_saved = gang.killed = True
            self._events.append(gang.event(verdict, now))

    def _create(self, gang: Gang) -> None:
        verdict = self.objects.create(gang)
        if verdict is not None:  # this attempt ended before (a retried submission)
            with self._lock:
                gang.verdict = verdict
                self._events.append(gang.event(verdict, self.clock()))

    def tick(self) -> None:
        """One pass of the controller (also callable directly, e.g. from tests); never at
        the same time as a withdrawal (backend.withdraw), which must see no binding posted."""
        with self._tick_lock:
            self._tick()

    def _report_queued(self, gang: Gang, now: float) -> None:
        """Where another scheduler places the gang (Volcano, kube-scheduler), the job is
        shown queued there until every rank runs, as Slurm's own pending jobs are; in
        Caldera's mode the gateway placed it and it is already RUNNING."""
        if self._mode is GangMode.CALDERA:
            return
        gang.pending_reported = True
        with self._lock:
            self._events.append(gang.state_event(JobState.PENDING, now, Reason.RESOURCES))

    def _tick(self) -> None:
        self.ticks += 1
        index: dict[tuple[int, int], list[PodState]] = {}
        for pod in self.pods.items().values():
            index.setdefault((pod.job_id, pod.attempt), []).append(pod)
        synced = self.pods.synced
        up = self._ready_nodes()
        now = self.clock()
        mono = time.monotonic()
        with self._lock:
            gangs = sorted(self._gangs.values(), key=lambda g: (g.submitted, g.names.job_id))

        def one(gang: Gang) -> bool:
            """Tick one gang; whether it waits to be placed or bound."""
            waits: list[Gang] = []
            try:
                self._tick_gang(gang, index.get(gang.key, []), synced, now, mono, waits, up)
            except KubeError as exc:
                gang.last_error = str(exc)
                gang.next_try = mono + gang.backoff
                gang.backoff = min(gang.backoff * 2, 5.0)
                log.info("job %s: %s", gang.names.job_id, exc)
            return bool(waits)

        # Gangs are independent, and a tick is mostly round trips (create, save a verdict,
        # delete): in parallel, a flood of ending jobs is cleaned up at the API server's
        # pace, not one request at a time. Waiting gangs keep their order.
        flags = list(self._ticker.map(one, gangs))
        waiting = [g for g, waits in zip(gangs, flags, strict=True) if waits]
        if waiting and self._mode is GangMode.CALDERA:
            self._bind_waiting(waiting)

    def _tick_gang(
        self,
        gang: Gang,
        pods: list[PodState],
        synced: bool,
        now: float,
        mono: float,
        waiting: list[Gang],
        up: frozenset[str] | None,
    ) -> None:
        if gang.cleanup_done:
            if gang.steps_after_cancel:
                late = gang.steps_at_end(pods, now, self.opts.kill_wait_s)
                with self._lock:
                    self._events.extend(late)
                if gang.steps_after_cancel:
                    return
            if not pods or all(p.deleting for p in pods):
                with self._lock:
                    if gang.delivered_at is not None or gang.cancelled:
                        self._gangs.pop(gang.key, None)
            return
        if mono < gang.next_try:
            return
        if gang.cancelled:
            self.objects.delete(gang)
            gang.cleanup_done = True
            self._release(gang)
            return
        if gang.blind:
            self._verify_adopted(gang, now)
            return
        if not gang.created and gang.verdict is None:
            try:
                self._create(gang)
            except KubeError as exc:
                if exc.retryable:
                    raise
                self._decided(gang, gang.launch_failure(f"the API server rejected it: {exc}", now))
            gang.backoff = 0.2
        # a rank's node NotReady (or gone): the node controller marks a node whose kubelet
        # stopped reporting after its grace period, its pods still say Running
        down = {p.node for p in pods if p.node and up is not None and p.node not in up}
        if gang.verdict is None and synced:
            status = gang_status(
                pods,
                gang.ranks,
                was_running=gang.started,
                missing_is_lost=gang.created,
                seen=gang.seen,
                down=down,
            )
            if gang.observe(pods, status, mono):
                with self._lock:
                    self._events.append(gang.state_event(JobState.RUNNING, now))
            elif gang.created and not gang.started and not gang.pending_reported:
                self._report_queued(gang, now)
            if not gang.hosts_written and gang.created:
                self._write_hosts(gang, pods)
            verdict = gang.decide(status, mono, now, self.opts.kill_wait_s)
            if verdict is not None:
                self._decided(gang, verdict)
            elif gang.over_limit(mono, self.opts.kill_wait_s) and not gang.deadline_set:
                self.objects.end_at_deadline(gang, pods, now)
                gang.deadline_set = True
            elif gang.started and gang.limit_to_push is not None:
                self.push_time_limit(gang)
            elif gang.created and (gang.nodes is None or len(gang.bound) < gang.ranks):
                waiting.append(gang)
        if gang.verdict is not None:
            if not gang.verdict_saved:
                self.objects.save_verdict(gang, gang.verdict)
            if not gang.killed:
                self.objects.kill(gang, pods, down)
                gang.killed = True
                self._release(gang)
            if gang.delivered_at is not None and gang.delivered_at < self._polls:
                self.objects.delete(gang)
                gang.cleanup_done = True

    def _write_hosts(self, gang: Gang, pods: list[PodState]) -> None:
        """The ranks' pod IPs into the root, for srun/mpirun in the pods (launch.py)."""
        text = hosts_text(gang.names, gang.ranks, rank_ips(pods))
        if gang.ranks < 2 or text is not None:
            if text is not None:
                self.client.patch(
                    CONFIGMAPS, self.namespace, gang.names.root, {"data": {"hosts": text}}
                )
            gang.hosts_written = True

    def _pod_deleted(self, pod: PodState) -> None:
        """Rank 0's last state as its deletion carries it: a cancelled gang's steps (its
        pod may be gone before a tick sees its container end)."""
        if pod.rank != 0 or not pod.steps:
            return
        with self._lock:
            gang = self._gangs.get((pod.job_id, pod.attempt))
            if gang is not None and gang.steps_after_cancel:
                gang.step_records = pod.steps

    def _ready_nodes(self) -> frozenset[str] | None:
        """The nodes not lost: Ready, or NotReady for less than `node_lost_after_s` (None
        until the node watch is synced). A NotReady node with no transition time is lost."""
        if not self.nodes.synced:
            return None
        horizon = time.time() - self.opts.node_lost_after_s
        return frozenset(
            name
            for name, node in self.nodes.items().items()
            if node.ready or (node.not_ready_since is not None and node.not_ready_since > horizon)
        )

    def _bind_waiting(self, gangs: list[Gang]) -> None:
        """Place the gangs that have no nodes yet (in order) and bind every unbound rank."""
        if not (self.nodes.synced and self.usage.synced):
            return
        unplaced = [g for g in gangs if g.nodes is None]
        if unplaced:
            demands = [g.demand() for g in unplaced]
            version = self.nodes.version
            placed = self.binder.place(
                demands, self.nodes.items(), self.usage.items().values(), version
            )
            for demand, nodes in placed:
                gang = self._gangs.get((demand.job.job_id, demand.job.restart_count))
                if gang is not None:
                    gang.nodes = nodes
            unfit = [g for g in unplaced if g.nodes is None]
            for gang, verdict in self.withdrawals.due(unfit, self.nodes.items(), time.monotonic()):
                log.info("job %s withdrawn: %s", gang.names.job_id, verdict.message)
                self._decided(gang, verdict)
        work = []
        for gang in gangs:
            if gang.nodes is None:
                continue
            todo = [r for r in range(gang.ranks) if r not in gang.bound]
            if todo:
                work.append((gang, gang.nodes, todo))
        outcomes = self.binder.bind_all([(g.demand(), nodes, todo) for g, nodes, todo in work])
        for (gang, _, _), outcome in zip(work, outcomes, strict=True):
            gang.bound.update(outcome.bound)
            hard = [e for e in outcome.failed.values() if not e.retryable]
            if hard:
                log.warning("job %s: binding failed: %s", gang.names.job_id, hard[0])
                failure = gang.launch_failure(f"binding failed: {hard[0]}", self.clock())
                self._decided(gang, failure)
