"""The network topology of a cluster: a switch tree (leaf -> spine -> core) or blocks.

One model, whatever it was read from (Slurm's topology.conf tree or block form, Kubernetes
node labels, agent discovery through ibnetdiscover) and whatever it is written to
(topology.conf, Volcano HyperNode objects). The scheduler's topology plugin works on the
*groups* of a topology (leaf switches, or blocks) and on their ancestors, so both forms
place through the same code: blocks are grouped into aggregate blocks of `block_sizes`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum

__all__ = ["Block", "Switch", "Topology", "TopologyError", "TopologyKind"]


class TopologyError(ValueError):
    """A topology that cannot be used as given (unknown child, cycle, ...)."""


class TopologyKind(Enum):
    """Slurm's TopologyPlugin the topology corresponds to."""

    TREE = "tree"
    BLOCK = "block"


@dataclass(frozen=True, slots=True)
class Switch:
    """One switch: the nodes cabled to it (a leaf) and/or the switches under it."""

    name: str
    nodes: tuple[str, ...] = ()
    switches: tuple[str, ...] = ()
    link_speed: int | None = None


@dataclass(frozen=True, slots=True)
class Block:
    """One base block (Slurm topology/block): nodes with full bandwidth between them."""

    name: str
    nodes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Index:
    """Derived lookups, built once per topology."""

    group_of: dict[str, str]  # node -> leaf switch or block
    groups: tuple[str, ...]  # leaf switches / blocks, in declaration order
    level: dict[str, int]  # switch (or aggregate) -> level (0: leaf)
    parents: dict[str, tuple[str, ...]]
    children: dict[str, tuple[str, ...]]  # switch -> child switches/aggregates
    leaves_under: dict[str, tuple[str, ...]]  # any switch -> groups below (itself for a leaf)
    nodes_of: dict[str, tuple[str, ...]]  # group -> its nodes
    uppers: tuple[str, ...] = ()  # non-leaf switches, lowest level first, smallest first


@dataclass(frozen=True)
class Topology:
    """A tree of switches or a list of blocks (never both)."""

    kind: TopologyKind
    switches: tuple[Switch, ...] = ()
    blocks: tuple[Block, ...] = ()
    block_sizes: tuple[int, ...] = ()  # nodes per base block, then per aggregate level
    _index: _Index = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        index = (
            _index_tree(self.switches)
            if self.kind is TopologyKind.TREE
            else _index_blocks(self.blocks, self.block_sizes)
        )
        ups = [s for s in index.level if index.level[s] > 0]
        ups.sort(key=lambda s: (index.level[s], len(index.leaves_under[s])))
        index = replace(index, uppers=tuple(ups))
        object.__setattr__(self, "_index", index)

    # --- constructors -------------------------------------------------------------------

    @classmethod
    def tree(cls, switches: Iterable[Switch]) -> Topology:
        """A topology/tree topology."""
        return cls(TopologyKind.TREE, switches=tuple(switches))

    @classmethod
    def block(cls, blocks: Iterable[Block], block_sizes: Sequence[int] = ()) -> Topology:
        """A topology/block topology."""
        return cls(TopologyKind.BLOCK, blocks=tuple(blocks), block_sizes=tuple(block_sizes))

    @classmethod
    def from_paths(cls, paths: Mapping[str, Sequence[str]]) -> Topology:
        """A tree from each node's switch path, leaf first (`{"n1": ["leaf1", "spine1"]}`).

        A path may be shorter than others (its top switch is then a root)."""
        nodes: dict[str, list[str]] = {}
        children: dict[str, list[str]] = {}
        order: list[str] = []

        def see(name: str) -> None:
            if name not in nodes:
                nodes[name] = []
                children[name] = []
                order.append(name)

        for node, path in paths.items():
            if not path:
                continue
            for sw in path:
                see(sw)
            nodes[path[0]].append(node)
            for child, parent in itertools.pairwise(path):
                if child not in children[parent]:
                    children[parent].append(child)
        return cls.tree(Switch(name, tuple(nodes[name]), tuple(children[name])) for name in order)

    # --- queries ------------------------------------------------------------------------

    @property
    def groups(self) -> tuple[str, ...]:
        """Leaf switches (tree) or base blocks (block), in declaration order."""
        return self._index.groups

    @property
    def group_index(self) -> Mapping[str, str]:
        """node -> its leaf switch or block."""
        return self._index.group_of

    def group_of(self, node: str) -> str | None:
        """The leaf switch (or block) of a node; None when the topology does not know it."""
        return self._index.group_of.get(node)

    def nodes(self) -> tuple[str, ...]:
        """Every node, leaf by leaf."""
        return tuple(n for g in self._index.groups for n in self._index.nodes_of[g])

    def nodes_in(self, switch: str) -> tuple[str, ...]:
        """The nodes below a switch, aggregate or block."""
        return tuple(n for g in self.leaves_under(switch) for n in self._index.nodes_of[g])

    def level(self, switch: str) -> int:
        """0 for a leaf (or base block), 1 + the highest child level above."""
        return self._index.level[switch]

    def parents(self, switch: str) -> tuple[str, ...]:
        """The switches (or aggregate blocks) directly above."""
        return self._index.parents.get(switch, ())

    def children(self, switch: str) -> tuple[str, ...]:
        """The switches (or blocks) directly below."""
        return self._index.children.get(switch, ())

    def leaves_under(self, switch: str) -> tuple[str, ...]:
        """The leaf switches (or base blocks) below a switch (itself for a leaf)."""
        return self._index.leaves_under[switch]

    def uppers(self) -> tuple[str, ...]:
        """Every non-leaf switch (or aggregate block), lowest level first."""
        return self._index.uppers

    def roots(self) -> tuple[str, ...]:
        """Switches without a parent."""
        return tuple(s for s in self._index.level if not self._index.parents.get(s))

    def path(self, node: str) -> tuple[str, ...]:
        """The switches from a node's leaf up to a root (first parent at each step)."""
        group = self.group_of(node)
        out: list[str] = []
        while group is not None and group not in out:
            out.append(group)
            ups = self.parents(group)
            group = ups[0] if ups else None
        return tuple(out)

    def span(self, nodes: Iterable[str]) -> int:
        """How many leaf switches (or blocks) these nodes sit on; unknown nodes count 1 each."""
        seen: set[str] = set()
        unknown = 0
        for n in nodes:
            g = self._index.group_of.get(n)
            if g is None:
                unknown += 1
            else:
                seen.add(g)
        return len(seen) + unknown

    def distance(self, a: str, b: str) -> int:
        """Switch hops between two nodes' leaves: 0 same leaf, 2 through a spine, ...;
        -1 when they share no switch."""
        pa, pb = self.path(a), self.path(b)
        if not pa or not pb:
            return -1
        if pa[0] == pb[0]:
            return 0
        depth = {s: i for i, s in enumerate(pa)}
        for j, s in enumerate(pb):
            if s in depth:
                return depth[s] + j
        under = [s for s in self._index.level if pa[0] in self.leaves_under(s)]
        for s in sorted(under, key=self.level):
            if pb[0] in self.leaves_under(s):
                return 2 * self.level(s)
        return -1

    def problems(self) -> list[str]:
        """Human-readable defects Slurm would complain about (empty when none)."""
        out: list[str] = []
        seen: dict[str, str] = {}
        if self.kind is TopologyKind.TREE:
            names = {s.name for s in self.switches}
            if len(names) != len(self.switches):
                out.append("duplicate switch names")
            for sw in self.switches:
                for child in sw.switches:
                    if child not in names:
                        out.append(f"switch {sw.name} names unknown switch {child}")
                for n in sw.nodes:
                    if n in seen and seen[n] != sw.name:
                        out.append(f"node {n} is under both {seen[n]} and {sw.name}")
                    seen[n] = sw.name
            everyone = set(self.nodes())
            if everyone and not any(set(self.nodes_in(s)) >= everyone for s in self._index.level):
                out.append("no switch can reach all nodes through its descendants")
        else:
            for blk in self.blocks:
                for n in blk.nodes:
                    if n in seen:
                        out.append(f"node {n} is in both {seen[n]} and {blk.name}")
                    seen[n] = blk.name
        return out


def _index_tree(switches: tuple[Switch, ...]) -> _Index:
    by_name = {s.name: s for s in switches}
    parents: dict[str, list[str]] = {s.name: [] for s in switches}
    for sw in switches:
        for child in sw.switches:
            if child in parents and sw.name not in parents[child]:
                parents[child].append(sw.name)
    level: dict[str, int] = {}

    def level_of(name: str, stack: tuple[str, ...]) -> int:
        if name in level:
            return level[name]
        if name in stack:
            raise TopologyError("switch cycle: " + " -> ".join((*stack, name)))
        kids = [c for c in by_name[name].switches if c in by_name]
        lv = 0 if not kids else 1 + max(level_of(c, (*stack, name)) for c in kids)
        level[name] = lv
        return lv

    for sw in switches:
        level_of(sw.name, ())
    groups = tuple(s.name for s in switches if not s.switches or s.nodes)
    group_of: dict[str, str] = {}
    nodes_of: dict[str, tuple[str, ...]] = {}
    for g in groups:
        nodes_of[g] = by_name[g].nodes
        for n in by_name[g].nodes:
            group_of.setdefault(n, g)
    leaves_under: dict[str, tuple[str, ...]] = {}

    def under(name: str) -> tuple[str, ...]:
        if name in leaves_under:
            return leaves_under[name]
        out: list[str] = [name] if name in nodes_of else []
        for child in by_name[name].switches:
            if child in by_name:
                out.extend(g for g in under(child) if g not in out)
        leaves_under[name] = tuple(out)
        return leaves_under[name]

    for sw in switches:
        under(sw.name)
    children = {s.name: tuple(c for c in s.switches if c in by_name) for s in switches}
    return _Index(
        group_of=group_of,
        groups=groups,
        level=level,
        parents={k: tuple(v) for k, v in parents.items()},
        children=children,
        leaves_under=leaves_under,
        nodes_of=nodes_of,
    )


def _index_blocks(blocks: tuple[Block, ...], sizes: tuple[int, ...]) -> _Index:
    groups = tuple(b.name for b in blocks)
    nodes_of = {b.name: b.nodes for b in blocks}
    group_of: dict[str, str] = {}
    for b in blocks:
        for n in b.nodes:
            group_of.setdefault(n, b.name)
    level = dict.fromkeys(groups, 0)
    parents: dict[str, tuple[str, ...]] = {}
    children: dict[str, tuple[str, ...]] = {}
    leaves_under: dict[str, tuple[str, ...]] = {g: (g,) for g in groups}
    base = sizes[0] if sizes else max((len(b.nodes) for b in blocks), default=1)
    for lv, size in enumerate(sizes[1:], start=1):
        per = max(size // max(base, 1), 1)
        for i in range(0, len(groups), per):
            members = groups[i : i + per]
            name = f"{members[0]}+{len(members)}" if len(members) > 1 else f"{members[0]}+1"
            name = f"@{lv}:{name}"
            level[name] = lv
            leaves_under[name] = members
            prev = [s for s in level if level[s] == lv - 1 and set(leaves_under[s]) <= set(members)]
            children[name] = tuple(prev)
            for p in prev:
                parents[p] = (name,)
    return _Index(
        group_of=group_of,
        groups=groups,
        level=level,
        parents=parents,
        children=children,
        leaves_under=leaves_under,
        nodes_of=nodes_of,
    )
