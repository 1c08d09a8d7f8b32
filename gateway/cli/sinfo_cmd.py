"""`sinfo`: nodes and partitions, as Slurm prints them."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from gateway.cli.common import GatewayError, call, write_out
from gateway.cli.node_view import nodes_view, partitions_extras
from gateway.cli.opts import CmdOption, CmdUsageError, parse_command
from gateway.compat.clusters import ClusterSelectError, blocks, choose_clusters, split_state
from gateway.compat.fmt_common import NodeExtras
from gateway.compat.options_help import version_text
from gateway.compat.sinfo_fmt import render_sinfo
from gateway.compat.sinfo_fmt_group import SinfoOptions
from gateway.model.cluster import ClusterState

__all__ = ["main"]

_PROG = "sinfo"
OPTIONS = (
    CmdOption("all", "a", 0, "all"),
    CmdOption("dead", "d", 0, "dead"),
    CmdOption("exact", "e", 0, "exact"),
    CmdOption("federation", None, 0, "federation"),
    CmdOption("help", None, 0, "help"),
    CmdOption("hide", None, 0, "hide"),
    CmdOption("iterate", "i", 1, "iterate"),
    CmdOption("local", None, 0, "local"),
    CmdOption("long", "l", 0, "long"),
    CmdOption("cluster", None, 1, "clusters"),
    CmdOption("clusters", "M", 1, "clusters"),
    CmdOption("nodes", "n", 1, "nodes"),
    CmdOption("noconvert", None, 0, "noconvert"),
    CmdOption("noheader", "h", 0, "noheader"),
    CmdOption("Node", "N", 0, "node_view"),
    CmdOption("format", "o", 1, "format"),
    CmdOption("Format", "O", 1, "format_long"),
    CmdOption("partition", "p", 1, "partition"),
    CmdOption("responding", "r", 0, "responding"),
    CmdOption("list-reasons", "R", 0, "reasons"),
    CmdOption("summarize", "s", 0, "summarize"),
    CmdOption("sort", "S", 1, "sort"),
    CmdOption("states", "t", 1, "states"),
    CmdOption("reservation", "T", 0, "reservation"),
    CmdOption("usage", None, 0, "usage"),
    CmdOption("verbose", "v", 0, "verbose"),
    CmdOption("version", "V", 0, "version"),
    CmdOption("json", None, 0, "json"),
    CmdOption("yaml", None, 0, "yaml"),
)


def _split(text: str | None) -> tuple[str, ...]:
    return tuple(p for p in (text or "").split(",") if p)


# sinfo -R (opts.c): nodes that are down, failed or drained, grouped by reason
_REASONS = "%20E %9u %19H %N"
_REASONS_LONG = "%20E %12U %19H %6t %N"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `sinfo` command."""
    args = [_PROG, *(sys.argv[1:] if argv is None else argv)]
    try:
        opts = parse_command(args, OPTIONS, _PROG)
    except CmdUsageError as exc:
        sys.stderr.write("\n".join(exc.lines) + "\n")
        return 1
    if opts.exit_option in ("help", "usage"):
        sys.stdout.write("Usage: sinfo [OPTIONS]\n")
        return 0
    if opts.exit_option == "version":
        sys.stdout.write(version_text())
        return 0
    try:
        data = call("GET", "/v1/nodes")
    except GatewayError as exc:
        sys.stderr.write(f"slurm_load_partitions: {exc}\n")
        return 1
    cluster, extras = nodes_view(data)
    if opts.flag("json") or opts.flag("yaml"):
        from gateway.compat.sinfo_fmt_json import sinfo_json

        write_out(sinfo_json(cluster, node_extras=extras) + "\n")
        return 0
    nodes: tuple[str, ...] = ()
    if opts.text("nodes"):
        from gateway.compat.hostlist import expand

        nodes = tuple(expand(opts.text("nodes") or ""))
    reasons = opts.flag("reasons") and not opts.text("format") and not opts.text("format_long")
    options = SinfoOptions(
        format=_REASONS_LONG
        if reasons and opts.flag("long")
        else _REASONS
        if reasons
        else opts.text("format"),
        format_long=opts.text("format_long"),
        long=opts.flag("long"),
        node_view=opts.flag("node_view"),
        summarize=opts.flag("summarize"),
        exact=opts.flag("exact"),
        noheader=opts.flag("noheader"),
        sort=opts.text("sort"),
        partitions=_split(opts.text("partition")),
        nodes=nodes,
        states=_split(opts.text("states"))
        or (("down", "fail", "drain") if opts.flag("reasons") else ()),
        responding=opts.flag("responding"),
        dead=opts.flag("dead"),
    )
    now = float(data["now"])
    if opts.text("clusters") is None:
        pex = partitions_extras(cluster, data)
        write_out(render_sinfo(cluster, options, now=now, node_extras=extras, partition_extras=pex))
        return 0
    return _by_cluster(opts.text("clusters") or "", data, cluster, options, extras, now)


def _by_cluster(
    text: str,
    data: dict[str, Any],
    site: ClusterState,
    options: SinfoOptions,
    extras: dict[str, NodeExtras],
    now: float,
) -> int:
    """sinfo -M list|all: each cluster's partitions and nodes under `CLUSTER: name`."""
    try:
        choice = choose_clusters(_PROG, text, data["site"].get("clusters") or [site.name])
    except ClusterSelectError as exc:
        sys.stderr.write(exc.stderr)
        return exc.exit_code
    sys.stderr.write(choice.stderr)
    owner = {str(n["name"]): str(n.get("cluster", site.name)) for n in data["nodes"]}
    views = split_state(site, owner, choice.names)
    parts = [
        (name, render_sinfo(views[name], options, now=now, node_extras=extras))
        for name in choice.names
    ]
    write_out(blocks(parts, options.noheader))
    return 0


if __name__ == "__main__":
    sys.exit(main())
