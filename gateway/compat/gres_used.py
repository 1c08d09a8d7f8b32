"""`scontrol -d show node`'s GresUsed= line, as slurmctld builds it (gres.c,
`_node_gres_used`, once per type of the site's GresTypes, in that order):

- a GRES the node does not have, or has without a type: `name:<allocated>` (`gpu:1`,
  `craynetwork:0`);
- a typed GRES whose devices the node's slurmd registered (its gres.conf File= lines):
  `name:type:<allocated>(IDX:<indices>)`, `N/A` for none (`gpu:a100:2(IDX:0-1)`);
- a typed GRES of a node that never registered (no slurmd: DOWN since slurm.conf said
  so): `name:type:<allocated>` (`gpu:v100:0`).

Pure: the node, the site's GresTypes and the GPU indices its jobs hold.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from gateway.model.cluster import Node

__all__ = ["gres_used", "index_ranges"]


def index_ranges(indices: Collection[int]) -> str:
    """Bit positions as bit_fmt writes them: `0-1,3`."""
    out: list[str] = []
    ordered = sorted(set(indices))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(out)


def gres_used(
    node: Node, gres_types: Sequence[str], held_gpus: Collection[int], registered: bool
) -> str:
    """The node's GresUsed= value (empty when the site has no GresTypes)."""
    parts: list[str] = []
    first_gpu = 0  # a node's typed GPUs take its indices in the order of its Gres=
    for name in gres_types:
        typed = [(t, c) for n, t, c in node.gres if n == name and t]
        if not typed:
            held = len(held_gpus) if name == "gpu" else 0
            parts.append(f"{name}:{held}")
            continue
        for gres_type, count in typed:
            mine = [i for i in held_gpus if first_gpu <= i < first_gpu + count]
            if name != "gpu":
                mine = []  # (only GPUs are held by index here)
            else:
                first_gpu += count
            if registered and name == "gpu":
                parts.append(f"{name}:{gres_type}:{len(mine)}(IDX:{index_ranges(mine) or 'N/A'})")
            else:
                parts.append(f"{name}:{gres_type}:{len(mine)}")
    return ",".join(parts)
