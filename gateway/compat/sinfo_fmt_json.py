"""`sinfo --json` as Slurm 22.05 prints it (openapi/v0.0.38 `nodes`), and the
`/slurm/v0.0.38/partitions` document slurmrestd serves (22.05's sinfo has no partitions
in its JSON; Caldera's API can serve this one)."""

from __future__ import annotations

from collections.abc import Mapping

from gateway.compat.fmt_common import (
    JsonValue,
    NodeExtras,
    PartitionExtras,
    hostlist_compress,
    json_c_dumps,
)
from gateway.compat.node_fmt_state import FLAGS, node_state, node_state_base_string
from gateway.compat.squeue_fmt_json import slurm_meta
from gateway.model.cluster import ClusterState, Node
from gateway.model.values import INFINITE

__all__ = ["partitions_json_doc", "sinfo_json", "sinfo_json_doc"]

_NO_EXTRAS = NodeExtras()
_NO_PEXTRAS = PartitionExtras()
_NO_VAL = 0xFFFF_FFFE


def _gres(node: Node) -> str:
    return ",".join(f"{n}:{t}:{c}" if t else f"{n}:{c}" for n, t, c in node.gres)


def _flags(state: int) -> list[JsonValue]:
    return [name for name, bit in FLAGS.items() if state & bit]


def _cores(node: Node) -> int:
    if node.cores_per_socket:
        return node.cores_per_socket
    return max(node.cpus // max(node.sockets, 1) // max(node.threads_per_core, 1), 1)


def _t(epoch: float | None) -> int:
    return int(epoch) if epoch else 0


def _node(node: Node, ex: NodeExtras, cluster: ClusterState) -> dict[str, JsonValue]:
    state = node_state(node, ex)
    features = ",".join(node.features)
    active = ",".join(ex.active_features) if ex.active_features is not None else features
    parts = list(node.partitions) or [p.name for p in cluster.partitions if node.name in p.nodes]
    return {
        "architecture": ex.arch or "",
        "burstbuffer_network_address": "",
        "boards": ex.boards,
        "boot_time": _t(ex.boot_time),
        "comment": ex.comment or "",
        "cores": _cores(node),
        "cpu_binding": 0,
        "cpu_load": _NO_VAL if ex.cpu_load is None else ex.cpu_load,
        "extra": ex.extra or "",
        "free_memory": -2 if ex.free_memory is None else ex.free_memory,
        "cpus": node.cpus,
        "last_busy": _t(ex.last_busy),
        "features": features,
        "active_features": active,
        "gres": _gres(node),
        "gres_drained": "N/A",
        "gres_used": ex.gres_used or "",
        "mcs_label": ex.mcs_label or "",
        "name": node.name,
        "next_state_after_reboot": "invalid",
        "address": ex.address or node.name,
        "hostname": ex.hostname or node.name,
        "state": node_state_base_string(state).lower(),
        "state_flags": _flags(state),
        "next_state_after_reboot_flags": [],
        "operating_system": ex.os or "",
        "owner": ex.owner,
        "partitions": list(parts),
        "port": ex.port,
        "real_memory": node.memory_mb,
        "reason": node.reason or "",
        "reason_changed_at": _t(ex.reason_time),
        "reason_set_by_user": ex.reason_user,
        "slurmd_start_time": _t(ex.slurmd_start_time),
        "sockets": node.sockets,
        "threads": node.threads_per_core,
        "temporary_disk": node.tmp_disk_mb,
        "weight": ex.weight,
        "tres": ex.tres or f"cpu={node.cpus},mem={node.memory_mb}M,billing={node.cpus}",
        "slurmd_version": ex.version or "",
        "alloc_memory": ex.alloc_memory,
        "alloc_cpus": ex.alloc_cpus,
        "idle_cpus": node.cpus - ex.alloc_cpus,
        "tres_used": ex.tres_used,
        "tres_weighted": float(ex.alloc_cpus),
    }


def sinfo_json_doc(
    cluster: ClusterState, *, node_extras: Mapping[str, NodeExtras] | None = None
) -> dict[str, JsonValue]:
    """The document `sinfo --json` prints: every node, in the cluster's node order."""
    nex = node_extras or {}
    nodes: list[JsonValue] = [_node(n, nex.get(n.name, _NO_EXTRAS), cluster) for n in cluster.nodes]
    return {"meta": slurm_meta(), "errors": [], "nodes": nodes}


def sinfo_json(
    cluster: ClusterState, *, node_extras: Mapping[str, NodeExtras] | None = None
) -> str:
    """`sinfo --json`'s exact text (no trailing newline)."""
    return json_c_dumps(sinfo_json_doc(cluster, node_extras=node_extras))


def _limit(value: int | None) -> int | None:
    if value is None:
        return None
    return -1 if value == INFINITE else value


def partitions_json_doc(
    cluster: ClusterState, *, partition_extras: Mapping[str, PartitionExtras] | None = None
) -> dict[str, JsonValue]:
    """slurmrestd's `/slurm/v0.0.38/partitions` document for the cluster's partitions."""
    pexs = partition_extras or {}
    by_name = {n.name: n for n in cluster.nodes}
    out: list[JsonValue] = []
    for p in cluster.partitions:
        ex = pexs.get(p.name, _NO_PEXTRAS)
        flags: list[JsonValue] = []
        if p.default:
            flags.append("default")
        if ex.hidden:
            flags.append("hidden")
        if ex.root_only:
            flags.append("root_only")
        members = [by_name[n] for n in p.nodes if n in by_name]
        cpus = ex.total_cpus if ex.total_cpus is not None else sum(n.cpus for n in members)
        count = ex.total_nodes if ex.total_nodes is not None else len(members)
        mem = sum(n.memory_mb for n in members)
        out.append(
            {
                "flags": flags,
                "preemption_mode": [
                    ex.preempt_mode.lower() if ex.preempt_mode != "OFF" else "disabled"
                ],
                "allowed_allocation_nodes": ex.allow_alloc_nodes or "",
                "allowed_accounts": ex.allow_accounts or "",
                "allowed_groups": ex.allow_groups or "",
                "allowed_qos": ex.allow_qos or "",
                "alternative": "",
                "billing_weights": "",
                "default_memory_per_cpu": ex.def_mem_per_cpu,
                "default_memory_per_node": ex.def_mem_per_node,
                "default_time_limit": _limit(p.default_time),
                "denied_accounts": "",
                "denied_qos": "",
                "preemption_grace_time": ex.grace_time,
                "maximum_cpus_per_node": _limit(ex.max_cpus_per_node),
                "maximum_memory_per_cpu": None,
                "maximum_memory_per_node": ex.max_mem_per_node,
                "maximum_nodes_per_job": _limit(p.max_nodes if p.max_nodes else INFINITE),
                "max_time_limit": _limit(p.max_time),
                "min nodes per job": ex.min_nodes,
                "name": p.name,
                "nodes": hostlist_compress(p.nodes),
                "over_time_limit": ex.over_time_limit,
                "priority_job_factor": ex.priority_job_factor,
                "priority_tier": ex.priority_tier,
                "qos": ex.qos or "",
                "state": ex.state or ("UP" if p.up else "DOWN"),
                "total_cpus": cpus,
                "total_nodes": count,
                "tres": ex.tres or f"cpu={cpus},mem={mem}M,node={count},billing={cpus}",
            }
        )
    return {"meta": slurm_meta(), "errors": [], "partitions": out}
