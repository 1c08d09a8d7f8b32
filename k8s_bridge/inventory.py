"""Nodes and pods as Caldera sees them: parsing API objects, ClusterState, free resources.

Partitions (documented choice): every usable node of a cluster is in the cluster's default
partition (`K8sOptions.default_partition`, "k8s" unless configured); a node labelled
`caldera.io/partition=<name>` is also in partition <name>. Features (`-C`) are the labels
`feature.caldera.io/<feature>=true`, plus ib/infiniband/rdma/roce on nodes that have RDMA
devices allocatable, plus the short GPU model (`a100` from `NVIDIA-A100-SXM4-80GB`).
The switch is the `topology.caldera.io/leaf` label, else the block label
(`gateway.topology.k8s_labels`, the one reader of topology labels).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from typing import Any

from gateway.model.cluster import ClusterState, Gpu, Nic, Node, NodeState, Partition
from gateway.topology.k8s_labels import node_switch
from k8s_bridge.options import K8sOptions

__all__ = [
    "NodeInfo",
    "PodUsage",
    "cluster_state",
    "gpu_type_of",
    "node_model",
    "parse_node",
    "parse_quantity",
    "parse_usage",
    "pod_requests",
    "quantity_int",
]

Obj = dict[str, Any]

_SUFFIX = {
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")


def parse_quantity(text: str | int | float) -> Decimal:
    """A Kubernetes quantity (`500m`, `512Gi`, `1e3`) as a number."""
    if isinstance(text, int | float):
        return Decimal(str(text))
    match = _QUANTITY.match(text.strip())
    if not match or match.group(2) not in _SUFFIX:
        raise ValueError(f"invalid quantity {text!r}")
    try:
        return Decimal(match.group(1)) * _SUFFIX[match.group(2)]
    except InvalidOperation as exc:
        raise ValueError(f"invalid quantity {text!r}") from exc


def quantity_int(resource: str, text: str | int | float) -> int:
    """A resource amount in Caldera's integer unit: millicores for cpu, bytes for memory
    and storage, a count for everything else (rounded up, as the scheduler does)."""
    value = parse_quantity(text)
    if resource == "cpu":
        value *= 1000
    return int(value.to_integral_value(rounding=ROUND_CEILING))


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """One node: allocatable amounts (cpu in millicores, memory in bytes), labels, taints."""

    name: str
    allocatable: Mapping[str, int]
    labels: Mapping[str, str]
    taints: tuple[tuple[str, str | None, str], ...]  # (key, value, effect)
    ready: bool
    unschedulable: bool
    # when its Ready condition last turned from True (epoch seconds; None: Ready, or unknown)
    not_ready_since: float | None = None


def parse_node(obj: Obj) -> NodeInfo:
    """A Node object as NodeInfo."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    alloc: dict[str, int] = {}
    for key, value in (status.get("allocatable") or {}).items():
        try:
            alloc[str(key)] = quantity_int(str(key), value)
        except ValueError:
            continue
    conds: list[Obj] = status.get("conditions") or []
    cond: Obj = next((c for c in conds if c.get("type") == "Ready"), {})
    ready = cond.get("status") == "True"
    taints = tuple(
        (str(t.get("key", "")), t.get("value"), str(t.get("effect", "")))
        for t in spec.get("taints") or []
    )
    return NodeInfo(
        name=str(meta.get("name")),
        allocatable=alloc,
        labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
        taints=taints,
        ready=ready,
        unschedulable=bool(spec.get("unschedulable")),
        not_ready_since=None if ready else _epoch(cond.get("lastTransitionTime")),
    )


def _epoch(stamp: object) -> float | None:
    """An API server timestamp (`2026-11-26T04:00:00Z`) in epoch seconds; None if absent."""
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _container_requests(container: Obj) -> dict[str, int]:
    res = container.get("resources") or {}
    out: dict[str, int] = {}
    limits = res.get("limits") or {}
    requests = res.get("requests") or {}
    for key in set(limits) | set(requests):
        value = requests.get(key, limits.get(key))  # extended resources: limits only
        if value is None:
            continue
        try:
            out[str(key)] = quantity_int(str(key), value)
        except ValueError:
            continue
    return out


def pod_requests(spec: Obj) -> dict[str, int]:
    """What a pod takes from its node: containers summed, init containers' maximum, 1 pod."""
    total: dict[str, int] = {"pods": 1}
    for container in spec.get("containers") or []:
        for key, value in _container_requests(container).items():
            total[key] = total.get(key, 0) + value
    for container in spec.get("initContainers") or []:
        for key, value in _container_requests(container).items():
            total[key] = max(total.get(key, 0), value)
    return total


@dataclass(frozen=True, slots=True)
class PodUsage:
    """A pod that holds (or is about to hold) resources on a node."""

    key: str  # namespace/name
    node: str
    requests: Mapping[str, int] = field(default_factory=dict)


def parse_usage(obj: Obj) -> PodUsage | None:
    """A bound, unfinished pod's usage; None for pods that hold nothing."""
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    node = spec.get("nodeName")
    if not node or status.get("phase") in ("Succeeded", "Failed"):
        return None
    meta = obj.get("metadata") or {}
    return PodUsage(f"{meta.get('namespace')}/{meta.get('name')}", str(node), pod_requests(spec))


# --- the gateway's view -------------------------------------------------------------

_RDMA_FEATURES = ("ib", "infiniband", "rdma", "roce")


def gpu_type_of(product: str) -> str | None:
    """`a100` from `NVIDIA-A100-SXM4-80GB` (the first model-like token), lowercase."""
    for token in re.split(r"[-_ ]+", product.lower()):
        if (
            token
            and token not in ("nvidia", "tesla", "geforce")
            and re.match(r"^[a-z]+\d+[a-z]*$", token)
        ):
            return token
    return None


def untolerated(info: NodeInfo, opts: K8sOptions) -> list[str]:
    """The node's NoSchedule/NoExecute taints that job pods do not tolerate."""
    out = []
    for key, value, effect in info.taints:
        if effect not in ("NoSchedule", "NoExecute"):
            continue
        if not any(t.tolerates(key, value, effect) for t in opts.tolerations):
            out.append(f"{key}={value or ''}:{effect}")
    return out


def node_model(info: NodeInfo, opts: K8sOptions) -> Node:
    """A node as the gateway's scheduler sees it."""
    labels = dict(info.labels)
    gpus = info.allocatable.get(opts.gpu_resource, 0)
    rdma = info.allocatable.get(opts.rdma_resource, 0)
    product = labels.get("nvidia.com/gpu.product", "")
    gpu_mem_mib = labels.get(opts.gpu_memory_label, "")
    memory_total = int(gpu_mem_mib) * 2**20 if gpu_mem_mib.isdigit() else 0
    gtype = gpu_type_of(product) if product else None
    features = {
        key[len(opts.feature_label_prefix) :]
        for key, value in labels.items()
        if key.startswith(opts.feature_label_prefix) and value == "true"
    }
    if rdma:
        features.update(_RDMA_FEATURES)
    if gtype:
        features.add(gtype)
    partitions = [opts.default_partition]
    extra = labels.get(opts.partition_label)
    if extra and extra != opts.default_partition:
        partitions.append(extra)
    state = NodeState.IDLE
    reason: str | None = None
    blocked = untolerated(info, opts)
    if not info.ready:
        state, reason = NodeState.DOWN, "Kubelet not ready"
    elif info.unschedulable:
        state, reason = NodeState.DRAINED, "cordoned (spec.unschedulable)"
    elif blocked:
        state, reason = NodeState.DRAINED, "taint " + ",".join(blocked)
    return Node(
        name=info.name,
        cpus=info.allocatable.get("cpu", 0) // 1000,
        memory_mb=info.allocatable.get("memory", 0) // 2**20,
        state=state,
        partitions=tuple(partitions),
        features=tuple(sorted(features)),
        gres=(("gpu", gtype, gpus),) if gpus else (),
        gpus=tuple(
            Gpu(index=i, model=product, memory_total=memory_total, memory_free=memory_total)
            for i in range(gpus)
        ),
        nics=tuple(Nic(device=f"{opts.rdma_resource}:{i}") for i in range(rdma)),
        switch=node_switch(labels, opts.leaf_label),
        reason=reason,
        labels=labels,
    )


def cluster_state(
    name: str, nodes: Iterable[NodeInfo], opts: K8sOptions, reachable: bool = True
) -> ClusterState:
    """The ClusterState describe() reports: nodes and the partitions made from labels."""
    models = sorted((node_model(n, opts) for n in nodes), key=lambda n: n.name)
    by_partition: dict[str, list[str]] = {opts.default_partition: []}
    for node in models:
        for part in node.partitions:
            by_partition.setdefault(part, []).append(node.name)
    partitions = tuple(
        Partition(name=part, nodes=tuple(members), default=part == opts.default_partition)
        for part, members in by_partition.items()
    )
    return ClusterState(name=name, nodes=tuple(models), partitions=partitions, reachable=reachable)
