"""Clusters as the scheduler sees them: nodes, their GPUs and NICs, partitions.

Backends describe what they have in these terms (the local machine, a Slurm cluster's
nodes, a Kubernetes cluster's nodes); node agents fill in GPUs and network devices.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from gateway.model.values import INFINITE

__all__ = ["UNAVAILABLE", "ClusterState", "Gpu", "Nic", "Node", "NodeState", "Partition"]


class NodeState(Enum):
    """Node states with sinfo's long and compact names."""

    IDLE = ("idle", "idle")
    MIXED = ("mixed", "mix")
    ALLOCATED = ("allocated", "alloc")
    DOWN = ("down", "down")
    DRAINED = ("drained", "drain")
    DRAINING = ("draining", "drng")
    UNKNOWN = ("unknown", "unk")

    @property
    def long(self) -> str:
        """sinfo %T."""
        return self.value[0]

    @property
    def short(self) -> str:
        """sinfo %t."""
        return self.value[1]


# states in which a node takes no new work (the scheduler's filters, its reasons)
UNAVAILABLE = frozenset({NodeState.DOWN, NodeState.DRAINED, NodeState.DRAINING})


@dataclass(frozen=True, slots=True)
class Gpu:
    """One GPU: memory in bytes; numa -1 when unknown."""

    index: int
    uuid: str = ""
    model: str = ""
    memory_total: int = 0
    memory_free: int = 0
    numa_node: int = -1
    pci_bus_id: str = ""


@dataclass(frozen=True, slots=True)
class Nic:
    """One RDMA-capable port (InfiniBand or RoCE)."""

    device: str
    port: int = 1
    state: str = "ACTIVE"
    link_layer: str = "InfiniBand"
    rate_gbps: float = 0.0
    guid: str = ""
    numa_node: int = -1
    netdev: str = ""
    pci_bus_id: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Node:
    """A schedulable node and what it has."""

    name: str
    cpus: int
    memory_mb: int
    state: NodeState = NodeState.IDLE
    partitions: tuple[str, ...] = ()
    features: tuple[str, ...] = ()
    gres: tuple[tuple[str, str | None, int], ...] = ()  # (name, type, count)
    gpus: tuple[Gpu, ...] = ()
    nics: tuple[Nic, ...] = ()
    sockets: int = 1
    cores_per_socket: int = 0
    threads_per_core: int = 1
    tmp_disk_mb: int = 0
    weight: int = 1  # slurm.conf Weight: lower is allocated first
    switch: str | None = None  # leaf switch (or block) name
    uplinks: tuple[str, ...] = ()  # the switches above `switch`, up to a root (topology.conf)
    reason: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    address: str | None = None  # slurm.conf NodeAddr (None: its name)
    port: int = 0  # slurm.conf Port (0: SlurmdPort)

    def gpu_count(self, gpu_type: str | None = None) -> int:
        """GPUs of a type (any type when None), from gres or discovered GPUs."""
        from_gres = sum(
            count
            for name, gtype, count in self.gres
            if name == "gpu" and (gpu_type is None or gtype == gpu_type)
        )
        return from_gres or (len(self.gpus) if gpu_type is None else 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class Partition:
    """A partition: a named set of nodes with limits."""

    name: str
    nodes: tuple[str, ...]
    default: bool = False
    up: bool = True
    max_time: int = INFINITE  # minutes
    default_time: int | None = None
    max_nodes: int | None = None
    oversubscribe: str = "NO"  # NO, EXCLUSIVE, YES:<n>, FORCE:<n> (slurm.conf's words)
    def_mem_per_cpu_mb: int | None = None  # None: the site's DefMemPerCPU
    state: str = "UP"  # slurm.conf State: UP, DOWN (queues), DRAIN (runs), INACTIVE
    # preempt/partition_prio: a job here may preempt jobs of lower tiers on shared nodes;
    # PreemptMode of its jobs as victims (the site's when not set), GraceTime in seconds
    priority_tier: int = 1
    priority_job_factor: int = 1  # PriorityJobFactor: priority/multifactor's partition factor
    preempt_mode: str = "OFF"
    grace_time_s: int = 0

    def time_for(self, requested: int | None) -> int:
        """The limit a job gets here when it asked for `requested` minutes (None: none)."""
        if requested is not None:
            return requested
        return self.default_time if self.default_time is not None else self.max_time


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterState:
    """What a backend reports: its nodes and partitions, at a point in time."""

    name: str
    nodes: tuple[Node, ...]
    partitions: tuple[Partition, ...]
    reachable: bool = True
    # slurm.conf Licenses: (name, total), cluster-wide (None: the backend counts its own,
    # as a Slurm cluster does); EnforcePartLimits (NO, ANY, ALL)
    licenses: tuple[tuple[str, int], ...] | None = None
    enforce_part_limits: str = "NO"

    def partition(self, name: str) -> Partition | None:
        """The partition of that name, if any."""
        return next((p for p in self.partitions if p.name == name), None)

    @property
    def default_partition(self) -> Partition | None:
        """The partition a job lands in when it names none."""
        return next((p for p in self.partitions if p.default), None) or (
            self.partitions[0] if self.partitions else None
        )
