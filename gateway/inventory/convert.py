"""Agent inventories as the scheduler's Node values (gateway/model/cluster.py)."""

from __future__ import annotations

from dataclasses import replace

from gateway.inventory.messages import Heartbeat, Inventory, NicInfo
from gateway.model.cluster import Gpu, Nic, Node, NodeState
from gateway.topology.netenv import gpu_nic_label

__all__ = ["derived_features", "merge_inventory", "node_from_inventory"]

_MIB = 2**20


def derived_features(inv: Inventory) -> tuple[str, ...]:
    """Features a job can ask for with `-C`: `ib` (an ACTIVE InfiniBand port), `roce` (an
    ACTIVE RoCE port), `rdma` (either)."""
    kinds = {"roce" if n.link_layer == "Ethernet" else "ib" for n in inv.nics if n.active}
    return tuple(sorted(kinds)) + (("rdma",) if kinds else ())


def _gpus(inv: Inventory, hb: Heartbeat | None) -> tuple[Gpu, ...]:
    used = dict(hb.gpu_memory_used) if hb is not None else {}
    out = []
    for g in inv.gpus:
        if g.index in used and g.memory_total:
            free = max(g.memory_total - used[g.index], 0)
        else:
            free = g.memory_free
        out.append(
            Gpu(
                index=g.index,
                uuid=g.uuid,
                model=g.model,
                memory_total=g.memory_total,
                memory_free=free,
                numa_node=g.numa_node,
                pci_bus_id=g.pci_bus_id,
            )
        )
    return tuple(out)


def _nic(n: NicInfo) -> Nic:
    return Nic(
        device=n.device,
        port=n.port,
        state=n.state,
        link_layer=n.link_layer,
        rate_gbps=n.rate_gbps,
        guid=n.guid,
        numa_node=n.numa_node,
        netdev=n.netdev,
        pci_bus_id=n.pci_bus_id,
    )


def _labels(inv: Inventory) -> dict[str, str]:
    return {gpu_nic_label(i): port for i, port in inv.gpu_nic}


def merge_inventory(
    node: Node, inv: Inventory, hb: Heartbeat | None = None, *, switch: str | None = None
) -> Node:
    """A backend's Node with the agent's view added: GPUs (memory in bytes, free from the
    last heartbeat), RDMA ports, derived features, GPU->NIC pairing labels, and the leaf
    switch when given. The backend's cpus, memory, partitions and state are kept."""
    features = tuple(dict.fromkeys((*node.features, *derived_features(inv))))
    gres = node.gres
    if inv.gpus and not any(name == "gpu" for name, _, _ in gres):
        gres = (*gres, ("gpu", None, len(inv.gpus)))
    return replace(
        node,
        gpus=_gpus(inv, hb),
        nics=tuple(_nic(n) for n in inv.nics),
        features=features,
        gres=gres,
        switch=switch if switch is not None else node.switch,
        labels={**node.labels, **_labels(inv)},
    )


def node_from_inventory(
    inv: Inventory,
    hb: Heartbeat | None = None,
    *,
    state: NodeState = NodeState.IDLE,
    partitions: tuple[str, ...] = (),
    switch: str | None = None,
    reason: str | None = None,
) -> Node:
    """A Node from an agent's inventory alone (nodes no backend describes, e.g. local)."""
    base = Node(
        name=inv.node,
        cpus=inv.cpus,
        memory_mb=inv.memory_bytes // _MIB,
        state=state,
        partitions=partitions,
        sockets=inv.sockets,
        cores_per_socket=inv.cores_per_socket,
        threads_per_core=inv.threads_per_core,
        reason=reason,
    )
    return merge_inventory(base, inv, hb, switch=switch)
