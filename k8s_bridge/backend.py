"""KubernetesBackend: Caldera's Backend protocol on a real API server.

submit()   renders the gang, checks the cluster's bound on not-yet-running pods (a retryable
           BackendError when it is reached), and creates the objects if absent (deterministic
           names: 409 is success). A manifest the server refuses raises a BackendError with the
           server's message; an API server that does not answer leaves the creation to the
           controller, which retries until it answers.
controller a thread (controller.py): informers (list + watch) of the gang pods, nodes
           and, for Caldera's binder, every bound pod; each tick it finishes creations,
           places and binds waiting gangs (mode CALDERA; withdraw.py hands back
           gateway-placed gangs that cannot be bound), turns pod phases into job verdicts,
           enforces time limits, kills what remains of an ended gang and cleans up.
poll()     hands out events (non-blocking). A verdict handed out by one poll() is taken as
           stored by the gateway at the next poll(): only then are its objects deleted, so
           a gateway that dies in between finds the verdict again (on the root ConfigMap).
reconcile(jobs) adopts the gateway's running jobs, reports how they ended while it was away,
           reports LOST what the cluster does not have, and deletes objects of other jobs.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client as k8s_client

from gateway.model.backend import BackendError, BackendEvent, Launch
from gateway.model.cluster import ClusterState
from gateway.model.job import Job
from gateway.model.state import JobState, Reason
from k8s_bridge.binder import GangBinder
from k8s_bridge.controller import GangController
from k8s_bridge.gang import ANN_CREATED, Gang, Verdict, decode_verdict
from k8s_bridge.graceful import GracefulEnd
from k8s_bridge.informer import Informer
from k8s_bridge.inventory import (
    NodeInfo,
    PodUsage,
    parse_node,
    parse_usage,
)
from k8s_bridge.kube import (
    CONFIGMAPS,
    NODES,
    PODS,
    KubeClient,
    KubeError,
    api_client_from_kubeconfig,
    api_client_from_token,
)
from k8s_bridge.lifecycle import PodState, gang_status, parse_pod
from k8s_bridge.liveness import ApiLiveness, describe_cluster
from k8s_bridge.names import (
    LABEL_CLUSTER,
    LABEL_MANAGED,
    MANAGED_BY,
    GangNames,
    label_value,
    selector,
)
from k8s_bridge.objects import GangObjects
from k8s_bridge.options import GangMode, K8sOptions
from k8s_bridge.ratelimit import TokenBucket
from k8s_bridge.reconcile import adoption_launch, index_pods, index_roots
from k8s_bridge.render import TranslationError, render_gang, without_podgroup
from k8s_bridge.request import GangRequest
from k8s_bridge.room import RoomView
from k8s_bridge.signals import JobSignals
from k8s_bridge.states import LOST, event_kind
from k8s_bridge.withdraw import Withdrawals, is_withdrawn, resubmitted, withdraw_attempt

__all__ = ["KubernetesBackend"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]


class KubernetesBackend(GracefulEnd, JobSignals, RoomView, GangController):
    """Jobs as gangs of pods on one Kubernetes cluster (see the module docstring)."""

    def __init__(
        self,
        *,
        cluster: str,
        kubeconfig: str | Path | None = None,
        context: str | None = None,
        server: str | None = None,
        token: str | None = None,
        ca_file: str | Path | None = None,
        api_client: k8s_client.ApiClient | None = None,
        volcano: bool | None = None,
        options: K8sOptions | None = None,
        start: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.name = cluster
        self.opts = options or K8sOptions()
        self.clock = clock
        pool = max(self.opts.workers * 2, 8)
        if api_client is None:
            if server is not None:
                if token is None:
                    raise ValueError("a server URL needs a bearer token")
                api_client = api_client_from_token(server, token, ca_file, pool=pool)
            else:
                api_client = api_client_from_kubeconfig(kubeconfig, context, pool=pool)
        self.limiter = TokenBucket(self.opts.qps, self.opts.burst)
        self.client = KubeClient(api_client, self.limiter, self.opts.request_timeout_s)
        self.namespace = self.opts.namespace
        self._mode: GangMode | None = self.opts.mode
        if self._mode is None and volcano is not None:
            self._mode = GangMode.VOLCANO if volcano else GangMode.CALDERA
        self._podgroups_served: bool | None = None
        self._lock = threading.RLock()
        self._tick_lock = threading.Lock()
        self._gangs: dict[tuple[int, int], Gang] = {}
        self._events: list[BackendEvent] = []
        self._polls = 0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max(self.opts.workers, 1), thread_name_prefix="k8s")
        self._ticker = ThreadPoolExecutor(max(self.opts.workers, 1), thread_name_prefix="k8s-tick")
        self.binder = GangBinder(self.client, self.namespace, cluster, self.opts)
        self.objects = GangObjects(
            self.client, self.namespace, cluster, self._pool, self.opts.kill_wait_s
        )
        self.withdrawals = Withdrawals(self.client, self.objects, self.opts.withdraw_after_s)
        mine = {LABEL_MANAGED: MANAGED_BY, LABEL_CLUSTER: label_value(cluster)}
        self._selector = selector(mine)
        self.pods: Informer[PodState] = Informer(
            self.client,
            PODS,
            self.namespace,
            parse_pod,
            label_selector=self._selector,
            on_change=self._wake.set,
            on_deleted=self._pod_deleted,
            watch_timeout_s=self.opts.watch_timeout_s,
            name=f"{cluster}-pods",
        )
        self.nodes: Informer[NodeInfo] = Informer(
            self.client,
            NODES,
            None,
            parse_node,
            on_change=self._wake.set,
            watch_timeout_s=self.opts.watch_timeout_s,
            name=f"{cluster}-nodes",
        )
        self.usage: Informer[PodUsage] = Informer(
            self.client,
            PODS,
            None,
            parse_usage,
            field_selector="spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed",
            on_change=self._wake.set,
            watch_timeout_s=self.opts.watch_timeout_s,
            name=f"{cluster}-usage",
        )
        self._thread: threading.Thread | None = None
        self.liveness = ApiLiveness(
            self.client, cluster, self.opts.probe_interval_s, self.opts.silent_after_s
        )
        self.ticks = 0
        if start:
            self.start()

    # --- running --------------------------------------------------------------------

    def start(self) -> None:
        """Start the informers and the controller thread."""
        if self._thread is not None:
            return
        self.pods.start()
        self.nodes.start()
        self.liveness.start()
        if self._mode is GangMode.CALDERA:
            self.usage.start()
        self._thread = threading.Thread(target=self._run, name=f"k8s-{self.name}", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the threads (running jobs keep running on the cluster)."""
        self._stop.set()
        self._wake.set()
        self.liveness.stop()
        for informer in (self.pods, self.nodes, self.usage):
            informer.stop()
        if self._thread is not None:
            self._thread.join(10)
        self.binder.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._ticker.shutdown(wait=False, cancel_futures=True)
        self.client.api.close()  # type: ignore[no-untyped-call]

    def mode(self) -> GangMode:
        """Who places gangs here (detected from the served APIs when not configured)."""
        if self._mode is None:
            self._mode = (
                GangMode.VOLCANO
                if self.client.served("scheduling.volcano.sh/v1beta1")
                else (GangMode.CALDERA)
            )
        if self._mode is GangMode.CALDERA:
            self.usage.start()
        return self._mode

    def _podgroups(self) -> bool:
        if self._podgroups_served is None:
            self._podgroups_served = self.client.served("scheduling.volcano.sh/v1beta1")
        return self._podgroups_served

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.opts.resync_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.tick()
            except Exception:
                log.exception("kubernetes backend %s: controller tick failed", self.name)

    # --- Backend protocol -------------------------------------------------------------

    def describe(self) -> ClusterState:
        """Nodes (allocatable cpu/memory/GPUs, labels, taints as drain reasons) and the
        partitions made from node labels; `reachable=False` when the API server is not."""
        return describe_cluster(self.name, self.nodes, self.liveness, self.opts)

    def submit(self, launch: Launch) -> str:
        """Create the gang of this job attempt (idempotent); its backend id."""
        req = GangRequest.from_launch(launch)
        names = GangNames(self.opts.name_prefix, req.job_id, req.attempt)
        with self._lock:
            existing = self._gangs.get((req.job_id, req.attempt))
            if existing is not None:
                return resubmitted(existing, self.name)
        try:
            mode = self.mode()
            podgroups = mode is not GangMode.CALDERA or self._podgroups()
        except KubeError as exc:
            raise BackendError(
                f"cluster {self.name}: cannot reach the API server to submit job "
                f"{req.job_id}: {exc}",
                retryable=True,
            ) from exc
        try:
            manifests = render_gang(req, self.opts, mode)
        except TranslationError as exc:
            raise BackendError(f"job {req.job_id}: {exc}") from exc
        if not podgroups:
            manifests = without_podgroup(manifests)
        with self._lock:
            existing = self._gangs.get((req.job_id, req.attempt))
            if existing is not None:
                return resubmitted(existing, self.name)
            waiting = sum(g.not_running() for g in self._gangs.values())
            if waiting and waiting + manifests.ranks > self.opts.max_pending_pods:
                raise BackendError(
                    f"cluster {self.name} has {waiting} pods that do not run yet (limit "
                    f"{self.opts.max_pending_pods}); job {req.job_id} waits",
                    retryable=True,
                    waiting_reason=Reason.RESOURCES,
                )
            gang = Gang(
                job=launch.job,
                names=names,
                manifests=manifests,
                submitted=time.monotonic(),
                hint=tuple(p.node for p in launch.placement),
                deadline_s=req.deadline_s(self.opts.time_scale),
                launched_at=self.clock(),
                next_try=time.monotonic() + 2.0,  # this thread creates it; the controller retries
            )
            self._gangs[gang.key] = gang
        try:
            self._create(gang)
        except KubeError as exc:
            if exc.retryable:
                gang.last_error = str(exc)
                log.info("job %s: creation deferred: %s", req.job_id, exc)
            else:
                with self._lock:
                    self._gangs.pop(gang.key, None)
                self.objects.delete(gang, quiet=True)
                raise BackendError(
                    f"job {req.job_id}: the API server rejected the job: {exc}"
                ) from exc
        gang.next_try = 0.0  # over to the controller
        self._wake.set()
        return gang.backend_id

    def cancel(self, job: Job, signal: int | None = None, batch_only: bool = False) -> None:
        """Cancel (delete every object of) the job; another signal, or one to the batch
        shell alone, reaches its processes through exec (signals.py)."""
        if signal is not None and (batch_only or signal != 9):
            self.signal_job(job, signal, batch_only)
            return
        now = self.clock()
        with self._lock:
            gangs = [g for g in self._gangs.values() if g.names.job_id == job.job_id]
            for gang in gangs:
                if gang.verdict is None:
                    gang.verdict = Verdict(JobState.CANCELLED, message="cancelled", end_time=now)
                    self._events.append(gang.event(gang.verdict, now))
                    gang.steps_after_cancel = gang.started
                gang.cancelled = True
        if not gangs:
            self.objects.delete_by_job(job.job_id)
            return
        for gang in gangs:
            try:
                self.objects.delete(gang)
                gang.cleanup_done = True
            except KubeError as exc:
                gang.last_error = str(exc)  # the controller retries
        self._wake.set()

    @property
    def places_itself(self) -> bool:
        """Volcano (or kube-scheduler) places the pods, not the gateway; STARTED reports
        their nodes. False while the mode is unknown (API server not answering)."""
        try:
            return self.mode() is not GangMode.CALDERA
        except KubeError as exc:
            log.warning("cluster %s: gang mode unknown: %s", self.name, exc)
            return False

    def withdraw(self, job: Job) -> bool:
        """Take back the job's current run if it has not started (withdraw.py says what
        started means per mode): True once its objects are confirmed gone on the API
        server, False when it started (kept); BackendError(retryable) when the API server
        does not answer. Nothing is reported for a withdrawn run: the gateway asked."""
        key = (job.job_id, job.restart_count)
        if not self._tick_lock.acquire(timeout=self.opts.request_timeout_s):
            raise BackendError(f"cluster {self.name}: busy, not withdrawn yet", retryable=True)
        try:
            with self._lock:
                gang = self._gangs.get(key)
                # a gang the backend handed back itself has not started: delete it now
                if gang is not None and (gang.started or gang.verdict) and not is_withdrawn(gang):
                    return False
            try:
                mode = gang.manifests.mode if gang is not None else self.mode()
                names = GangNames(self.opts.name_prefix, *key)
                done = withdraw_attempt(self.client, self.objects, names, mode)
            except KubeError as exc:
                raise BackendError(
                    f"cluster {self.name}: job {job.job_id} not withdrawn: {exc}",
                    retryable=exc.retryable,
                ) from exc
            if done:  # nothing more of that run reaches the gateway, which took it back
                self.binder.release(names.pod(r) for r in range(gang.ranks if gang else 0))
                with self._lock:
                    self._gangs.pop(key, None)
                    self._events = [e for e in self._events if (e.job_id, e.run) != key]
            return done
        finally:
            self._tick_lock.release()

    def poll(self) -> list[BackendEvent]:
        """Events since the last call; verdicts handed out before are now cleaned up."""
        with self._lock:
            self._polls += 1
            events, self._events = self._events, []
            for gang in self._gangs.values():
                if gang.verdict is not None and gang.delivered_at is None:
                    gang.delivered_at = self._polls
            if events:
                self._wake.set()
            return events

    def reconcile(self, jobs: Sequence[Job]) -> list[BackendEvent]:
        """Adopt these jobs (believed running here) and report what changed meanwhile."""
        now = self.clock()
        try:
            roots, _ = self.client.list(CONFIGMAPS, self.namespace, label_selector=self._selector)
            pod_objs, _ = self.client.list(PODS, self.namespace, label_selector=self._selector)
        except KubeError as exc:
            log.warning(
                "reconcile %s: API server unreachable, adopting blindly: %s", self.name, exc
            )
            roots, pod_objs = [], []
            reachable = False
        else:
            reachable = True
        root_by_key = index_roots(roots)
        pods_by_key = index_pods(pod_objs)
        events: list[BackendEvent] = []
        wanted = {(j.job_id, j.restart_count) for j in jobs}
        for job in jobs:
            key = (job.job_id, job.restart_count)
            with self._lock:
                if key in self._gangs:
                    continue
            root = root_by_key.get(key)
            if reachable and root is None:
                events.append(
                    BackendEvent(
                        job_id=job.job_id,
                        kind=event_kind(LOST),
                        time=now,
                        backend_id=GangNames(self.opts.name_prefix, *key).base,
                        message=f"cluster {self.name} has no objects of this job",
                        run=key[1],
                    )
                )
                if key in pods_by_key:
                    self.objects.delete_by_job(job.job_id)
                continue
            gang = self._adopt(job, root)
            if gang is None:
                continue
            pods = pods_by_key.get(key, [])
            if gang.verdict is None and reachable:
                status = gang_status(
                    pods, gang.ranks, was_running=gang.created, missing_is_lost=True
                )
                if gang.observe(pods, status, time.monotonic()):
                    events.append(gang.state_event(JobState.RUNNING, now))
                gang.verdict = gang.decide(status, time.monotonic(), now, self.opts.kill_wait_s)
            if gang.verdict is not None:
                events.extend(gang.events(gang.verdict, now))
                with self._lock:
                    gang.delivered_at = self._polls
        if reachable and self.opts.delete_orphans:
            with self._lock:
                tracked = set(self._gangs)
            for key, _root in root_by_key.items():
                if key not in wanted and key not in tracked:
                    log.info(
                        "reconcile %s: deleting objects of job %s (not running)", self.name, key
                    )
                    self.objects.delete_by_job(key[0], attempt=key[1])
        self._wake.set()
        return events

    # --- adoption -----------------------------------------------------------------------

    def _adopt(self, job: Job, root: Obj | None) -> Gang | None:
        """A gang for a job the gateway believes running here (after a restart)."""
        annotations = ((root or {}).get("metadata") or {}).get("annotations") or {}
        env_obj = None
        if root is not None:
            names = GangNames(self.opts.name_prefix, job.job_id, job.restart_count)
            env_obj = self.client.get(CONFIGMAPS, self.namespace, names.env)
        launch = adoption_launch(job, root, env_obj, self.name)
        req = GangRequest.from_launch(launch)
        mode_name = annotations.get("caldera.io/mode")
        try:
            mode = GangMode(mode_name) if mode_name else self.mode()
            manifests = render_gang(req, self.opts, mode)
            if mode is GangMode.CALDERA and not self._podgroups():
                manifests = without_podgroup(manifests)
        except (TranslationError, ValueError, KubeError) as exc:
            log.warning("cannot adopt job %s: %s", job.job_id, exc)
            return None
        gang = Gang(
            job=job,
            names=manifests.names,
            manifests=manifests,
            submitted=time.monotonic(),
            hint=tuple(p.node for p in job.placement),
            deadline_s=req.deadline_s(self.opts.time_scale),
        )
        if root is None:
            gang.blind = True  # the API server did not answer: verify before creating
        else:
            gang.root_uid = str(root["metadata"].get("uid"))
            gang.created = annotations.get(ANN_CREATED) == "true"
            verdict = decode_verdict(annotations)
            if verdict is not None:
                gang.verdict = verdict
                gang.verdict_saved = True
        with self._lock:
            self._gangs[gang.key] = gang
        return gang

    # --- introspection (tests, metrics) ---------------------------------------------------

    def tracked(self) -> dict[tuple[int, int], Gang]:
        """The gangs this backend tracks, by (job id, attempt)."""
        with self._lock:
            return dict(self._gangs)

    def not_running_pods(self) -> int:
        """Pods of this cluster's gangs that do not run yet (what max_pending_pods bounds)."""
        with self._lock:
            return sum(g.not_running() for g in self._gangs.values())
