"""What a Slurm cluster offers Caldera: its nodes, GRES and partition limits, renamed.

Discovery reads the cluster (sinfo/scontrol or slurmrestd, through `SlurmClient.cluster`)
and keeps only the partitions the configuration offers, under Caldera's names, and the
nodes in them (with `node_prefix` when clusters share node names). The backend refreshes
it every `refresh_s` in its watcher thread.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gateway.model.cluster import ClusterState, Node, Partition
from slurm_plugin.config import SlurmClusterConfig
from slurm_plugin.from_slurm_json import SlurmCluster

__all__ = ["Discovery", "offered_cluster", "placeholder_cluster"]


@dataclass(frozen=True, slots=True)
class Discovery:
    """The cluster as Caldera sees it, plus Slurm's own view and what was not found."""

    state: ClusterState
    raw: SlurmCluster | None
    missing: tuple[str, ...] = ()  # configured Slurm partitions the cluster does not have


def offered_cluster(raw: SlurmCluster, config: SlurmClusterConfig) -> Discovery:
    """Keep the offered partitions (renamed) and their nodes (prefixed)."""
    prefix = config.node_prefix
    by_name = {p.name: p for p in raw.cluster.partitions}
    partitions: list[Partition] = []
    missing: list[str] = []
    renamed: dict[str, str] = {}
    if config.partitions:
        chosen = [(o.slurm, o.name, o.default) for o in config.partitions]
        any_default = any(o.default for o in config.partitions)
    else:
        chosen = [(p.name, p.name, p.default) for p in raw.cluster.partitions]
        any_default = True
    for slurm_name, name, default in chosen:
        part = by_name.get(slurm_name)
        if part is None:
            missing.append(slurm_name)
            continue
        renamed[slurm_name] = name
        partitions.append(
            replace(
                part,
                name=name,
                nodes=tuple(prefix + n for n in part.nodes),
                default=default if any_default else part.default,
            )
        )
    nodes: list[Node] = []
    for node in raw.cluster.nodes:
        mine = tuple(renamed[p] for p in node.partitions if p in renamed)
        if not mine:
            continue
        nodes.append(replace(node, name=prefix + node.name, partitions=mine))
    state = ClusterState(
        name=config.name, nodes=tuple(nodes), partitions=tuple(partitions), reachable=True
    )
    return Discovery(state, raw, tuple(missing))


def placeholder_cluster(config: SlurmClusterConfig) -> ClusterState:
    """What is known without reaching the cluster: the configured partitions, no nodes."""
    parts = tuple(Partition(name=o.name, nodes=(), default=o.default) for o in config.partitions)
    return ClusterState(name=config.name, nodes=(), partitions=parts, reachable=False)
