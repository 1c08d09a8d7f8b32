"""Topology-aware gang placement, GPU memory fit and the RDMA requirement.

Plugins (names for the scheduler configuration, in `FACTORIES`):

- `topology` (PlacementPlugin): places a gang on the fewest leaf switches (or blocks) the
  free nodes allow, inside the lowest switch that can hold them, best-fit (the fullest
  leaves that still fit, to keep big holes free); a single-node job goes to the leaf with
  the fewest free nodes. `--switches=N@wait`: while the best placement spans more than N
  leaves the job waits (reason Resources), at most `wait` after it became eligible (no
  `@wait`: `max_switch_wait_s`, which also caps it, as Slurm's max_switch_wait does);
  then it takes the best.
- `gpu-memory` (NodeFilter): `#CALDERA --gpu-memory`: the node has `gpus` free GPUs with at
  least that much memory each (bytes; NVML's free memory when the agent reports it).
- `rdma` (NodeFilter): a job that asks for the feature `ib` (`-C ib`, `#SBATCH
  --constraint=ib`) needs an ACTIVE InfiniBand port, `roce` an ACTIVE RoCE port, `rdma`
  either. Nodes without NIC inventory are judged by their features alone.
- `fabric` (NodeScore): multi-node jobs prefer nodes with an active RDMA port, single-node
  jobs nodes without one (keeping the fabric's nodes for MPI).

`place_gang` is the pure algorithm; the plugin adds the topology lookup and the wait.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from itertools import compress, islice
from operator import attrgetter

from gateway.model.topology import Topology
from gateway.scheduler.request import NodeRequest, node_request
from gateway.scheduler.snapshot import NodeFree, Snapshot
from gateway.topology.netenv import choose_gpus, rdma_kinds

__all__ = [
    "FACTORIES",
    "FabricScore",
    "GangPlacement",
    "GpuMemoryFit",
    "RdmaFit",
    "TopologyPlacement",
    "place_gang",
    "rdma_required",
]

TopologySource = Topology | Callable[[Snapshot], Topology | None] | None


@dataclass(frozen=True, slots=True)
class GangPlacement:
    """The chosen nodes (leaf by leaf), how many leaves they span and the fewest possible."""

    nodes: tuple[NodeFree, ...]
    groups: int
    optimum: int


_NAME = attrgetter("node.name")


def _keys(names: list[str], index: Mapping[str, str]) -> list[str]:
    """Each candidate's leaf (or block); a node the topology lacks is a group of its own."""
    keys = list(map(index.get, names))
    if None in keys:
        keys = [k if k is not None else "\x00" + n for k, n in zip(keys, names, strict=True)]
    return keys  # type: ignore[return-value]


def _members(
    candidates: Sequence[NodeFree],
    names: list[str],
    keys: list[str],
    plan: Sequence[tuple[str, int]],
    topo: Topology,
) -> list[NodeFree]:
    """The first `take` candidates of each (leaf, take) of the plan, leaf by leaf (a node
    may stand several times among the candidates: one per rank it can take)."""
    out: list[NodeFree] = []
    if len(plan) <= 4:  # one C-speed pass per leaf
        for leaf, take in plan:
            out.extend(islice(compress(candidates, map(leaf.__eq__, keys)), take))
        return out
    pos: dict[str, list[int]] = {}
    for i, name in enumerate(names):
        pos.setdefault(name, []).append(i)
    for leaf, take in plan:
        members = (leaf[1:],) if leaf.startswith("\x00") else topo.nodes_in(leaf)
        idx = sorted(i for n in members for i in pos.get(n, ()))[:take]
        out.extend(candidates[i] for i in idx)
    return out


def place_gang(
    count: int, candidates: Sequence[NodeFree], topo: Topology | None
) -> GangPlacement | None:
    """`count` nodes out of `candidates` (best first) on the fewest leaf switches (the
    gateway's cycle and the Kubernetes binder's placement of a gang the gateway did not
    place; a candidate may repeat a node, once per rank the node takes).

    Among placements with that many leaves it picks the lowest switch (spine, then core)
    that can hold them, the fullest leaves first and best fit for the last one. None when
    there are fewer candidates than `count`."""
    if count <= 0 or len(candidates) < count:
        return None
    if topo is None:
        return GangPlacement(tuple(candidates[:count]), count, count)
    names = list(map(_NAME, candidates))
    keys = _keys(names, topo.group_index)
    sizes = Counter(keys)  # insertion order = the best candidate's leaf first
    if count == 1:
        g = min(sizes, key=sizes.__getitem__)
        return GangPlacement(tuple(_members(candidates, names, keys, [(g, 1)], topo)), 1, 1)
    need, acc = 0, 0
    for c in sorted(sizes.values(), reverse=True):
        acc += c
        need += 1
        if acc >= count:
            break
    if need == 1:
        leaf = min((g for g in sizes if sizes[g] >= count), key=sizes.__getitem__)
        return GangPlacement(tuple(_members(candidates, names, keys, [(leaf, count)], topo)), 1, 1)
    scope: list[str] = list(sizes)
    found: list[str] | None = None
    found_level = -1
    found_total = 0
    for sw in topo.uppers():
        lv = topo.level(sw)
        if found is not None and lv > found_level:
            break
        leaves = [g for g in topo.leaves_under(sw) if g in sizes]
        if len(leaves) < need:
            continue
        top = sorted((sizes[g] for g in leaves), reverse=True)[:need]
        if sum(top) < count:
            continue
        total = sum(sizes[g] for g in leaves)
        if found is None or total < found_total:
            found, found_level, found_total = leaves, lv, total
    if found is not None:
        scope = found
    scope.sort(key=lambda name: -sizes[name])
    plan = [(g, sizes[g]) for g in scope[: need - 1]]
    rest = count - sum(take for _, take in plan)
    last = min((g for g in scope[need - 1 :] if sizes[g] >= rest), key=sizes.__getitem__)
    plan.append((last, rest))
    return GangPlacement(tuple(_members(candidates, names, keys, plan, topo)), need, need)


def _leaf_topology(snap: Snapshot) -> Topology | None:
    paths = {
        f.node.name: [f.node.switch, *f.node.uplinks]
        for f in snap.free.values()
        if f.node.switch is not None
    }
    return Topology.from_paths(paths) if paths else None


class TopologyPlacement:
    """PlacementPlugin: fewest leaf switches, `--switches=N@wait` (see the module doc).

    `topology` is a Topology, a function of the snapshot returning one (e.g. per cluster
    from the inventory), or None to use each node's `switch` and `uplinks`."""

    name = "topology"

    def __init__(self, topology: TopologySource = None, max_switch_wait_s: int = 300) -> None:
        self._source = topology
        self.max_switch_wait_s = max_switch_wait_s
        self._cache: tuple[int, Topology | None] | None = None

    def topology(self, snap: Snapshot) -> Topology | None:
        """The topology for this snapshot."""
        if isinstance(self._source, Topology):
            return self._source
        if self._cache is not None and self._cache[0] == id(snap):
            return self._cache[1]
        topo = self._source(snap) if self._source is not None else _leaf_topology(snap)
        self._cache = (id(snap), topo)
        return topo

    def wait_start(self, req: NodeRequest, snap: Snapshot) -> float | None:
        """When the job asking `req` became eligible (adapter: NodeRequest has no job id,
        so this finds the pending job with that request; the earliest when several)."""
        best: float | None = None
        for job in snap.pending:
            spec = job.spec
            if spec.switches != req.switches or spec.switches_wait_s != req.switches_wait_s:
                continue
            other = node_request(spec, req.nodelist)
            if (other.nodes, other.cpus, other.gpus, other.partitions, other.constraint) != (
                req.nodes,
                req.cpus,
                req.gpus,
                req.partitions,
                req.constraint,
            ):
                continue
            start = job.eligible_time if job.eligible_time is not None else job.submit_time
            best = start if best is None else min(best, start)
        return best

    def choose(
        self, req: NodeRequest, candidates: Sequence[NodeFree], snap: Snapshot
    ) -> Sequence[NodeFree] | None:
        """The gang's nodes; [] to make the job wait for fewer switches; None to decline."""
        topo = self.topology(snap)
        if topo is None:
            return None
        placed = place_gang(req.nodes, candidates, topo)
        if placed is None:
            return None
        if req.switches and placed.groups > req.switches:
            asked = req.switches_wait_s
            wait = self.max_switch_wait_s if asked is None else min(asked, self.max_switch_wait_s)
            start = self.wait_start(req, snap)
            if start is None or snap.now - start < wait:
                return []
        return placed.nodes


_WORD = re.compile(r"[A-Za-z0-9_.-]+")


def rdma_required(constraint: str | None) -> frozenset[str]:
    """The RDMA words (`ib`, `roce`, `rdma`) a `--constraint` expression names."""
    if not constraint:
        return frozenset()
    return frozenset(w.lower() for w in _WORD.findall(constraint)) & {"ib", "roce", "rdma"}


class RdmaFit:
    """NodeFilter: `-C ib` / `-C roce` / `-C rdma` need an ACTIVE port of that kind."""

    name = "rdma"

    def verdict_key(self, req: NodeRequest) -> Hashable:
        """The field `fits` reads (NodeTests shares verdicts by it)."""
        return req.constraint

    def fits(self, req: NodeRequest, free: NodeFree, snap: Snapshot) -> bool:
        """Whether the node has the RDMA the job asks for."""
        wanted = rdma_required(req.constraint)
        if not wanted:
            return True
        node = free.node
        if not node.nics:
            return bool(wanted & set(node.features))
        have = rdma_kinds(node)
        if "rdma" in wanted and not have:
            return False
        return all(w in have for w in wanted - {"rdma"})


class GpuMemoryFit:
    """NodeFilter: `--gpu-memory`: enough free GPUs with that much memory (bytes) each.

    A node that reports no GPUs (gres counts only) cannot show it has the memory: it fails
    unless `unknown_ok`."""

    name = "gpu-memory"

    def __init__(self, unknown_ok: bool = False) -> None:
        self.unknown_ok = unknown_ok

    def verdict_key(self, req: NodeRequest) -> Hashable:
        """The fields `fits` reads (NodeTests shares verdicts by it)."""
        return (req.gpus, req.gpu_memory_mb)

    def fits(self, req: NodeRequest, free: NodeFree, snap: Snapshot) -> bool:
        """Whether `req.gpus` free GPUs of the node each have `req.gpu_memory_mb` MiB."""
        if not req.gpu_memory_mb or req.gpus <= 0:
            return True
        if not free.node.gpus:
            return self.unknown_ok
        need = req.gpu_memory_mb * 2**20
        return choose_gpus(free.node, free.gpus, req.gpus, need) is not None


class FabricScore:
    """NodeScore: MPI-style jobs toward RDMA nodes, single-node jobs away from them."""

    name = "fabric"

    def __init__(self, weight: float = 0.5) -> None:
        self.weight = weight

    def score(self, req: NodeRequest, free: NodeFree, snap: Snapshot) -> float:
        """+weight when the node's fabric matches the job's shape."""
        has = bool(rdma_kinds(free.node)) if free.node.nics else False
        return self.weight if has == (req.nodes > 1) else 0.0


FACTORIES: dict[str, Callable[[], object]] = {
    "topology": TopologyPlacement,
    "gpu-memory": GpuMemoryFit,
    "rdma": RdmaFit,
    "fabric": FabricScore,
}
