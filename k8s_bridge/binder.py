"""Caldera's gang binder: every rank of a gang reserved on a node, then the Bindings.

Without Volcano, Caldera is the scheduler of its pods (schedulerName `caldera`). A binder
pass takes the nodes (allocatable, labels, taints) and every pod already bound to them
(plus the pods this binder has bound but not yet seen bound: the "assumed" pods, as
kube-scheduler keeps them) and places each waiting gang, in order, all ranks or none:

1. filter: the gateway scheduler's own ResourceFit (node state, partition, features, GPU
   type, exclusivity, cpus/memory/GPUs) plus the pod's nodeSelector/required affinity;
2. capacity: how many ranks of this gang each node still takes, from the pod's exact
   requests (every extended resource: GPUs, RDMA devices, pod slots);
3. choose: the smallest leaf switch that holds the whole gang, else the fullest leaves
   (fewest switches, as Slurm's topology plugin); inside, the fullest nodes first (bin
   packing keeps whole nodes free), several ranks per node when they fit (a rank is a pod,
   and pods share nodes as in Volcano);
4. reserve every rank on the working copy, or none.

Only a gang whose every rank has a node gets Bindings; a gang that does not fit keeps all
its pods unbound and the gangs behind it wait (first come, first served: big gangs are not
starved). The Bindings of a placed gang are posted in parallel.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from gateway.model.cluster import ClusterState, Node, NodeState
from gateway.model.job import Job
from gateway.scheduler.builtin import ResourceFit
from gateway.scheduler.request import NodeRequest, node_request
from gateway.scheduler.snapshot import NodeFree, Snapshot
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
    """Room for one gang shape (requests + node rules) on every node and leaf switch, kept
    up to date as gangs are placed: a gang of a known shape costs O(leaves), not O(nodes)."""

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
        self.cap: dict[str, int] = {}
        self.leaf_of: dict[str, str] = {}
        self.leaf_room: dict[str, int] = {}
        self.leaf_nodes: dict[str, list[str]] = {}
        for name, node in models.items():
            leaf = node.switch or ""
            self.leaf_of[name] = leaf
            self.leaf_nodes.setdefault(leaf, []).append(name)
            cap = self._capacity(name)
            self.cap[name] = cap
            self.leaf_room[leaf] = self.leaf_room.get(leaf, 0) + cap
        self.total = sum(self.cap.values())

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
            if name not in self.cap:
                continue
            cap = self._capacity(name)
            delta = cap - self.cap[name]
            if delta:
                self.cap[name] = cap
                self.leaf_room[self.leaf_of[name]] += delta
                self.total += delta

    def choose(self, ranks: int) -> tuple[str, ...] | None:
        """The smallest leaf that holds every rank, else the roomiest leaves; inside, the
        nodes with the least room first (best fit). None when the gang does not fit."""
        if self.total < ranks:
            return None
        whole = [(room, leaf) for leaf, room in self.leaf_room.items() if room >= ranks]
        if whole:
            leaves = [min(whole)[1]]
        else:
            rooms = sorted(((-room, leaf) for leaf, room in self.leaf_room.items() if room))
            leaves = [leaf for _, leaf in rooms]
        chosen: list[str] = []
        for leaf in leaves:
            names = [n for n in self.leaf_nodes[leaf] if self.cap[n] > 0]
            for name in sorted(names, key=lambda n: (self.cap[n], n)):
                take = min(self.cap[name], ranks - len(chosen))
                chosen.extend([name] * take)
                if len(chosen) == ranks:
                    return tuple(chosen)
        return None


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
        self._switch: dict[str, str | None] = {}
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
            self._switch = {n.name: n.switch for n in self._state.nodes}
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
        if len(gang.hint) != gang.ranks:
            return False
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
        """Nodes for as many gangs as fit, in order, stopping at the first that does not.
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
            if self._fits_hint(gang, state, free):
                chosen: tuple[str, ...] | None = gang.hint
            else:
                key = gang.shape_key()
                view = views.get(key)
                if view is None:
                    view = _ShapeView(self, gang, models, free, node_free, snap)
                    views[key] = view
                chosen = view.choose(gang.ranks)
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
