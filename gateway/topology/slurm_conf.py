"""Slurm's topology.conf (topology/tree and topology/block forms) and `scontrol show topology`.

Tree form::

    SwitchName=leaf1 Nodes=node[01-32] LinkSpeed=200
    SwitchName=spine1 Switches=leaf[1-4]

Block form (Slurm >= 23.11)::

    BlockName=block1 Nodes=node[01-08]
    BlockSizes=8,16

Parameter names are case-insensitive, `#` starts a comment, a trailing backslash continues
a line, and names are Slurm hostlist expressions (`node[01-04,07]`).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from gateway.compat.hostlist import compress, expand
from gateway.model.topology import Block, Switch, Topology, TopologyError, TopologyKind

__all__ = [
    "parse_scontrol_topology",
    "parse_topology_conf",
    "read_topology_conf",
    "render_topology_conf",
]


def _logical_lines(text: str) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    pending = ""
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].rstrip()
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = (pending + line).strip()
        pending = ""
        if line:
            out.append((start, line))
    if pending.strip():
        out.append((start, pending.strip()))
    return out


def _pairs(line: str, lineno: int) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    try:
        words = shlex.split(line, posix=True)
    except ValueError as exc:
        raise TopologyError(f"line {lineno}: {exc}") from exc
    for word in words:
        key, sep, value = word.partition("=")
        if not sep:
            raise TopologyError(f"line {lineno}: expected Key=Value, got {word!r}")
        out.append((key.lower(), value))
    return out


def parse_topology_conf(text: str) -> Topology:
    """A Topology from topology.conf text (tree or block form)."""
    switches: list[Switch] = []
    blocks: list[Block] = []
    sizes: tuple[int, ...] = ()
    for lineno, line in _logical_lines(text):
        pairs = _pairs(line, lineno)
        head, name = pairs[0]
        fields = dict(pairs[1:])
        if head == "switchname":
            unknown = set(fields) - {"nodes", "switches", "linkspeed"}
            if unknown:
                raise TopologyError(f"line {lineno}: unknown parameter(s) {sorted(unknown)}")
            speed = fields.get("linkspeed")
            switches.append(
                Switch(
                    name,
                    tuple(expand(fields["nodes"])) if fields.get("nodes") else (),
                    tuple(expand(fields["switches"])) if fields.get("switches") else (),
                    int(speed) if speed else None,
                )
            )
        elif head == "blockname":
            if set(fields) - {"nodes"}:
                raise TopologyError(f"line {lineno}: BlockName takes only Nodes=")
            blocks.append(Block(name, tuple(expand(fields.get("nodes", "")))))
        elif head == "blocksizes":
            try:
                sizes = tuple(int(x) for x in name.split(",") if x)
            except ValueError as exc:
                raise TopologyError(f"line {lineno}: bad BlockSizes {name!r}") from exc
        else:
            raise TopologyError(f"line {lineno}: unknown parameter {head!r}")
    if switches and blocks:
        raise TopologyError("a topology.conf has either SwitchName or BlockName lines, not both")
    if blocks:
        return Topology.block(blocks, sizes)
    return Topology.tree(switches)


def read_topology_conf(path: str | Path) -> Topology:
    """Read a topology.conf file."""
    return parse_topology_conf(Path(path).read_text())


def render_topology_conf(topo: Topology, *, header: str | None = None) -> str:
    """topology.conf text for a topology (leaf switches first, then upward by level)."""
    lines: list[str] = []
    if header:
        lines.extend(f"# {h}" if h else "#" for h in header.splitlines())
    if topo.kind is TopologyKind.BLOCK:
        for blk in topo.blocks:
            lines.append(f"BlockName={blk.name} Nodes={compress(blk.nodes)}")
        if topo.block_sizes:
            lines.append("BlockSizes=" + ",".join(str(s) for s in topo.block_sizes))
        return "\n".join(lines) + "\n"
    order = sorted(range(len(topo.switches)), key=lambda i: (topo.level(topo.switches[i].name), i))
    for i in order:
        sw = topo.switches[i]
        _check_name(sw.name)
        words = [f"SwitchName={sw.name}"]
        if sw.nodes:
            words.append(f"Nodes={compress(sw.nodes)}")
        if sw.switches:
            words.append(f"Switches={compress(sw.switches)}")
        if sw.link_speed is not None:
            words.append(f"LinkSpeed={sw.link_speed}")
        lines.append(" ".join(words))
    return "\n".join(lines) + "\n"


_BAD_NAME = re.compile(r"[\s,=#\[\]\"']")


def _check_name(name: str) -> None:
    if not name or _BAD_NAME.search(name):
        raise TopologyError(f"switch name {name!r} cannot be written to topology.conf")


_SCONTROL_LINE = re.compile(r"^SwitchName=(\S+)\s+Level=(\d+)")


def parse_scontrol_topology(text: str) -> Topology:
    """A Topology from `scontrol show topology` output (Slurm 22.05 tree form).

    Upper switches list every node below them there; only leaves (Level=0) keep nodes."""
    switches: list[Switch] = []
    for line in text.splitlines():
        match = _SCONTROL_LINE.match(line.strip())
        if not match:
            continue
        fields = dict(w.split("=", 1) for w in line.split() if "=" in w)
        level = int(match.group(2))
        nodes = tuple(expand(fields["Nodes"])) if fields.get("Nodes") and level == 0 else ()
        kids = tuple(expand(fields["Switches"])) if fields.get("Switches") else ()
        speed = fields.get("LinkSpeed")
        switches.append(Switch(match.group(1), nodes, kids, int(speed) if speed else None))
    return Topology.tree(switches)
