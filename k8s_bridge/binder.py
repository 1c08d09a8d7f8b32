"""Caldera's gang binder: every rank of a gang reserved on a node, then the Bindings.

Without Volcano, Caldera is the scheduler of its pods (schedulerName `caldera`). A binder
pass takes the nodes (allocatable, labels, taints) and every pod already bound to them
(plus the pods this binder has bound but not yet seen bound: the "assumed" pods, as
kube-scheduler keeps them) and goes through the waiting gangs in order, all ranks or none:

- A gang the gateway placed (one node per rank, `GangDemand.hint`) is bound as decided:
  the binder verifies that every rank still fits its node (free resources, node state,
  the pod's nodeSelector/affinity) and binds it; it never moves the gang. A gang whose
  placement does not fit yet keeps its pods unbound and is tried again on the next pass
  (the backend hands it back to the gateway when that lasts: k8s_bridge/withdraw.py);
  the gangs behind it were placed by the gateway too and go ahead.
- A gang without a placement (submitted to the backend directly, not through the
  gateway's scheduler) is placed here with the gateway's own placement function
  (`gateway.scheduler.topology_plugin.place_gang`) over the free rank slots: the gateway
  scheduler's ResourceFit plus the pod's node rules decide which nodes qualify, the
  pod's exact requests how many ranks each takes (several ranks share a node when they
  fit, as pods do in Volcano); the fullest nodes come first (bin packing keeps whole
  nodes free). Such a gang that does not fit stops the pass (first come, first served:
  big gangs are not starved).

Only a gang whose every rank has a node gets Bindings; they are posted in parallel.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from gateway.model.cluster import ClusterState, Node, NodeState
from gateway.model.job import Job
from gateway.model.topology import Topology
from gateway.scheduler.builtin import ResourceFit
from gateway.scheduler.request import NodeRequest, node_request
from gateway.scheduler.snapshot import NodeFree, Snapshot
from gateway.scheduler.topology_plugin import place_gang
from k8s_bridge.inventory import NodeInfo, PodUsage, cluster_state
from k8s_bridge.kube import KubeClient, KubeError
from k8s_bridge.options import K8sOptions

__all__ = ["BindOutcome", "GangBinder", "GangDemand", "node_matches"]


Obj = dict[str, Any]


# --- node selection rules of a pod ---------------------------------------------------


def _expr_matches(expr: Obj, labels: Mapping[str, str]) -> bool:
    key = str(expr.get("key"))
    op = expr.get("operator")
    values = [str(v) for v in expr.get("values") or []]
    have = labels.get(key)
    if op == "In":
        return have is not None and have in values
    if op == "NotIn":
        return have is None or have not in values
    if op == "Exists":
        return have is not None
    if op == "DoesNotExist":
        return have is None
    if op in ("Gt", "Lt") and have is not None and values:
        try:
            left, right = int(have), int(values[0])
        except ValueError:
            return False
        return left > right if op == "Gt" else left < right
    return False


def node_matches(pod_spec: Obj, labels: Mapping[str, str]) -> bool:
    """The pod's nodeSelector and required node affinity hold on a node with `labels`."""
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = (
        ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or {}
    ).get("nodeSelectorTerms")
    if not required:
        return True
    return any(
        all(_expr_matches(e, labels) for e in term.get("matchExpressions") or [])
        for term in required
    )


def _spec_key(pod_spec: Obj) -> str:
    """What decides node selection in a pod spec, as a cache key."""
    return repr((pod_spec.get("nodeSelector"), pod_spec.get("affinity")))


# --- what a gang needs ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GangDemand:
    """A waiting gang: its job, one pod per rank (name, uid, requests), where the gateway
    wanted it (a hint) and the pod spec that decides which nodes qualify."""

    job: Job
    pods: tuple[str, ...]
    requests: tuple[Mapping[str, int], ...]
    pod_spec: Obj
    hint: tuple[str, ...] = ()
    uids: tuple[str, ...] = ()

    @property
    def ranks(self) -> int:
        """Pods in the gang."""
        return len(self.pods)

    def shape_key(self) -> tuple[Any, ...]:
        """Gangs with equal keys fit the same nodes the same way (per rank)."""
        spec = self.job.spec
        return (
            tuple(sorted(self.largest().items())),
            _spec_key(self.pod_spec),
            spec.sharing,
            spec.constraint,
            tuple(spec.gres),
            tuple(spec.gpus_per_node),
            spec.mem_per_node_mb,
            spec.mem_per_cpu_mb,
            spec.cpus_per_task,
            spec.ntasks_per_node,
            spec.ntasks,
            spec.nodes_min,
        )

    def largest(self) -> dict[str, int]:
        """The largest request of any rank, per resource."""
        out: dict[str, int] = {}
        for req in self.requests:
            for key, value in req.items():
                out[key] = max(out.get(key, 0), value)
        return out


class _ShapeView:
    """Rank slots for one gang shape (requests + node rules) on every node, kept up to
    date as gangs are placed: gangs of a known shape reuse the per-node capacities."""

    def __init__(
        self,
        binder: GangBinder,
        gang: GangDemand,
        models: Mapping[str, Node],
        free: Mapping[str, Mapping[str, int]],
        node_free: Mapping[str, NodeFree],
        snap: Snapshot,
    ) -> None:
        self.binder, self.gang, self.models = binder, gang, models
        self.free, self.node_free, self.snap = free, node_free, snap
        self.need = gang.largest()
        req = node_request(gang.job.spec)
        self.req = replace(req, nodes=1, nodelist=(), partitions=())  # per rank; affinity decides
        self.names = sorted(models)
        self.cap = {name: self._capacity(name) for name in self.names}

    def _capacity(self, name: str) -> int:
        return self.binder.capacity(
            self.gang,
            self.req,
            self.need,
            self.models[name],
            self.free.get(name),
            self.node_free.get(name),
            self.snap,
        )

    def refresh(self, changed: set[str]) -> None:
        """Nodes whose free resources changed."""
        for name in changed:
            if name in self.cap:
                self.cap[name] = self._capacity(name)

    def choose(self, ranks: int, topo: Topology | None) -> tuple[str, ...] | None:
        """A node per rank by `place_gang` over the free slots (a node with room for k
        ranks is k candidates), fullest nodes first. None when the gang does not fit."""
        if sum(self.cap.values()) < ranks:
            return None
        by_room: dict[int, list[str]] = {}
        for name in self.names:  # by name: a bucket sort by room keeps that order inside
            if self.cap[name] > 0:
                by_room.setdefault(self.cap[name], []).append(name)
        slots = [
            self.node_free[n]
            for room in sorted(by_room)
            for n in by_room[room]
            for _ in range(min(room, ranks))
        ]
        placed = place_gang(ranks, slots, topo)
        return None if placed is None else tuple(f.node.name for f in placed.nodes)


@dataclass
class BindOutcome:
    """What happened to the Bindings of one gang."""

    nodes: tuple[str, ...]
    bound: list[int] = field(default_factory=list)
    failed: dict[int, KubeError] = field(default_factory=dict)


# --- the binder ------------------------------------------------------------------------


class GangBinder:
    """Places waiting gangs on a live view of the cluster and binds them."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        cluster: str,
        opts: K8sOptions,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.cluster = cluster
        self.opts = opts
        self.clock = clock
        self._assumed: dict[str, tuple[PodUsage, float]] = {}
        self._pool = ThreadPoolExecutor(max_workers=max(opts.workers, 1), thread_name_prefix="bind")
        self._state_version: int | None = None
        self._state: ClusterState | None = None
        self._topology: Topology | None = None
        self._fit = ResourceFit()
        self._label_cache: dict[tuple[str, str], bool] = {}
        self.passes = 0
        self.placed = 0
        self.place_time_s = 0.0

    def close(self) -> None:
        """Stop the binding threads."""
        self._pool.shutdown(wait=True, cancel_futures=True)

    # --- the live view ------------------------------------------------------------------

    def assume(self, usage: PodUsage) -> None:
        """Count a pod as bound until the cluster view shows it (or it expires)."""
        self._assumed[usage.key] = (usage, self.clock())

    def forget(self, key: str) -> None:
        """Stop assuming a pod (its binding failed)."""
        self._assumed.pop(key, None)

    def release(self, pods: Iterable[str]) -> None:
        """Stop assuming the pods of a gang that ended or left: an assumption is otherwise
        dropped only by a later placement pass that sees the pod, and a pod deleted before
        such a pass would hold its node's resources until it expires (60 s)."""
        for pod in pods:
            self._assumed.pop(f"{self.namespace}/{pod}", None)

    def _usage(self, observed: Iterable[PodUsage]) -> list[PodUsage]:
        seen: dict[str, PodUsage] = {u.key: u for u in observed}
        horizon = self.clock() - 60.0
        for key, (usage, at) in list(self._assumed.items()):
            if key in seen or at < horizon:
                self._assumed.pop(key, None)
            else:
                seen[key] = usage
        return list(seen.values())

    def _cluster(self, nodes: Mapping[str, NodeInfo], version: int | None) -> ClusterState:
        if self._state is None or version is None or self._state_version != version:
            self._state = cluster_state(self.cluster, nodes.values(), self.opts)
            paths = {n.name: [n.switch] for n in self._state.nodes if n.switch}
            self._topology = Topology.from_paths(paths) if paths else None
            self._state_version = version
            self._label_cache.clear()
        return self._state

    def free_view(
        self,
        nodes: Mapping[str, NodeInfo],
        observed: Iterable[PodUsage],
        nodes_version: int | None = None,
    ) -> tuple[ClusterState, dict[str, dict[str, int]], dict[str, NodeFree]]:
        """The cluster, exact free amounts per node, and the scheduler's NodeFree
        (`nodes_version` changes whenever the nodes do; None: rebuild every time)."""
        state = self._cluster(nodes, nodes_version)
        free: dict[str, dict[str, int]] = {n: dict(info.allocatable) for n, info in nodes.items()}
        jobs: dict[str, int] = {}
        for usage in self._usage(observed):
            have = free.get(usage.node)
            if have is None:
                continue
            jobs[usage.node] = jobs.get(usage.node, 0) + 1
            for key, value in usage.requests.items():
                have[key] = have.get(key, 0) - value
        node_free = {
            node.name: self._node_free(node, free[node.name], jobs.get(node.name, 0))
            for node in state.nodes
            if node.name in free
        }
        return state, free, node_free

    def _node_free(self, node: Node, have: Mapping[str, int], jobs: int) -> NodeFree:
        gpus = max(have.get(self.opts.gpu_resource, 0), 0)
        return NodeFree(
            node,
            cpus=max(have.get("cpu", 0), 0) // 1000,
            memory_mb=max(have.get("memory", 0), 0) // 2**20,
            gpus=frozenset(range(gpus)),
            jobs=jobs,
        )

    # --- placing ------------------------------------------------------------------------

    def _fits_hint(
        self, gang: GangDemand, state: ClusterState, free: Mapping[str, Mapping[str, int]]
    ) -> bool:
        """Whether every rank still fits the node the gateway chose for it."""
        models = {n.name: n for n in state.nodes}
        left = {name: dict(free.get(name) or {}) for name in set(gang.hint)}
        for node_name, need in zip(gang.hint, gang.requests, strict=True):
            node = models.get(node_name)
            if node is None or node_name not in free or node.state is not NodeState.IDLE:
                return False
            have = left[node_name]
            if any(have.get(k, 0) < v for k, v in need.items()):
                return False
            for k, v in need.items():
                have[k] = have.get(k, 0) - v
            if not self._labels_ok(gang.pod_spec, node):
                return False
        return True

    def place(
        self,
        gangs: Sequence[GangDemand],
        nodes: Mapping[str, NodeInfo],
        observed: Iterable[PodUsage],
        nodes_version: int | None = None,
        on_placed: Callable[[GangDemand, tuple[str, ...]], None] | None = None,
    ) -> list[tuple[GangDemand, tuple[str, ...]]]:
        """Nodes for the gangs that fit: each placed gang's own placement when it still
        fits, the others in order up to the first that does not (see the module doc).
        Placed gangs' pods are assumed at once, so the next pass sees them; `on_placed`
        is called as soon as a gang is placed (e.g. to bind it while the next is placed)."""
        started = time.perf_counter()
        self.passes += 1
        state, free, node_free = self.free_view(nodes, observed, nodes_version)
        snap = Snapshot(
            now=0.0,
            pending=(),
            running=(),
            clusters={},
            free=node_free,
            def_mem_per_cpu_mb=self.opts.def_mem_per_cpu_mb,
        )
        models = {n.name: n for n in state.nodes}
        views: dict[tuple[Any, ...], _ShapeView] = {}
        out: list[tuple[GangDemand, tuple[str, ...]]] = []
        for gang in gangs:
            chosen: tuple[str, ...] | None
            if len(gang.hint) == gang.ranks:  # placed by the gateway (as rank_shares reads it)
                if not self._fits_hint(gang, state, free):
                    continue  # the gateway's decision waits for its nodes; never moved
                chosen = gang.hint
            else:
                key = gang.shape_key()
                view = views.get(key)
                if view is None:
                    view = _ShapeView(self, gang, models, free, node_free, snap)
                    views[key] = view
                chosen = view.choose(gang.ranks, self._topology)
                if chosen is None:
                    break
            for rank, node_name in enumerate(chosen):
                have = free[node_name]
                for res, value in gang.requests[rank].items():
                    have[res] = have.get(res, 0) - value
                prev = node_free[node_name]
                node_free[node_name] = self._node_free(prev.node, have, prev.jobs + 1)
                self.assume(
                    PodUsage(f"{self.namespace}/{gang.pods[rank]}", node_name, gang.requests[rank])
                )
            for view in views.values():
                view.refresh(set(chosen))
            out.append((gang, chosen))
            self.placed += 1
            if on_placed is not None:
                on_placed(gang, chosen)
        self.place_time_s += time.perf_counter() - started
        return out

    def capacity(
        self,
        gang: GangDemand,
        req: NodeRequest,
        need: Mapping[str, int],
        node: Node,
        have: Mapping[str, int] | None,
        nf: NodeFree | None,
        snap: Snapshot,
    ) -> int:
        """How many more ranks of this gang's shape the node takes now."""
        if have is None or nf is None:
            return 0
        slots = min((have.get(k, 0) // v for k, v in need.items() if v > 0), default=0)
        if slots <= 0 or not self._fit.fits(req, nf, snap):
            return 0
        if not self._labels_ok(gang.pod_spec, node):
            return 0
        return 1 if req.exclusive else slots

    def _labels_ok(self, pod_spec: Obj, node: Node) -> bool:
        key = (_spec_key(pod_spec), node.name)
        ok = self._label_cache.get(key)
        if ok is None:
            ok = node_matches(pod_spec, node.labels)
            self._label_cache[key] = ok
        return ok

    # --- binding ------------------------------------------------------------------------

    def bind(self, gang: GangDemand, nodes: Sequence[str], ranks: Iterable[int]) -> BindOutcome:
        """Post the Bindings of these ranks in parallel."""
        return self.bind_all([(gang, nodes, ranks)])[0]

    def bind_async(
        self, gang: GangDemand, nodes: Sequence[str], ranks: Iterable[int]
    ) -> list[tuple[int, Future[KubeError | None]]]:
        """Queue the Bindings of these ranks (all of one gang together); their futures."""
        return [(r, self._pool.submit(self._bind_one, gang, nodes[r], r)) for r in ranks]

    def collect(
        self,
        gang: GangDemand,
        nodes: Sequence[str],
        queued: list[tuple[int, Future[KubeError | None]]],
    ) -> BindOutcome:
        """Wait for queued Bindings of a gang."""
        outcome = BindOutcome(nodes=tuple(nodes))
        for rank, future in queued:
            err = future.result()
            if err is None:
                outcome.bound.append(rank)
            else:
                outcome.failed[rank] = err
                if not err.retryable:
                    self.forget(f"{self.namespace}/{gang.pods[rank]}")
        return outcome

    def bind_all(
        self, work: Sequence[tuple[GangDemand, Sequence[str], Iterable[int]]]
    ) -> list[BindOutcome]:
        """Post the Bindings of several gangs at once: every rank is queued in gang order,
        so one gang's Bindings go out together and the next gang's follow without waiting
        for the previous gang's answers."""
        queued = [(gang, nodes, self.bind_async(gang, nodes, ranks)) for gang, nodes, ranks in work]
        return [self.collect(gang, nodes, q) for gang, nodes, q in queued]

    def _bind_one(self, gang: GangDemand, node: str, rank: int) -> KubeError | None:
        uid = gang.uids[rank] if rank < len(gang.uids) else None
        try:
            self.client.bind(self.namespace, gang.pods[rank], node, uid or None)
        except KubeError as exc:
            if exc.status == 409 and "already assigned" in str(exc):
                return None
            return exc
        return None
