"""`ibnetdiscover` output (infiniband-diags) -> fabric -> switch tree.

The parser reads the default topology-file format::

    switchguid=0xb8599f0300e10000(b8599f0300e10000)
    Switch  64 "S-b8599f0300e10000"   # "MF0;leaf01:MQM9700/U1" enhanced port 0 lid 2 lmc 0
    [1]     "H-b8599f0300010000"[1](b8599f0300010000)   # "gpu01 mlx5_0" lid 16 4xNDR
    [33]    "S-b8599f0300f10000"[1]         # "MF0;spine01:MQM9700/U1" lid 1 4xNDR

    caguid=0xb8599f0300010000
    Ca      1 "H-b8599f0300010000"          # "gpu01 mlx5_0"
    [1](b8599f0300010000)   "S-b8599f0300e10000"[1]   # lid 16 lmc 0 "MF0;leaf01:..." lid 2 4xNDR

Leaf switches are the switches cabled to a host adapter; each further level is the set of
switches one hop above the previous one. A host's leaf is the leaf of its first adapter (in
device order): on a rail-optimised fabric, where adapter k of every host of a scalable unit
goes to leaf k, that groups the unit's hosts on rail 0's leaf.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gateway.model.topology import Switch, Topology

__all__ = [
    "Fabric",
    "IbLink",
    "IbNode",
    "parse_ibnetdiscover",
    "read_ibnetdiscover",
    "switch_name",
    "topology_from_fabric",
]


@dataclass(frozen=True, slots=True)
class IbLink:
    """One cabled port: local port -> remote node GUID and port."""

    port: int
    remote_guid: str
    remote_port: int
    remote_kind: str  # S, H or R
    remote_desc: str = ""
    speed: str = ""  # 4xNDR


@dataclass(frozen=True, slots=True)
class IbNode:
    """A switch, channel adapter or router of the fabric."""

    kind: str  # Switch, Ca, Rt
    guid: str  # 16 hex digits, lower case
    ports: int
    desc: str = ""
    lid: int = 0
    links: tuple[IbLink, ...] = ()


@dataclass(frozen=True, slots=True)
class Fabric:
    """Every node ibnetdiscover saw, by GUID."""

    nodes: Mapping[str, IbNode]

    @property
    def switches(self) -> tuple[IbNode, ...]:
        return tuple(n for n in self.nodes.values() if n.kind == "Switch")

    @property
    def adapters(self) -> tuple[IbNode, ...]:
        return tuple(n for n in self.nodes.values() if n.kind == "Ca")


_NODE = re.compile(r'^(Switch|Ca|Rt)\s+(\d+)\s+"([SHR])-([0-9a-fA-F]+)"\s*(?:#\s*"([^"]*)"(.*))?$')
_PORT = re.compile(
    r"^\[(\d+)\](?:\[ext \d+\])?(?:\(([0-9a-fA-F]+)\))?\s+"
    r'"([SHR])-([0-9a-fA-F]+)"\[(\d+)\](?:\[ext \d+\])?(?:\(([0-9a-fA-F]+)\))?'
    r"\s*(?:#\s*(.*))?$"
)
_QUOTED = re.compile(r'"([^"]*)"')
_LID = re.compile(r"\blid (\d+)")
_SPEED = re.compile(r"\b(\d+x[A-Z]+)\s*$")


def _guid(text: str) -> str:
    return f"{int(text, 16):016x}"


def parse_ibnetdiscover(text: str) -> Fabric:
    """Parse ibnetdiscover's output into a Fabric."""
    nodes: dict[str, IbNode] = {}
    current: IbNode | None = None
    links: list[IbLink] = []

    def close() -> None:
        nonlocal current, links
        if current is not None:
            nodes[current.guid] = IbNode(
                current.kind, current.guid, current.ports, current.desc, current.lid, tuple(links)
            )
        current, links = None, []

    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            close()
            continue
        if line.startswith("#"):
            continue
        node = _NODE.match(line)
        if node:
            close()
            kind, nports, _, guid, desc, rest = node.groups()
            lid = _LID.search(rest or "")
            current = IbNode(
                kind, _guid(guid), int(nports), desc or "", int(lid.group(1)) if lid else 0
            )
            continue
        port = _PORT.match(line)
        if port and current is not None:
            lport, _, rkind, rguid, rport, _, comment = port.groups()
            comment = comment or ""
            quoted = _QUOTED.search(comment)
            speed = _SPEED.search(comment)
            links.append(
                IbLink(
                    int(lport),
                    _guid(rguid),
                    int(rport),
                    rkind,
                    quoted.group(1) if quoted else "",
                    speed.group(1) if speed else "",
                )
            )
    close()
    return Fabric(nodes)


def read_ibnetdiscover(path: str | Path) -> Fabric:
    """Parse a captured `ibnetdiscover > FILE`."""
    return parse_ibnetdiscover(Path(path).read_text())


_MF0 = re.compile(r"^MF0;([^:]+):")
_CLEAN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def switch_name(node: IbNode, taken: Mapping[str, int]) -> str:
    """A topology.conf-safe name: the operator's name from the node description
    (`MF0;leaf01:MQM9700/U1` -> `leaf01`, or a one-word description), else `ibsw-<guid>`."""
    match = _MF0.match(node.desc)
    name = match.group(1) if match else node.desc.strip()
    if _CLEAN.match(name) and taken.get(name, 0) <= 1:
        return name
    return f"ibsw-{node.guid}"


def topology_from_fabric(fabric: Fabric, host_of: Mapping[str, str] | None = None) -> Topology:
    """A switch tree from a fabric.

    `host_of` maps adapter GUIDs to node names (from the agents' inventories); adapters not
    in it are named by the first word of their description (`"gpu01 mlx5_0"` -> gpu01)."""
    switches = {s.guid: s for s in fabric.switches}
    counts: dict[str, int] = {}
    for sw in switches.values():
        m = _MF0.match(sw.desc)
        key = m.group(1) if m else sw.desc.strip()
        counts[key] = counts.get(key, 0) + 1
    names = {g: switch_name(sw, counts) for g, sw in switches.items()}
    # each host's adapters, in device order (desc "host mlx5_3")
    host_adapters: dict[str, list[tuple[str, IbNode]]] = {}
    for ca in fabric.adapters:
        words = ca.desc.split()
        host = (host_of or {}).get(ca.guid) or (words[0] if words else f"ca-{ca.guid}")
        dev = words[1] if len(words) > 1 else ""
        host_adapters.setdefault(host, []).append((dev, ca))
    leaf_nodes: dict[str, list[str]] = {}
    for host in sorted(host_adapters):
        adapters = sorted(host_adapters[host], key=lambda t: (_natural(t[0]), t[1].guid))
        for _, ca in adapters:
            uplink = next((lk for lk in ca.links if lk.remote_guid in switches), None)
            if uplink is not None:
                leaf_nodes.setdefault(uplink.remote_guid, []).append(host)
                break
    level = dict.fromkeys(leaf_nodes, 0)
    frontier = list(leaf_nodes)
    children: dict[str, list[str]] = {g: [] for g in switches}
    while frontier:
        nxt: list[str] = []
        for guid in frontier:
            for lk in switches[guid].links:
                peer = lk.remote_guid
                if peer not in switches:
                    continue
                if peer not in level:
                    level[peer] = level[guid] + 1
                    nxt.append(peer)
                if level[peer] == level[guid] + 1 and guid not in children[peer]:
                    children[peer].append(guid)
        frontier = nxt
    ordered = sorted(level, key=lambda g: (level[g], names[g]))
    return Topology.tree(
        Switch(
            names[g],
            tuple(leaf_nodes.get(g, ())),
            tuple(sorted((names[c] for c in children[g]), key=_natural)),
        )
        for g in ordered
    )


def _natural(key: str) -> tuple[tuple[int, str], ...]:
    return tuple(
        (int(part), "") if part.isdigit() else (0, part) for part in re.split(r"(\d+)", key)
    )
