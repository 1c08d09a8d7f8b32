"""Topology from agent discovery: what each node agent learnt from `ibnetdiscover`.

Every agent reports the cables of its own adapters (`Inventory.links`: local device and GUID
-> switch GUID, port and description); agents configured as fabric reporters also send the
switch-to-switch links. Together they make a Fabric, from which the tree is derived exactly
as from a full ibnetdiscover capture.
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.inventory.messages import FabricLink, Inventory
from gateway.model.topology import Topology
from gateway.topology.ibnetdiscover import Fabric, IbLink, IbNode, topology_from_fabric

__all__ = ["fabric_from_inventories", "links_for_node", "topology_from_inventories"]


def fabric_from_inventories(inventories: Iterable[Inventory]) -> tuple[Fabric, dict[str, str]]:
    """The fabric the agents saw, and adapter GUID -> node name."""
    nodes: dict[str, IbNode] = {}
    host_of: dict[str, str] = {}
    switch_links: dict[str, list[IbLink]] = {}
    descs: dict[str, str] = {}
    for inv in inventories:
        descs.update(dict(inv.switch_names))
        for a, b in inv.switch_links:
            switch_links.setdefault(a, []).append(IbLink(0, b, 0, "S"))
            switch_links.setdefault(b, []).append(IbLink(0, a, 0, "S"))
        by_guid: dict[str, list[FabricLink]] = {}
        for lk in inv.links:
            by_guid.setdefault(lk.guid, []).append(lk)
            descs.setdefault(lk.switch_guid, lk.switch_desc)
            switch_links.setdefault(lk.switch_guid, [])
        for guid, lks in by_guid.items():
            device = lks[0].device
            host_of[guid] = inv.node
            nodes[guid] = IbNode(
                "Ca",
                guid,
                len(lks),
                f"{inv.node} {device}".strip(),
                0,
                tuple(IbLink(lk.port, lk.switch_guid, lk.switch_port, "S") for lk in lks),
            )
            for lk in lks:
                switch_links[lk.switch_guid].append(IbLink(lk.switch_port, guid, lk.port, "H"))
    for guid, sw_links in switch_links.items():
        nodes[guid] = IbNode("Switch", guid, 0, descs.get(guid, ""), 0, tuple(sw_links))
    return Fabric(nodes), host_of


def topology_from_inventories(inventories: Iterable[Inventory]) -> Topology:
    """The switch tree the agents' reports describe."""
    fabric, host_of = fabric_from_inventories(inventories)
    return topology_from_fabric(fabric, host_of)


def links_for_node(
    fabric: Fabric, guids: Iterable[str], devices: dict[str, str] | None = None
) -> tuple[tuple[FabricLink, ...], tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]:
    """What an agent reports from a fabric: its adapters' cables (`guids` are its node
    GUIDs, `devices` GUID -> device name), every switch-to-switch link and switch names."""
    wanted = set(guids)
    names = devices or {}
    links: list[FabricLink] = []
    for ca in fabric.adapters:
        if ca.guid not in wanted:
            continue
        for lk in ca.links:
            if lk.remote_kind == "S":
                links.append(
                    FabricLink(
                        names.get(ca.guid, ca.desc.split()[-1] if ca.desc else ""),
                        lk.port,
                        ca.guid,
                        lk.remote_guid,
                        lk.remote_port,
                        lk.remote_desc,
                    )
                )
    pairs: set[tuple[str, str]] = set()
    for sw in fabric.switches:
        for lk in sw.links:
            if lk.remote_kind == "S":
                a, b = sorted((sw.guid, lk.remote_guid))
                pairs.add((a, b))
    switch_names = tuple(sorted((s.guid, s.desc) for s in fabric.switches))
    return tuple(links), tuple(sorted(pairs)), switch_names
