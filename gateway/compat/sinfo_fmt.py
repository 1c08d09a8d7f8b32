"""sinfo's output, as Slurm 22.05 prints it: one field table, `-o`/`-O`, grouping, views.

sinfo folds nodes into records: per partition (when a partition field is shown), nodes
whose printed attributes agree share a record (the state string in the default view, so
`debug*  up  infinite  100  down* big[001-100]` and the idle nodes on the next line).
`SINFO_FIELDS` declares each field once with the grouping key it implies; the views are
the default, `-N`, `-l`, `-s` and `-o`/`-O` formats, sorted `#P,-t` (partition order,
then state number descending) or `N` with `-N`.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.compat.fmt_common import (
    NodeExtras,
    PartitionExtras,
    byte_len,
    ctime_str,
    hostlist_compress,
)
from gateway.compat.sinfo_fmt_fields import (
    SINFO_FIELDS,
    FormatItem,
    SinfoField,
    SinfoRecord,
    _Ctx,
    _partition,
    _print_str,
    parse_sinfo_format,
    parse_sinfo_long_format,
)
from gateway.compat.sinfo_fmt_group import MIN_FIELD, SinfoOptions, format_items, sinfo_records
from gateway.model.cluster import ClusterState

__all__ = [
    "SINFO_FIELDS",
    "FormatItem",
    "SinfoField",
    "SinfoOptions",
    "SinfoRecord",
    "format_items",
    "parse_sinfo_format",
    "parse_sinfo_long_format",
    "render_sinfo",
    "sinfo_records",
]


# --- rendering --------------------------------------------------------------------------


def _render(item: FormatItem, r: SinfoRecord | None, ctx: _Ctx) -> str:
    f = item.field
    if f is None:
        return item.suffix
    width = item.width
    if f.letter in ("P", "R") and ctx.part_width is not None:
        width = ctx.part_width
    if f.letter in ("N", "n") and ctx.node_width is not None:
        width = ctx.node_width
    if r is None:
        text = _print_str(f.header, width, item.right, f.header_cut)
    else:
        value = _partition(r, ctx, width) if f.letter == "P" else f.value(r, ctx)
        text = _print_str(value, width, item.right, True)
    return text + item.suffix


def render_sinfo(
    cluster: ClusterState,
    opts: SinfoOptions | None = None,
    *,
    now: float,
    node_extras: Mapping[str, NodeExtras] | None = None,
    partition_extras: Mapping[str, PartitionExtras] | None = None,
) -> str:
    """sinfo's full text output (each line ends with a newline)."""
    opts = opts or SinfoOptions()
    items, part_auto, node_auto = format_items(opts)
    records = sinfo_records(
        cluster, opts, node_extras=node_extras, partition_extras=partition_extras, items=items
    )
    part_width = node_width = None
    if part_auto:
        part_width = max(
            [MIN_FIELD]
            + [byte_len(r.part.name) + (1 if r.part.default else 0) for r in records if r.part]
        )
    if node_auto:
        node_width = max([MIN_FIELD] + [byte_len(hostlist_compress(r.nodes)) for r in records])
    ctx = _Ctx(part_width, node_width)
    lines: list[str] = []
    if not opts.noheader:
        if opts.long:
            lines.append(ctime_str(now))
        lines.append("".join(_render(i, None, ctx) for i in items))
    lines.extend("".join(_render(i, r, ctx) for i in items) for r in records)
    return "".join(line + "\n" for line in lines)
