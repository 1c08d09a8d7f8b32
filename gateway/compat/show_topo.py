"""`scontrol show topology [NAME]` as Slurm 22.05 prints it (src/scontrol/info_node.c,
src/api/topo_info.c): one line per switch in topology.conf's order, `SwitchName= Level=
LinkSpeed=` (1 unless given), `Nodes=` (a leaf's as written; an upper switch's every node
below it, sorted) and `Switches=`. NAME is a switch name, else a node list: every switch
above all of its nodes; neither is an error on stderr with exit code 0, as scontrol's.
Pure: the switch records in, text out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gateway.compat.hostlist import HostlistError, compress, compress_sorted, expand
from gateway.model.topology import Topology, TopologyKind

__all__ = ["TopoRecord", "show_topology", "topology_records"]

NO_TOPOLOGY = "No topology information available"
NO_MATCH = "Topology information contains no switch or node named"


@dataclass(frozen=True, slots=True)
class TopoRecord:
    """One switch as slurmctld sends it (slurm_load_topo)."""

    name: str
    level: int
    link_speed: int
    nodes: str
    switches: str

    def line(self) -> str:
        """slurm_print_topo_record's line (the same with -o)."""
        words = [f"SwitchName={self.name} Level={self.level} LinkSpeed={self.link_speed}"]
        if self.nodes:
            words.append(f"Nodes={self.nodes}")
        if self.switches:
            words.append(f"Switches={self.switches}")
        return " ".join(words)


def topology_records(topo: Topology | None) -> list[TopoRecord]:
    """The switch records of a topology.conf tree (none for no tree or a block topology)."""
    if topo is None or topo.kind is not TopologyKind.TREE:
        return []
    return [
        TopoRecord(
            sw.name,
            topo.level(sw.name),
            sw.link_speed if sw.link_speed is not None else 1,
            compress(sw.nodes) if sw.nodes else compress_sorted(topo.nodes_in(sw.name)),
            compress(sw.switches),
        )
        for sw in topo.switches
    ]


def show_topology(records: Sequence[TopoRecord], name: str | None) -> tuple[str, str]:
    """(stdout, stderr) of `scontrol show topology [name]`; the exit code is always 0."""
    if not records:
        return "", f"scontrol: error: {NO_TOPOLOGY}\n"
    if not name:
        return "".join(r.line() + "\n" for r in records), ""
    for rec in records:
        if rec.name == name:
            return rec.line() + "\n", ""
    try:
        wanted = set(expand(name))
    except HostlistError:
        wanted = set()
    matched = [r for r in records if r.nodes and wanted and wanted <= set(expand(r.nodes))]
    if not matched:
        return "", f"scontrol: error: {NO_MATCH} {name}\n"
    return "".join(r.line() + "\n" for r in matched), ""
