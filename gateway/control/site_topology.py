"""The local site's switch tree, as slurm.conf's `TopologyPlugin=topology/tree` reads it.

slurmctld then reads topology.conf from slurm.conf's own directory, and the tree decides two
things users see: which nodes a job gets (the fewest leaf switches; the scheduler's
`topology` plugin places by each node's switch path) and each node's SLURM_TOPOLOGY_ADDR /
SLURM_TOPOLOGY_ADDR_PATTERN, which slurmd builds with topology/tree's `topo_get_node_addr`:
one field per switch level from the top (the switches of that level above the node, as a
hostlist; empty when none), then the node. Without a tree the address is the node's name
and the pattern `node`. Pure apart from `read_site_topology`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from gateway.compat.hostlist import compress
from gateway.control.config import ConfigError
from gateway.model.topology import Topology, TopologyError, TopologyKind
from gateway.topology.slurm_conf import read_topology_conf

__all__ = ["node_addresses", "read_site_topology", "switch_paths"]

TREE_PLUGIN = "topology/tree"


def read_site_topology(slurm_conf: Path, plugin: str | None) -> Topology | None:
    """The tree `slurm_conf`'s TopologyPlugin reads (topology.conf beside it), or None for
    any other plugin. Raises ConfigError naming the file when it cannot be read."""
    if (plugin or "").lower() != TREE_PLUGIN:
        return None
    path = slurm_conf.parent / "topology.conf"
    try:
        topo = read_topology_conf(path)
    except OSError as exc:  # slurmctld stops too: "can't stat topology.conf file"
        raise ConfigError(
            f"{path}: cannot read it ({exc.strerror}), TopologyPlugin={plugin}"
        ) from None
    except (TopologyError, ValueError) as exc:
        raise ConfigError(f"{path}: {exc}") from None
    if topo.kind is not TopologyKind.TREE or not topo.switches:
        raise ConfigError(f"{path}: topology/tree needs SwitchName= lines")
    return topo


def switch_paths(topo: Topology | None) -> dict[str, tuple[str, ...]]:
    """Each node's switches, its leaf first, up to a root (what placement reads)."""
    if topo is None:
        return {}
    return {node: topo.path(node) for node in topo.nodes()}


def node_addresses(topo: Topology | None, nodes: Iterable[str]) -> dict[str, tuple[str, str]]:
    """(SLURM_TOPOLOGY_ADDR, SLURM_TOPOLOGY_ADDR_PATTERN) of each node, as slurmd sets them
    (`core.spine1.leaf1.node01`, `switch.switch.switch.node`)."""
    if topo is None or topo.kind is not TopologyKind.TREE or not topo.switches:
        return {node: (node, "node") for node in nodes}
    top = max(topo.level(sw.name) for sw in topo.switches)
    above: dict[str, list[str]] = {}
    for sw in topo.switches:  # declaration order, as slurmctld's switch table
        for node in dict.fromkeys(topo.nodes_in(sw.name)):
            above.setdefault(node, []).append(sw.name)
    pattern = "switch." * (top + 1) + "node"
    out: dict[str, tuple[str, str]] = {}
    for node in nodes:
        mine = above.get(node, [])
        fields = [compress([s for s in mine if topo.level(s) == lv]) for lv in range(top, -1, -1)]
        out[node] = (".".join([*fields, node]), pattern)
    return out
