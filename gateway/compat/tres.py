"""TRES strings as slurmctld builds them: scontrol's `TRES=`, sacct's ReqTRES and AllocTRES
of a job and of its steps. One place, so that every command prints the same counts.

slurmctld accounts cpu, mem, energy, node, billing, fs/disk, vmem and pages, plus what
AccountingStorageTRES names (`gres/gpu`, `gres/gpu:a100`, `license/matlab`), and nothing
else: an unnamed licence or GPU type is left out. It prints them in TRES id order (the
fixed ones, then AccountingStorageTRES's in the order slurmdbd registered them); sacct sorts
them by name. Checked on the real test cluster (Slurm 22.05, 2026-11-26): an untyped
`--gres=gpu:1` that lands on an a100 node allocates `gres/gpu=1,gres/gpu:a100=1` but
requests `gres/gpu=1`; licences are in both; `--exclusive` allocates every CPU and GPU of
its nodes and `--mem=0` all their memory (`--mem=0` requests the partition's largest node's
memory per node).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gateway.compat.fmt_common import UNIT_MEGA, convert_num_unit
from gateway.model.cluster import Node
from gateway.model.values import GresItem
from gateway.scheduler.licenses import license_request

__all__ = [
    "BASE_TRES",
    "TresCounts",
    "TresNames",
    "count_gres",
    "licence_counts",
    "node_alloc_tres",
    "node_tres",
    "partition_tres",
    "recorded_count",
    "recorded_gpus",
]

BASE_TRES = ("cpu", "mem", "energy", "node", "billing", "fs/disk", "vmem", "pages")


@dataclass(frozen=True, slots=True)
class TresNames:
    """The TRES a site accounts beyond BASE_TRES, in its order (AccountingStorageTRES;
    slurmdbd matches names without case). None: the site sets none, and Caldera accounts
    every GRES (`gres/gpu` first, every type) as it always has."""

    names: tuple[str, ...] | None = None

    def _rank(self, name: str) -> tuple[int, str] | None:
        """(TRES id order, the name as the site spells it), or None when not accounted."""
        if name in BASE_TRES:
            return BASE_TRES.index(name), name
        if self.names is None:
            if not name.startswith("gres/"):
                return None
            return len(BASE_TRES) + (name != "gres/gpu"), name
        lowered = [n.lower() for n in self.names]
        if name.lower() not in lowered:
            return None
        i = lowered.index(name.lower())
        return len(BASE_TRES) + i, self.names[i]

    def render(self, counts: Mapping[str, int]) -> str:
        """`cpu=2,mem=200M,node=1,billing=2,gres/gpu=1,gres/gpu:a100=1` (scontrol's order;
        memory in MiB, shown with its unit)."""
        kept = sorted((r, n) for n in counts if (r := self._rank(n)) is not None)
        return ",".join(
            f"{shown}={convert_num_unit(counts[n], UNIT_MEGA) if n == 'mem' else counts[n]}"
            for (_, shown), n in kept
        )


TresCounts = dict[str, int]


def count_gres(counts: TresCounts, item: GresItem, count: int, node_type: str | None) -> None:
    """Add `count` of the item to `counts`: `gres/gpu`, and `gres/gpu:<type>` with the type
    the request named, else (an allocation) the type of the node's GPUs, if any."""
    gtype = item.type or (node_type if item.name == "gpu" else None)
    for key in (f"gres/{item.name}", f"gres/{item.name}:{gtype}" if gtype else ""):
        if key:
            counts[key] = counts.get(key, 0) + count


def licence_counts(text: str | None) -> Iterable[tuple[str, int]]:
    """`-L`'s licences as TRES (`license/matlab`, 2)."""
    return [(f"license/{name}", n) for name, n in (license_request(text) or {}).items()]


def recorded_count(text: str | None, digits: int = 15) -> int | None:
    """A count a local step recorded (its user's file): up to `digits` ASCII digits, else
    None."""
    if not text or len(text) > digits or not (text.isascii() and text.isdigit()):
        return None
    return int(text)


def recorded_gpus(text: str | None, nodes: int) -> list[int] | None:
    """The GPUs a local step recorded on each of its `nodes` (`2,1`); None unless it is
    that many small counts (the record is its user's file)."""
    parts = (text or "").split(",")
    counts = [recorded_count(p, 5) for p in parts]
    if not text or len(parts) != nodes or None in counts:
        return None
    return [c for c in counts if c is not None]


def _node_gres(counts: TresCounts, node: Node, gpus: int | None = None) -> None:
    """The node's GRES (its GPUs in use instead, when `gpus` is given), with their types."""
    for name, gtype, count in node.gres:
        if gpus is not None and name != "gpu":
            continue
        n = count if gpus is None else gpus
        for key in (f"gres/{name}", f"gres/{name}:{gtype}" if gtype else ""):
            if key and n:
                counts[key] = counts.get(key, 0) + n


def node_tres(node: Node, names: TresNames) -> str:
    """scontrol's CfgTRES of a node: `cpu=2,mem=2000M,billing=2,gres/gpu=4,gres/gpu:a100=4`."""
    counts: TresCounts = {"cpu": node.cpus, "mem": node.memory_mb, "billing": node.cpus}
    _node_gres(counts, node)
    return names.render(counts)


def node_alloc_tres(node: Node, names: TresNames, cpus: int, memory_mb: int, gpus: int) -> str:
    """scontrol's AllocTRES of a node: what its jobs hold (`cpu=1,mem=300M,gres/gpu=2,
    gres/gpu:a100=2`, no billing); empty when nothing."""
    counts: TresCounts = {k: v for k, v in (("cpu", cpus), ("mem", memory_mb)) if v}
    if gpus:
        _node_gres(counts, node, gpus)
    return names.render(counts)


def partition_tres(
    nodes: Iterable[Node], names: TresNames, licenses: Iterable[tuple[str, int]] = ()
) -> str:
    """scontrol's partition TRES: its nodes' sums and the site's licences (`cpu=8,mem=8000M,
    node=4,billing=8,gres/gpu=6,gres/gpu:a100=4,license/cscratch1=1000`)."""
    counts: TresCounts = {"cpu": 0, "mem": 0, "node": 0, "billing": 0}
    for node in nodes:
        counts["cpu"] += node.cpus
        counts["mem"] += node.memory_mb
        counts["node"] += 1
        counts["billing"] += node.cpus
        _node_gres(counts, node)
    counts.update((f"license/{name}", total) for name, total in licenses)
    return names.render(counts)
