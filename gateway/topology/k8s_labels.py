"""Topology from (and to) Kubernetes node labels.

A node carries one label per tier, leaf first: Caldera's own keys
(`topology.caldera.io/leaf`, `.../spine`, `.../core`, as testenv/k8s's KWOK nodes have), or
another convention (`LABEL_PRESETS`). A node with only a block label
(`topology.caldera.io/block`) describes a block topology. This module is the one reader
of these labels: the Kubernetes inventory takes each node's switch from `node_switch`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gateway.model.topology import Block, Topology, TopologyKind

__all__ = [
    "BLOCK_LABEL",
    "CALDERA_TIERS",
    "LABEL_PRESETS",
    "node_switch",
    "switch_path",
    "topology_from_labels",
    "topology_to_labels",
]

CALDERA_TIERS: tuple[str, ...] = (
    "topology.caldera.io/leaf",
    "topology.caldera.io/spine",
    "topology.caldera.io/core",
)
BLOCK_LABEL = "topology.caldera.io/block"

LABEL_PRESETS: dict[str, tuple[str, ...]] = {
    "caldera": CALDERA_TIERS,
    # NVIDIA topograph
    "nvidia": (
        "network.topology.nvidia.com/leaf",
        "network.topology.nvidia.com/spine",
        "network.topology.nvidia.com/core",
    ),
    # AWS EC2 instance topology: layer-3 is closest to the instance
    "aws": (
        "topology.k8s.aws/network-node-layer-3",
        "topology.k8s.aws/network-node-layer-2",
        "topology.k8s.aws/network-node-layer-1",
    ),
}


def switch_path(labels: Mapping[str, str], tiers: Sequence[str] = CALDERA_TIERS) -> list[str]:
    """A node's switches, leaf first, up to the first tier it has no label for."""
    path: list[str] = []
    for key in tiers:
        value = labels.get(key)
        if not value:
            break
        path.append(value)
    return path


def node_switch(
    labels: Mapping[str, str],
    leaf_label: str = CALDERA_TIERS[0],
    block_label: str = BLOCK_LABEL,
) -> str | None:
    """A node's leaf switch, else its block (`Node.switch`); None when it has neither."""
    return labels.get(leaf_label) or labels.get(block_label) or None


def topology_from_labels(
    labels: Mapping[str, Mapping[str, str]],
    tiers: Sequence[str] = CALDERA_TIERS,
    block_label: str = BLOCK_LABEL,
) -> Topology:
    """A topology from each node's labels (`{"node": {"label": "value"}}`).

    Tree when any node has the first tier's label, else blocks when any node has the block
    label; nodes without the labels are left out (the placement treats them as alone)."""
    paths: dict[str, list[str]] = {}
    for node, lab in labels.items():
        path = switch_path(lab, tiers)
        if path:
            paths[node] = path
    if paths:
        return Topology.from_paths(dict(sorted(paths.items())))
    blocks: dict[str, list[str]] = {}
    for node, lab in sorted(labels.items()):
        value = lab.get(block_label)
        if value:
            blocks.setdefault(value, []).append(node)
    return Topology.block(Block(name, tuple(nodes)) for name, nodes in blocks.items())


def topology_to_labels(
    topo: Topology,
    tiers: Sequence[str] = CALDERA_TIERS,
    block_label: str = BLOCK_LABEL,
) -> dict[str, dict[str, str]]:
    """The labels each node should carry for this topology (first parent at each tier)."""
    out: dict[str, dict[str, str]] = {}
    if topo.kind is TopologyKind.BLOCK:
        for blk in topo.blocks:
            for node in blk.nodes:
                out[node] = {block_label: blk.name}
        return out
    for node in topo.nodes():
        path = topo.path(node)
        out[node] = {key: sw for key, sw in zip(tiers, path, strict=False)}
    return out
