"""Placing one gang on a working copy of the free resources: tentative allocations that are
committed or discarded whole (`Statement`), the required nodes of `-w` first, and the
layout of `-n` without `-N` over as few nodes as the tasks need (`place_spread`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache

from gateway.model.job import RankPlacement
from gateway.scheduler.records import rank
from gateway.scheduler.request import NodeRequest, task_capacity
from gateway.scheduler.snapshot import NodeFree, Snapshot

__all__ = ["Statement", "gpu_layout", "node_order", "place_spread", "required_first"]

_NO_GPUS: frozenset[int] = frozenset()


_DIGITS = re.compile(r"(\d+)")


@lru_cache(maxsize=1 << 16)  # asked once per rank placed, of a site's few names
def node_order(name: str) -> tuple[tuple[int, str, int], ...]:
    """node2 before node10 (a site numbers its nodes; slurm.conf lists them in order)."""
    return tuple(
        (1, "", int(part)) if part.isdigit() else (0, part, 0)
        for part in _DIGITS.split(name)
        if part
    )


class Statement:
    """Tentative allocations on a working copy of free resources; commit or discard whole."""

    def __init__(self, free: dict[str, NodeFree]) -> None:
        self._free = free
        self._pending: list[tuple[str, NodeFree]] = []

    def allocate(
        self, name: str, cpus: int, memory: int, gpus: int, exclusive: bool
    ) -> tuple[int, ...]:
        """Take resources on a node (tentatively); returns the GPU indices taken (an
        exclusive job takes them all, as slurmctld allocates it every GRES of the node)."""
        cur = self._free[name]
        taken = tuple(sorted(cur.gpus)[: None if exclusive else gpus]) if gpus or exclusive else ()
        self._pending.append((name, cur))
        # the constructor, not dataclasses.replace: a gang allocates once per rank
        self._free[name] = NodeFree(
            cur.node,
            0 if exclusive else cur.cpus - cpus,
            0 if exclusive else cur.memory_mb - memory,
            _NO_GPUS if exclusive else cur.gpus - set(taken) if taken else cur.gpus,
            cur.exclusive_jobs + int(exclusive),
            cur.jobs + 1,
        )
        return taken

    def commit(self) -> None:
        """Keep the allocations."""
        self._pending.clear()

    def discard(self) -> None:
        """Undo every allocation since the last commit."""
        for name, before in reversed(self._pending):
            self._free[name] = before
        self._pending.clear()


def required_first(required: Sequence[str], cands: list[NodeFree]) -> list[NodeFree] | None:
    """The candidates with the required (-w) nodes first, in their order; None when one of
    them cannot take its share now."""
    by_name = {f.node.name: f for f in cands}
    if any(name not in by_name for name in required):
        return None
    wanted = set(required)
    return [by_name[n] for n in required] + [f for f in cands if f.node.name not in wanted]


def place_spread(
    req: NodeRequest, cands: Sequence[NodeFree], free: dict[str, NodeFree], snap: Snapshot
) -> tuple[RankPlacement, ...] | None:
    """-n without -N: fill the candidates in their order with as many tasks as each can
    take, over as few nodes as that gives (Slurm lays out `-n 5` on 2-CPU nodes as 2,2,1);
    the required (-w) nodes first, each left at least one task (`-w node[01-02] -n2`: 1,1)."""
    if req.gpus_total:
        layout = gpu_layout(req, cands, snap)
    else:
        plain = _wide_layout(req, cands, snap) if req.wide else _narrow_layout(req, cands, snap)
        layout = _with_gpus(req, plain)
    if layout is None:
        return None
    stmt = Statement(free)
    out: list[RankPlacement] = []
    for f, tasks, share in layout:
        node = f.node
        cpus = node.cpus if req.exclusive else tasks * req.cpus_per_task
        memory = req.memory_for(cpus, snap.def_mem_per_cpu_mb, node.memory_mb)
        gpus = stmt.allocate(node.name, cpus, memory, share, req.exclusive)
        out.append(rank(node, tasks, cpus, memory, gpus))
    stmt.commit()
    return tuple(out)


def _gpus_free(req: NodeRequest, f: NodeFree) -> int:
    return f.node.gpu_count(req.gpu_type) if req.exclusive else len(f.gpus)


def _with_gpus(
    req: NodeRequest, layout: list[tuple[NodeFree, int]] | None
) -> list[tuple[NodeFree, int, int]] | None:
    """Each node's GPUs: per task, or the request's per node."""
    if layout is None:
        return None
    return [(f, n, n * req.gpus_per_task if req.gpus_per_task else req.gpus) for f, n in layout]


def gpu_layout(
    req: NodeRequest, cands: Sequence[NodeFree], snap: Snapshot
) -> list[tuple[NodeFree, int, int]] | None:
    """--gpus=G over several nodes: candidates with a free GPU and room for a task until
    their GPUs reach G (and their room the tasks); the GPUs given in node order, each node
    as many as it has while every later one keeps one (the test cluster: `--gpus=6` gives
    node03 2 and node04 4), the tasks split as a node range splits them."""
    chosen: list[tuple[NodeFree, int]] = []
    have = room = 0
    for f in cands:
        cap, gpus = _capacity(req, f, snap), _gpus_free(req, f)
        if cap <= 0 or gpus <= 0:
            continue
        chosen.append((f, cap))
        have, room = have + gpus, room + cap
        enough = have >= req.gpus_total and (req.fixed_per_node or room >= req.tasks)
        if (enough and len(chosen) >= req.nodes) or len(chosen) == req.max_nodes:
            break
    if have < req.gpus_total or (not req.fixed_per_node and room < req.tasks):
        return None
    if len(chosen) < req.nodes:
        return None
    if not req.fixed_per_node and req.tasks < len(chosen):
        return None  # (a node of the job without a task)
    chosen.sort(key=lambda c: node_order(c[0].node.name))
    layout = _blocks(replace(req, max_nodes=len(chosen)), chosen)
    if layout is None:
        return None
    left, out = req.gpus_total, []
    for i, (f, tasks) in enumerate(layout):
        share = min(_gpus_free(req, f), left - (len(layout) - i - 1))
        out.append((f, tasks, share))
        left -= share
    return out


def _capacity(req: NodeRequest, f: NodeFree, snap: Snapshot) -> int:
    cpus = f.node.cpus if req.exclusive else f.cpus
    memory = f.node.memory_mb if req.exclusive else f.memory_mb
    return task_capacity(req, cpus, memory, snap.def_mem_per_cpu_mb, _gpus_free(req, f))


def _narrow_layout(
    req: NodeRequest, cands: Sequence[NodeFree], snap: Snapshot
) -> list[tuple[NodeFree, int]] | None:
    """As few nodes as the tasks need, the required ones first, each given a task."""
    layout: list[tuple[NodeFree, int]] = []
    left = req.tasks
    owed = len(req.nodelist)  # required nodes still to get a task
    for f in cands:
        take = min(left, _capacity(req, f, snap))
        if owed:
            owed -= 1
            take = min(take, left - owed)
            if take <= 0:
                return None
        if take > 0:
            layout.append((f, take))
            left -= take
        if left == 0 or len(layout) == req.max_nodes:
            break
    return None if left > 0 else layout


def _wide_layout(
    req: NodeRequest, cands: Sequence[NodeFree], snap: Snapshot
) -> list[tuple[NodeFree, int]] | None:
    """-N MIN-MAX: up to `max_nodes` nodes that can take a task (the required ones
    first), at least MIN of them; the tasks split over them in blocks (`-N1-2 -n3`: 2,1),
    what a node cannot hold going to the next with room. Ranks in node order."""
    chosen: list[tuple[NodeFree, int]] = []
    for i, f in enumerate(cands):
        cap = _capacity(req, f, snap)
        if req.fixed_per_node and cap < req.fixed_per_node:
            cap = 0
        if cap <= 0 and i < len(req.nodelist):
            return None
        if cap > 0:
            chosen.append((f, cap))
        if len(chosen) == req.max_nodes:
            break
    if len(chosen) < req.nodes:
        return None
    chosen.sort(key=lambda c: node_order(c[0].node.name))
    return _blocks(req, chosen)


def _blocks(
    req: NodeRequest, chosen: list[tuple[NodeFree, int]]
) -> list[tuple[NodeFree, int]] | None:
    """The tasks over the chosen nodes (each with its capacity) in blocks, what a node
    cannot hold going to the next with room (`fixed_per_node`: that many each)."""
    if req.fixed_per_node:
        return [(f, req.fixed_per_node) for f, _ in chosen]
    base, extra = divmod(req.tasks, len(chosen))
    shares = [min(cap, base + (i < extra)) for i, (_, cap) in enumerate(chosen)]
    left = req.tasks - sum(shares)
    for i, (_, cap) in enumerate(chosen):
        more = min(left, cap - shares[i])
        shares[i] += more
        left -= more
    if left > 0:
        return None
    return [(f, n) for (f, _), n in zip(chosen, shares, strict=True)]
