"""Cluster and node families of /metrics (render.py has the jobs and partitions).

Node allocation is what the gateway's own placements hold (`free_resources`): a cluster
that places its own jobs (Slurm) keeps its books itself, so its nodes show nothing
allocated here while its cluster and partition totals, summed from the jobs, do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from gateway.metrics.collect import Alloc
from gateway.metrics.expo import Page
from gateway.model.cluster import ClusterState, NodeState
from gateway.scheduler.snapshot import NodeFree

__all__ = ["NODE_STATES", "Capacity", "NodeInput", "cluster_families", "node_families"]

_MIB = 2**20

# Slurm's node-state family suffixes: (suffix, words for HELP, the states counted)
NODE_STATES = (
    ("alloc", "Allocated", (NodeState.ALLOCATED,)),
    ("idle", "Idle", (NodeState.IDLE,)),
    ("mixed", "Mixed", (NodeState.MIXED,)),
    ("down", "Down", (NodeState.DOWN,)),
    ("drain", "with the Drain flag", (NodeState.DRAINED, NodeState.DRAINING)),
    ("drained", "Drained", (NodeState.DRAINED,)),
    ("draining", "Draining", (NodeState.DRAINING,)),
    ("unknown", "Unknown", (NodeState.UNKNOWN,)),
)


@dataclass(slots=True)
class Capacity:
    """What a group of nodes has (memory in bytes) and how much of it is allocated."""

    nodes: int = 0
    cpus: int = 0
    cpus_alloc: int = 0
    memory: int = 0
    memory_alloc: int = 0
    gpus: int = 0
    gpu_memory: int = 0


class NodeInput(Protocol):
    """The clusters as the page shows them (MetricsInput is one)."""

    @property
    def clusters(self) -> Mapping[str, ClusterState]: ...

    @property
    def free(self) -> Mapping[str, NodeFree]: ...

    @property
    def node_states(self) -> Mapping[str, NodeState]: ...


def cluster_families(page: Page, inp: NodeInput, per_cluster: Mapping[str, Alloc]) -> None:
    """Caldera's per-cluster families: backend health, nodes by state, capacity and
    allocation (allocation from the jobs, so that clusters placing their own jobs count)."""
    names = sorted(inp.clusters)
    page.gauge(
        "caldera_cluster_up",
        "1 when the cluster's backend answered its last description, 0 when unreachable",
        ("cluster",),
        (((n,), int(inp.clusters[n].reachable)) for n in names),
    )
    cap: dict[str, Capacity] = {}
    states: list[tuple[tuple[str, str], int]] = []
    for n in names:
        c = cap[n] = Capacity()
        by_state: dict[str, int] = {}
        for node in inp.clusters[n].nodes:
            c.nodes += 1
            c.cpus += node.cpus
            c.memory += node.memory_mb * _MIB
            c.gpus += node.gpu_count()
            c.gpu_memory += sum(g.memory_total for g in node.gpus)
            s = inp.node_states.get(node.name, node.state).long
            by_state[s] = by_state.get(s, 0) + 1
        states.extend(((n, s), v) for s, v in sorted(by_state.items()))
    page.gauge("caldera_cluster_nodes", "Nodes by state (sinfo's)", ("cluster", "state"), states)
    none = Alloc()
    for name, doc, total_attr, alloc_attr in (
        ("caldera_cluster_cpus", "CPUs of the cluster's nodes", "cpus", None),
        ("caldera_cluster_cpus_alloc", "CPUs allocated to jobs", None, "cpus"),
        ("caldera_cluster_memory_bytes", "Memory of the cluster's nodes", "memory", None),
        ("caldera_cluster_memory_alloc_bytes", "Memory allocated to jobs", None, "memory"),
        ("caldera_cluster_gpus", "GPUs of the cluster's nodes", "gpus", None),
        ("caldera_cluster_gpus_alloc", "GPUs allocated to jobs", None, "gpus"),
        (
            "caldera_cluster_gpu_memory_bytes",
            "Memory of the cluster's GPUs, where known",
            "gpu_memory",
            None,
        ),
        (
            "caldera_cluster_gpu_memory_alloc_bytes",
            "Memory of the GPUs allocated to jobs, where known",
            None,
            "gpu_memory",
        ),
    ):
        if total_attr is not None:
            values = (((n,), getattr(cap[n], total_attr)) for n in names)
        else:
            assert alloc_attr is not None
            values = (((n,), getattr(per_cluster.get(n, none), alloc_attr)) for n in names)
        page.gauge(name, doc, ("cluster",), values)


def node_families(page: Page, inp: NodeInput) -> None:
    """Slurm's node families, per node (allocation: what the gateway placed there)."""
    rows = []
    counts: dict[NodeState, int] = {}
    for cname in sorted(inp.clusters):
        for node in inp.clusters[cname].nodes:
            free = inp.free.get(node.name)
            state = inp.node_states.get(node.name, node.state)
            counts[state] = counts.get(state, 0) + 1
            rows.append((cname, node, free))
    page.gauge("slurm_nodes", "Total number of nodes", (), [((), len(rows))])
    for suffix, text, members in NODE_STATES:
        value = sum(counts.get(s, 0) for s in members)
        page.gauge(f"slurm_nodes_{suffix}", f"Number of nodes in {text} state", (), [((), value)])
    labels = ("cluster", "node")
    page.gauge(
        "slurm_node_cpus",
        "Total number of cpus in the node",
        labels,
        (((c, n.name), n.cpus) for c, n, _ in rows),
    )
    page.gauge(
        "slurm_node_cpus_alloc",
        "Allocated cpus in the node (jobs the gateway placed)",
        labels,
        (((c, n.name), n.cpus - f.cpus if f else 0) for c, n, f in rows),
    )
    page.gauge(
        "slurm_node_cpus_idle",
        "Idle cpus in the node",
        labels,
        (((c, n.name), f.cpus if f else n.cpus) for c, n, f in rows),
    )
    page.gauge(
        "slurm_node_memory_bytes",
        "Total memory in bytes of the node",
        labels,
        (((c, n.name), n.memory_mb * _MIB) for c, n, _ in rows),
    )
    page.gauge(
        "slurm_node_memory_alloc_bytes",
        "Bytes allocated to jobs in the node (jobs the gateway placed)",
        labels,
        (((c, n.name), (n.memory_mb - f.memory_mb) * _MIB if f else 0) for c, n, f in rows),
    )
    page.gauge(
        "slurm_node_gpus",
        "Total number of GPUs in the node",
        labels,
        (((c, n.name), n.gpu_count()) for c, n, _ in rows),
    )
    page.gauge(
        "slurm_node_gpus_alloc",
        "Number of GPUs currently allocated by jobs on the node (jobs the gateway placed)",
        labels,
        (((c, n.name), len(n.gpus) - len(f.gpus) if f and n.gpus else 0) for c, n, f in rows),
    )
    known = [(c, n) for c, n, _ in rows if any(g.memory_total for g in n.gpus)]
    page.gauge(
        "caldera_node_gpu_memory_bytes",
        "Memory of the node's GPUs (reported by its agent)",
        labels,
        (((c, n.name), sum(g.memory_total for g in n.gpus)) for c, n in known),
    )
    page.gauge(
        "caldera_node_gpu_memory_free_bytes",
        "Free memory of the node's GPUs at the agent's last heartbeat",
        labels,
        (((c, n.name), sum(g.memory_free for g in n.gpus)) for c, n in known),
    )
