"""The /v1/nodes document as the node formatters take it: nodes, and what slurmctld
reports beside them (CPUs, memory and GPUs allocated, their TRES and GresUsed, who drained
a node and when), and the partitions' extras (their TRES too)."""

from __future__ import annotations

from typing import Any

from gateway.compat.fmt_common import NodeExtras, PartitionExtras
from gateway.compat.gres_used import gres_used
from gateway.compat.tres import TresNames, node_alloc_tres, node_tres, partition_tres
from gateway.model.cluster import ClusterState, Partition
from gateway.model.codec import node_from_dict, partition_from_dict

__all__ = ["nodes_view", "partition_extras", "partitions_extras"]

_EXTRA_KEYS = (
    "alloc_cpus",
    "alloc_gpus",
    "alloc_gpu_ids",
    "alloc_memory_mb",
    "cluster",
    "cpu_load",
    *("arch", "os", "free_memory", "boot_time", "slurmd_start_time", "version"),
    "reason_time",
    "reason_user",
    "reason_uid",
)


def nodes_view(data: dict[str, Any]) -> tuple[ClusterState, dict[str, NodeExtras]]:
    """One ClusterState of every node and partition, and each node's extras."""
    nodes = []
    extras: dict[str, NodeExtras] = {}
    names = site_tres(data)
    gres_types = tuple(str(t) for t in data.get("site", {}).get("gres_types", ()))
    for raw in data["nodes"]:
        node = node_from_dict({k: v for k, v in raw.items() if k not in _EXTRA_KEYS})
        nodes.append(node)
        when = raw.get("reason_time")
        cpus, mem = int(raw.get("alloc_cpus", 0)), int(raw.get("alloc_memory_mb", 0))
        extras[node.name] = NodeExtras(
            alloc_cpus=cpus,
            alloc_memory=mem,
            tres=node_tres(node, names),
            tres_used=node_alloc_tres(node, names, cpus, mem, int(raw.get("alloc_gpus", 0)))
            or None,
            cpu_load=raw.get("cpu_load"),
            arch=raw.get("arch"),
            os=raw.get("os"),
            version=raw.get("version"),
            free_memory=raw.get("free_memory"),
            boot_time=raw.get("boot_time"),
            slurmd_start_time=raw.get("slurmd_start_time"),
            reason_time=None if when is None else float(when),
            reason_user=raw.get("reason_user"),
            reason_uid=raw.get("reason_uid"),
            weight=node.weight,
            address=node.address,
            port=node.port,
            gres_used=gres_used(  # a node whose slurmd registered has its facts
                node, gres_types, raw.get("alloc_gpu_ids", ()), raw.get("version") is not None
            )
            or None,
        )
    parts = tuple(partition_from_dict(p) for p in data["partitions"])
    name = data["nodes"][0].get("cluster", "caldera") if data["nodes"] else "caldera"
    return ClusterState(name=name, nodes=tuple(nodes), partitions=parts), extras


def site_tres(data: dict[str, Any]) -> TresNames:
    """The TRES the site accounts (its AccountingStorageTRES; None: every GRES)."""
    names = data.get("site", {}).get("tres_names")
    return TresNames(None if names is None else tuple(str(n) for n in names))


def partitions_extras(cluster: ClusterState, data: dict[str, Any]) -> dict[str, PartitionExtras]:
    """Each partition's extras, with its TRES (its nodes' and the site's licences)."""
    names = site_tres(data)
    licences = [(str(n), int(t)) for n, t, _ in data.get("site", {}).get("licenses", ())]
    by_name = {n.name: n for n in cluster.nodes}
    return {
        p.name: partition_extras(
            p, partition_tres((by_name[n] for n in p.nodes if n in by_name), names, licences)
        )
        for p in cluster.partitions
    }


def partition_extras(part: Partition, tres: str | None = None) -> PartitionExtras:
    """What a configured partition adds to `scontrol show partition`: OverSubscribe as
    slurmctld's max_share (0 EXCLUSIVE, 1 NO, n YES:n, n|0x8000 FORCE:n), DefMemPerCPU, State,
    PriorityTier, PriorityJobFactor, PreemptMode and GraceTime, and its TRES when given."""
    kind, _, num = part.oversubscribe.partition(":")
    share = {"EXCLUSIVE": 0, "NO": 1}.get(kind, int(num or 4))
    return PartitionExtras(
        max_share=share | (0x8000 if kind == "FORCE" else 0),
        def_mem_per_cpu=part.def_mem_per_cpu_mb,
        state="DOWN" if part.state == "UP" and not part.up else part.state,
        priority_tier=part.priority_tier,
        priority_job_factor=part.priority_job_factor,
        preempt_mode=part.preempt_mode,
        grace_time=part.grace_time_s,
        tres=tres,
    )
