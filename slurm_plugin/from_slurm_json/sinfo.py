"""`sinfo --json` plus slurmrestd's partitions -> a `ClusterState` with `NodeExtras` and
`PartitionExtras`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.compat.fmt_common import (
    NodeExtras,
    PartitionExtras,
    hostlist_expand,
)
from gateway.model.cluster import ClusterState, Node, NodeState, Partition
from gateway.model.values import INFINITE, NO_VAL
from slurm_plugin.from_slurm_json.common import (
    Doc,
    SlurmCluster,
    _int,
    _load,
    _str,
    _time,
    _tres_items,
)

_NODE_BASE = {
    "idle": NodeState.IDLE,
    "mixed": NodeState.MIXED,
    "allocated": NodeState.ALLOCATED,
    "down": NodeState.DOWN,
    "unknown": NodeState.UNKNOWN,
}


def _node_state(base: str, flags: Sequence[str]) -> NodeState:
    if "DRAIN" in flags:
        busy = base in ("allocated", "mixed") or "COMPLETING" in flags
        return NodeState.DRAINING if busy else NodeState.DRAINED
    return _NODE_BASE.get(base, NodeState.UNKNOWN)


def _gres(text: str | None) -> tuple[tuple[str, str | None, int], ...]:
    out: list[tuple[str, str | None, int]] = []
    for item in _tres_items(text.split("(")[0] if text else None):
        out.append((item.name, item.type, item.count))
    return tuple(out)


def _node(n: Doc) -> tuple[Node, NodeExtras]:
    base = str(n.get("state") or "unknown").lower()
    flags = tuple(str(f) for f in n.get("state_flags") or ())
    cores = _int(n.get("cores"))
    cpu_load = n.get("cpu_load")
    free_mem = n.get("free_memory")
    node = Node(
        name=str(n.get("name") or ""),
        cpus=_int(n.get("cpus")),
        memory_mb=_int(n.get("real_memory")),
        state=_node_state(base, flags),
        partitions=tuple(n.get("partitions") or ()),
        features=tuple(f for f in str(n.get("features") or "").split(",") if f),
        gres=_gres(_str(n.get("gres"))),
        sockets=_int(n.get("sockets"), 1),
        cores_per_socket=cores,
        threads_per_core=_int(n.get("threads"), 1),
        tmp_disk_mb=_int(n.get("temporary_disk")),
        reason=_str(n.get("reason")),
    )
    extras = NodeExtras(
        state_flags=flags,
        base_state=base.upper(),
        alloc_cpus=_int(n.get("alloc_cpus")),
        alloc_memory=_int(n.get("alloc_memory")),
        cpu_load=None if cpu_load in (None, NO_VAL) else _int(cpu_load),
        free_memory=None if free_mem in (None, -2) else _int(free_mem),
        weight=_int(n.get("weight"), 1),
        address=_str(n.get("address")),
        hostname=_str(n.get("hostname")),
        port=_int(n.get("port")),
        version=_str(n.get("slurmd_version")),
        os=_str(n.get("operating_system")),
        arch=_str(n.get("architecture")),
        boards=_int(n.get("boards"), 1),
        boot_time=_time(n.get("boot_time")),
        slurmd_start_time=_time(n.get("slurmd_start_time")),
        last_busy=_time(n.get("last_busy")),
        reason_time=_time(n.get("reason_changed_at")),
        reason_user=_str(n.get("reason_set_by_user")),
        active_features=tuple(f for f in str(n.get("active_features") or "").split(",") if f),
        gres_used=_str(n.get("gres_used")),
        tres=_str(n.get("tres")),
        tres_used=_str(n.get("tres_used")),
        owner=_str(n.get("owner")),
        mcs_label=_str(n.get("mcs_label")),
        comment=_str(n.get("comment")),
        extra=_str(n.get("extra")),
    )
    return node, extras


def _limit(value: Any) -> int | None:
    """slurmrestd prints INFINITE as -1 (int32) and unset as null."""
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    return INFINITE if value in (-1, INFINITE) else value


def _partition(p: Doc) -> tuple[Partition, PartitionExtras]:
    flags = {str(f) for f in p.get("flags") or ()}
    max_time = _limit(p.get("max_time_limit"))
    default_time = _limit(p.get("default_time_limit"))
    max_nodes = _limit(p.get("maximum_nodes_per_job"))
    state = str(p.get("state") or "UP").upper()
    part = Partition(
        name=str(p.get("name") or ""),
        nodes=hostlist_expand(_str(p.get("nodes"))),
        default="default" in flags,
        up=state == "UP",
        max_time=max_time if max_time is not None else INFINITE,
        default_time=default_time,
        max_nodes=None if max_nodes in (None, INFINITE) else max_nodes,
    )
    max_cpus = _limit(p.get("maximum_cpus_per_node"))
    extras = PartitionExtras(
        min_nodes=_int(p.get("min nodes per job")),
        priority_tier=_int(p.get("priority_tier"), 1),
        priority_job_factor=_int(p.get("priority_job_factor"), 1),
        allow_groups=_str(p.get("allowed_groups")),
        allow_accounts=_str(p.get("allowed_accounts")),
        allow_qos=_str(p.get("allowed_qos")),
        allow_alloc_nodes=_str(p.get("allowed_allocation_nodes")),
        root_only="root_only" in flags,
        hidden="hidden" in flags,
        exclusive_user="exclusive_user" in flags,
        lln="least_loaded_nodes_scheduling" in flags,
        req_resv="reservation_required" in flags,
        state=state,
        total_cpus=_int(p.get("total_cpus")),
        total_nodes=_int(p.get("total_nodes")),
        tres=_str(p.get("tres")),
        max_cpus_per_node=max_cpus if max_cpus is not None else INFINITE,
        def_mem_per_cpu=_limit(p.get("default_memory_per_cpu")),
        def_mem_per_node=_limit(p.get("default_memory_per_node")),
        max_mem_per_node=_limit(p.get("maximum_memory_per_node")),
        grace_time=_int(p.get("preemption_grace_time")),
        over_time_limit=_limit(p.get("over_time_limit")),
        qos=_str(p.get("qos")),
    )
    return part, extras


def cluster_from_sinfo_json(
    nodes_doc: Doc | str, partitions_doc: Doc | str | None = None, *, name: str = "cluster"
) -> SlurmCluster:
    """`sinfo --json` (nodes) and slurmrestd's partitions document as a ClusterState.

    Partitions keep slurmctld's order (as sinfo's `#P` sort uses). Without a partitions
    document, partitions are inferred from the nodes' lists (no limits known)."""
    ndata = _load(nodes_doc)
    nodes: list[Node] = []
    node_extras: dict[str, NodeExtras] = {}
    for n in ndata.get("nodes", []):
        node, ex = _node(n)
        nodes.append(node)
        node_extras[node.name] = ex
    parts: list[Partition] = []
    part_extras: dict[str, PartitionExtras] = {}
    if partitions_doc is not None:
        for p in _load(partitions_doc).get("partitions", []):
            part, pex = _partition(p)
            parts.append(part)
            part_extras[part.name] = pex
    else:
        names = list(dict.fromkeys(p for node in nodes for p in node.partitions))
        for pname in names:
            members = tuple(node.name for node in nodes if pname in node.partitions)
            parts.append(Partition(name=pname, nodes=members))
    cluster = ClusterState(name=name, nodes=tuple(nodes), partitions=tuple(parts))
    return SlurmCluster(cluster, node_extras, part_extras)
