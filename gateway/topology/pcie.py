"""GPU <-> NIC affinity inside a node, from PCI paths and NUMA nodes.

Distances follow NCCL's path classes: PIX (behind one PCIe switch), PXB (several bridges
below one root port), PHB (through the host bridge of one root complex), NODE (another
root complex of the same NUMA node), SYS (across the CPU interconnect). A GPU is paired
with the nearest active port; ties go to the port with the fewest GPUs already paired, then
device order, so an 8-GPU/4-NIC node gets two GPUs per NIC.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

__all__ = ["PathClass", "PciDev", "pair", "path_class"]


class PathClass(IntEnum):
    """How far two PCI devices are apart (lower is nearer)."""

    PIX = 0
    PXB = 1
    PHB = 2
    NODE = 3
    SYS = 4


@dataclass(frozen=True, slots=True)
class PciDev:
    """A device for pairing: a key (GPU index or `mlx5_0:1`), NUMA node and PCI path."""

    key: str
    numa_node: int = -1
    pci_path: tuple[str, ...] = ()  # host bridge, bridges..., the device itself
    active: bool = True


def _common(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    n = 0
    for x, y in zip(a[:-1], b[:-1], strict=False):
        if x != y:
            break
        n += 1
    return n


def path_class(a: PciDev, b: PciDev) -> tuple[PathClass, int]:
    """The class of the path between two devices and its length in PCI hops."""
    common = _common(a.pci_path, b.pci_path) if a.pci_path and b.pci_path else 0
    hops = len(a.pci_path) + len(b.pci_path) - 2 * common
    if common >= 3:
        return PathClass.PIX, hops
    if common == 2:
        return PathClass.PXB, hops
    if common == 1:
        return PathClass.PHB, hops
    if a.numa_node >= 0 and a.numa_node == b.numa_node:
        return PathClass.NODE, hops
    return PathClass.SYS, hops


def _natural(key: str) -> tuple[tuple[int, str], ...]:
    return tuple(
        (int(part), "") if part.isdigit() else (0, part) for part in re.split(r"(\d+)", key)
    )


def pair(gpus: Sequence[PciDev], nics: Sequence[PciDev]) -> dict[str, str]:
    """GPU key -> the key of its nearest NIC port (inactive ports only when none is up)."""
    usable = [n for n in nics if n.active] or list(nics)
    if not usable:
        return {}
    load = {n.key: 0 for n in usable}
    out: dict[str, str] = {}
    for gpu in gpus:
        best = min(
            usable,
            key=lambda n: (*path_class(gpu, n), load[n.key], _natural(n.key)),
        )
        out[gpu.key] = best.key
        load[best.key] += 1
    return out
