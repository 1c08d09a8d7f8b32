"""Per-node GPU/NIC pairing and the environment a rank needs to use them.

Pure functions the backends call once a gang is placed:

- `gpu_nic_map(node)`: GPU index -> RDMA port (`mlx5_3:1`), from the pairing the node's
  agent computed from PCI paths (`Node.labels["nic.caldera.io/gpu<i>"]`), else by NUMA node;
- `choose_gpus(node, free, count, min_bytes)`: which free GPUs to give a job (enough memory,
  and spread over as few NICs/NUMA nodes as the count allows);
- `network_env(node, gpus)`: CUDA_VISIBLE_DEVICES, NCCL_IB_HCA and UCX_NET_DEVICES for the
  GPUs a job got on that node (the NICs paired with them, in GPU order);
- `with_nics(placement, nodes)`: RankPlacement records with their `nics` filled in.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from gateway.model.cluster import Gpu, Nic, Node
from gateway.model.job import RankPlacement
from gateway.topology.pcie import PciDev, pair

__all__ = [
    "GPU_NIC_LABEL",
    "NodeNetwork",
    "choose_gpus",
    "gpu_nic_label",
    "gpu_nic_map",
    "network_env",
    "rdma_kinds",
    "with_nics",
]

GPU_NIC_LABEL = "nic.caldera.io/gpu"  # + GPU index -> "mlx5_3:1"

RdmaKind = Literal["ib", "roce"]


def gpu_nic_label(index: int) -> str:
    """The Node label holding the RDMA port paired with GPU `index`."""
    return f"{GPU_NIC_LABEL}{index}"


def _port(nic: Nic) -> str:
    return f"{nic.device}:{nic.port}"


def _active(nic: Nic) -> bool:
    return nic.state.upper().startswith("ACTIVE")


def _kind(nic: Nic) -> RdmaKind:
    return "roce" if nic.link_layer.lower() == "ethernet" else "ib"


def rdma_kinds(node: Node) -> frozenset[str]:
    """`ib` and/or `roce` for the node's ACTIVE RDMA ports."""
    return frozenset(_kind(n) for n in node.nics if _active(n))


def _usable(node: Node, kind: RdmaKind | None) -> list[Nic]:
    nics = [n for n in node.nics if kind is None or _kind(n) == kind]
    return [n for n in nics if _active(n)] or nics


def gpu_nic_map(node: Node, kind: RdmaKind | None = None) -> dict[int, Nic]:
    """GPU index -> its paired RDMA port: the agent's PCIe pairing when the node has it
    (and that port is usable), else the nearest by NUMA node."""
    usable = _usable(node, kind)
    if not usable or not node.gpus:
        return {}
    by_port = {_port(n): n for n in usable}
    out: dict[int, Nic] = {}
    missing: list[Gpu] = []
    for gpu in node.gpus:
        nic = by_port.get(node.labels.get(gpu_nic_label(gpu.index), ""))
        if nic is not None and _active(nic):
            out[gpu.index] = nic
        else:
            missing.append(gpu)
    if missing:
        paired = pair(
            [PciDev(str(g.index), g.numa_node) for g in missing],
            [PciDev(_port(n), n.numa_node, (), _active(n)) for n in usable],
        )
        for gpu in missing:
            out[gpu.index] = by_port[paired[str(gpu.index)]]
    return out


def _fits(gpu: Gpu, min_bytes: int) -> bool:
    if min_bytes <= 0:
        return True
    if gpu.memory_total < min_bytes:
        return False
    # memory_free 0 means "not reported"; otherwise another process may hold memory
    return gpu.memory_free == 0 or gpu.memory_free >= min_bytes


def choose_gpus(
    node: Node, free: Collection[int], count: int, min_bytes: int = 0
) -> tuple[int, ...] | None:
    """`count` of the `free` GPU indices with at least `min_bytes` each, packed onto as few
    NICs and NUMA nodes as possible (lowest indices on ties); None when they do not fit.

    A node without GPU inventory (gres only) gets the lowest free indices when no memory is
    asked for, None otherwise."""
    if count <= 0:
        return ()
    if not node.gpus:
        if min_bytes > 0 or len(free) < count:
            return None
        return tuple(sorted(free)[:count])
    fitting = [g for g in node.gpus if g.index in free and _fits(g, min_bytes)]
    if len(fitting) < count:
        return None
    nic_of = gpu_nic_map(node)
    groups: dict[tuple[int, str], list[int]] = {}
    for g in fitting:
        nic = nic_of.get(g.index)
        groups.setdefault((g.numa_node, _port(nic) if nic else ""), []).append(g.index)
    # fill from the fullest NIC group, staying on one NUMA node while it has enough
    by_numa: dict[int, list[list[int]]] = {}
    for (numa, _), idx in sorted(groups.items()):
        by_numa.setdefault(numa, []).append(sorted(idx))
    numa_order = sorted(
        by_numa,
        key=lambda n: (sum(len(x) for x in by_numa[n]) < count, -sum(map(len, by_numa[n])), n),
    )
    chosen: list[int] = []
    for numa in numa_order:
        for idx in sorted(by_numa[numa], key=lambda x: (-len(x), x[0])):
            chosen.extend(idx[: count - len(chosen)])
            if len(chosen) == count:
                return tuple(sorted(chosen))
    return None


@dataclass(frozen=True, slots=True)
class NodeNetwork:
    """What one node's share of a job uses: GPUs, RDMA ports and the environment."""

    node: str
    gpus: tuple[int, ...]
    nics: tuple[str, ...]  # "mlx5_0:1", in GPU order, no duplicates
    env: dict[str, str]


def network_env(
    node: Node,
    gpus: Sequence[int],
    *,
    kind: RdmaKind | None = None,
    cuda: Literal["index", "uuid", "none"] = "index",
) -> NodeNetwork:
    """The GPUs' paired NICs and CUDA_VISIBLE_DEVICES / NCCL_IB_HCA / UCX_NET_DEVICES.

    `cuda="uuid"` names GPUs by UUID (stable across container renumbering), `"none"` leaves
    CUDA_VISIBLE_DEVICES out (a container runtime that exposes only the job's GPUs already
    renumbers them from 0). A CPU-only share (no GPUs) gets every usable port of the node.
    NCCL_IB_HCA uses the exact-match form (`=mlx5_0:1,...`), so mlx5_1 does not also select
    mlx5_10..mlx5_17."""
    env: dict[str, str] = {}
    if gpus and cuda != "none":
        if cuda == "uuid":
            uuids = {g.index: g.uuid for g in node.gpus}
            env["CUDA_VISIBLE_DEVICES"] = ",".join(uuids.get(i) or str(i) for i in gpus)
        else:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in gpus)
    ports: list[str] = []
    if gpus:
        nic_of = gpu_nic_map(node, kind)
        for i in gpus:
            nic = nic_of.get(i)
            if nic is not None and _port(nic) not in ports:
                ports.append(_port(nic))
    else:
        ports = [_port(n) for n in _usable(node, kind)]
    if ports:
        env["NCCL_IB_HCA"] = "=" + ",".join(ports)
        env["UCX_NET_DEVICES"] = ",".join(ports)
    return NodeNetwork(node.name, tuple(gpus), tuple(ports), env)


def with_nics(
    placement: Sequence[RankPlacement], nodes: Mapping[str, Node], kind: RdmaKind | None = None
) -> tuple[RankPlacement, ...]:
    """The placement with each node's paired RDMA ports in `RankPlacement.nics`."""
    out: list[RankPlacement] = []
    for rank in placement:
        node = nodes.get(rank.node)
        if node is None:
            out.append(rank)
            continue
        out.append(replace(rank, nics=network_env(node, rank.gpus, kind=kind).nics))
    return tuple(out)
