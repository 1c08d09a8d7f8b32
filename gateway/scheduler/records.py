"""Immutable records the cycle makes by the hundred thousand, shared when equal.

Why: a trace replay places tens of ranks per event (its starts and the top job's
reservation) and its searches give nodes back by the hundred; building a frozen dataclass
costs ~1 us (one object.__setattr__ per field), a dictionary lookup a tenth of that. These
records are values: one object per distinct value cannot be told from fresh ones (where the
planner compares records by identity, it means "unchanged", which an equal value also is).
"""

from __future__ import annotations

from gateway.model.cluster import Node
from gateway.model.job import RankPlacement
from gateway.scheduler.snapshot import NodeFree

__all__ = ["gpu_type", "rank", "whole"]

_LIMIT = 1 << 16
_RANKS: dict[tuple[str, int, int, int, tuple[int, ...], str | None], RankPlacement] = {}
_WHOLE: dict[int, tuple[Node, NodeFree]] = {}  # id(node) -> (it, its record with no job)


def gpu_type(node: Node) -> str | None:
    """The type of the node's GPUs in its gres (`gpu:a100:4`), if it names one."""
    if not node.gres:  # asked once per rank placed: most nodes have none
        return None
    return next((t for name, t, _ in node.gres if name == "gpu" and t), None)


def rank(node: Node, tasks: int, cpus: int, memory_mb: int, gpus: tuple[int, ...]) -> RankPlacement:
    """`RankPlacement(node.name, tasks, cpus, memory_mb, gpus, gpu_type=...)`."""
    typed = gpu_type(node)
    key = (node.name, tasks, cpus, memory_mb, gpus, typed)
    found = _RANKS.get(key)
    if found is None:
        if len(_RANKS) >= _LIMIT:
            _RANKS.clear()
        found = _RANKS[key] = RankPlacement(node.name, tasks, cpus, memory_mb, gpus, gpu_type=typed)
    return found


def whole(node: Node) -> NodeFree:
    """The node with nothing running: every cpu, all memory, every GPU free."""
    hit = _WHOLE.get(id(node))
    if hit is not None and hit[0] is node:
        return hit[1]
    found = NodeFree(node, node.cpus, node.memory_mb, frozenset(g.index for g in node.gpus))
    if len(_WHOLE) >= _LIMIT:
        _WHOLE.clear()
    _WHOLE[id(node)] = (node, found)
    return found
