"""sinfo's records: which nodes share a line, and in which order lines come.

`sinfo_records` follows `sinfo.c`: a record per partition first (when a partition field
is shown), then each node of each partition (in node-table order) joins the first record
whose partition and printed node attributes match, else starts one; records are sorted
by `-S` (default `#P,-t`: partition order, then state number, largest first) with glibc's
merge sort.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.compat.fmt_common import NodeExtras, PartitionExtras, msort
from gateway.compat.node_fmt_state import (
    BASE,
    FLAGS,
    node_state,
    node_state_string,
    node_state_string_complete,
)
from gateway.compat.sinfo_fmt_fields import (
    _COMPLETING,
    _DRAIN,
    _NO_EXTRAS,
    _NO_PEXTRAS,
    _NO_RESPOND,
    FormatItem,
    SinfoRecord,
    _cores,
    _features,
    _features_act,
    _gres,
    parse_sinfo_format,
    parse_sinfo_long_format,
)
from gateway.model.cluster import ClusterState, Node, Partition
from gateway.model.values import NO_VAL

__all__ = ["SinfoOptions", "format_items", "sinfo_records"]

DEFAULT = "partition:9 ,available:.5 ,time:.10 ,nodes:.6 ,statecompact:.6 ,nodelist:0"
LONG = (
    "partition:9 ,available:.5 ,time:.10 ,size:.10 ,root:.4 ,oversubscribe:.8 ,"
    "groups:.10 ,nodes:.6 ,statelong:.11 ,nodelist:0"
)
NODE = "nodelist:0 ,nodes:.6 ,partition:.9 ,statecompact:6"
NODE_LONG = (
    "nodelist:0 ,nodes:.6 ,partition:.9 ,statelong:.11 ,cpus:4 ,socketcorethread:.8 ,"
    "memory:.6 ,disk:.8 ,weight:.6 ,features:.8 ,reason:20"
)
SUMMARIZE = "partition:9 ,available:.5 ,time:.10 ,nodeaiot:.16 ,nodelist:0"
MIN_FIELD = 9  # MIN_NODE_FIELD_SIZE, MIN_PART_FIELD_SIZE


# --- grouping --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SinfoOptions:
    """What changes sinfo's output (including the filters sinfo applies itself)."""

    format: str | None = None  # -o
    format_long: str | None = None  # -O
    long: bool = False  # -l
    node_view: bool = False  # -N
    summarize: bool = False  # -s
    exact: bool = False  # -e
    noheader: bool = False  # -h
    sort: str | None = None  # -S
    partitions: tuple[str, ...] = ()  # -p
    nodes: tuple[str, ...] = ()  # -n (expanded names)
    states: tuple[str, ...] = ()  # -t (idle, down, drain, alloc, mix, ...)
    responding: bool = False  # -r
    dead: bool = False  # -d


def format_items(opts: SinfoOptions) -> tuple[list[FormatItem], bool, bool]:
    """Format items, and whether partition/node column widths are computed."""
    if opts.format_long is not None:
        return parse_sinfo_long_format(opts.format_long), False, False
    if opts.format is not None:
        return parse_sinfo_format(opts.format), False, False
    if opts.summarize:
        return parse_sinfo_long_format(SUMMARIZE), True, False
    if opts.node_view:
        return parse_sinfo_long_format(NODE_LONG if opts.long else NODE), True, True
    return parse_sinfo_long_format(LONG if opts.long else DEFAULT), True, False


_STATE_WORDS = {
    "alloc": "ALLOCATED",
    "allocated": "ALLOCATED",
    "idle": "IDLE",
    "down": "DOWN",
    "mix": "MIXED",
    "mixed": "MIXED",
    "unk": "UNKNOWN",
    "unknown": "UNKNOWN",
    "future": "FUTURE",
    "futr": "FUTURE",
}
_STATE_FLAG_WORDS = {
    "comp": "COMPLETING",
    "completing": "COMPLETING",
    "resv": "RESERVED",
    "reserved": "RESERVED",
    "fail": "FAIL",
    "maint": "MAINTENANCE",
    "no_respond": "NOT_RESPONDING",
    "npc": "PERFCTRS",
    "planned": "PLANNED",
    "cloud": "CLOUD",
    "powered_down": "POWERED_DOWN",
}


def _state_match(word: str, state: int, alloc_cpus: int) -> bool:
    w = word.lower()
    if w in ("drain",):
        return bool(state & _DRAIN)
    busy = state & 0xF in (BASE["ALLOCATED"], BASE["MIXED"]) or state & _COMPLETING
    if w in ("drng", "draining"):
        return bool(state & _DRAIN) and bool(busy)
    if w in ("drained",):
        return bool(state & _DRAIN) and not busy
    if w in _STATE_FLAG_WORDS:
        return bool(state & FLAGS[_STATE_FLAG_WORDS[w]])
    if w in ("alloc", "allocated"):
        return alloc_cpus > 0
    base = _STATE_WORDS.get(w)
    return base is not None and state & 0xF == BASE[base]


def _filtered(node: Node, ex: NodeExtras, opts: SinfoOptions) -> bool:
    state = node_state(node, ex)
    if opts.nodes and node.name not in opts.nodes:
        return True
    if opts.dead and not state & _NO_RESPOND:
        return True
    if opts.responding and state & _NO_RESPOND:
        return True
    return bool(opts.states) and not any(_state_match(w, state, ex.alloc_cpus) for w in opts.states)


def _match_part(r: SinfoRecord, part: Partition, pex: PartitionExtras, flags: set[str]) -> bool:
    if r.part is part:
        return True
    if r.part is None:
        return False
    checks = (
        ("partition", r.part.name, part.name),
        ("avail", (r.pex.state, r.part.up), (pex.state, part.up)),
        ("groups", r.pex.allow_groups, pex.allow_groups),
        ("job_size", (r.pex.min_nodes, r.part.max_nodes), (pex.min_nodes, part.max_nodes)),
        ("default_time", r.part.default_time, part.default_time),
        ("max_time", r.part.max_time, part.max_time),
        ("root", r.pex.root_only, pex.root_only),
        ("oversubscribe", r.pex.max_share, pex.max_share),
        ("preempt_mode", r.pex.preempt_mode, pex.preempt_mode),
        ("prio_tier", r.pex.priority_tier, pex.priority_tier),
        ("prio_job_factor", r.pex.priority_job_factor, pex.priority_job_factor),
        ("max_cpus", r.pex.max_cpus_per_node, pex.max_cpus_per_node),
    )
    return all(a == b for name, a, b in checks if name in flags)


def _match_node(
    r: SinfoRecord, node: Node, ex: NodeExtras, opts: SinfoOptions, flags: set[str]
) -> bool:
    if opts.node_view:
        return False
    first, fex = r.first, r.first_ex
    assert first is not None
    if "hostnames" in flags and (ex.hostname or node.name) not in r.hostnames:
        return False
    if "node_addr" in flags and (ex.address or node.name) not in r.addrs:
        return False
    pairs = (
        ("extra", fex.extra, ex.extra),
        ("features", _features(first), _features(node)),
        ("features_act", _features_act(first, fex), _features_act(node, ex)),
        ("gres", _gres(first), _gres(node)),
        ("gres_used", fex.gres_used, ex.gres_used),
        ("comment", fex.comment, ex.comment),
        ("reason", first.reason, node.reason),
        ("reason_time", fex.reason_time, ex.reason_time),
        ("reason_user", fex.reason_uid, ex.reason_uid),
        ("state", node_state_string(r.state), node_state_string(node_state(node, ex))),
        (
            "statecomplete",
            node_state_string_complete(r.state),
            node_state_string_complete(node_state(node, ex)),
        ),
        ("alloc_mem", r.alloc_memory, ex.alloc_memory),
    )
    if not all(a == b for name, a, b in pairs if name in flags):
        return False
    if not opts.exact:
        return True
    exact = (
        ("cpus", r.min_cpus, node.cpus),
        ("sockets", r.min_sockets, node.sockets),
        ("cores", r.min_cores, _cores(node)),
        ("threads", r.min_threads, node.threads_per_core),
        (
            "sct",
            (r.min_sockets, r.min_cores, r.min_threads),
            (node.sockets, _cores(node), node.threads_per_core),
        ),
        ("disk", r.min_disk, node.tmp_disk_mb),
        ("memory", r.min_mem, node.memory_mb),
        ("weight", r.min_weight, ex.weight),
        ("cpu_load", r.min_load, NO_VAL if ex.cpu_load is None else ex.cpu_load),
        ("free_mem", r.min_free, ex.free_memory),
        ("port", fex.port, ex.port),
        ("version", fex.version, ex.version),
    )
    return all(a == b for name, a, b in exact if name in flags)


def _update(r: SinfoRecord, node: Node, ex: NodeExtras) -> None:
    state = node_state(node, ex)
    cores = _cores(node)
    load = NO_VAL if ex.cpu_load is None else ex.cpu_load
    if r.nodes_total == 0:
        r.state, r.first, r.first_ex = state, node, ex
        r.min_cpus = r.max_cpus = node.cpus
        r.min_sockets = r.max_sockets = node.sockets
        r.min_cores = r.max_cores = cores
        r.min_threads = r.max_threads = node.threads_per_core
        r.min_disk = r.max_disk = node.tmp_disk_mb
        r.min_mem = r.max_mem = node.memory_mb
        r.min_weight = r.max_weight = ex.weight
        r.min_load = r.max_load = load
        r.min_free = r.max_free = ex.free_memory
    elif node.name in r.nodes:
        return
    else:
        r.min_cpus, r.max_cpus = min(r.min_cpus, node.cpus), max(r.max_cpus, node.cpus)
        r.min_sockets = min(r.min_sockets, node.sockets)
        r.max_sockets = max(r.max_sockets, node.sockets)
        r.min_cores, r.max_cores = min(r.min_cores, cores), max(r.max_cores, cores)
        r.min_threads = min(r.min_threads, node.threads_per_core)
        r.max_threads = max(r.max_threads, node.threads_per_core)
        r.min_disk = min(r.min_disk, node.tmp_disk_mb)
        r.max_disk = max(r.max_disk, node.tmp_disk_mb)
        r.min_mem, r.max_mem = min(r.min_mem, node.memory_mb), max(r.max_mem, node.memory_mb)
        r.min_weight, r.max_weight = min(r.min_weight, ex.weight), max(r.max_weight, ex.weight)
        r.min_load, r.max_load = min(r.min_load, load), max(r.max_load, load)
        free = ex.free_memory if ex.free_memory is not None else NO_VAL
        lo = r.min_free if r.min_free is not None else NO_VAL
        hi = r.max_free if r.max_free is not None else NO_VAL
        r.min_free = None if min(lo, free) == NO_VAL else min(lo, free)
        r.max_free = None if max(hi, free) == NO_VAL else max(hi, free)
    r.nodes.append(node.name)
    if (ex.address or node.name) not in r.addrs:
        r.addrs.append(ex.address or node.name)
    if (ex.hostname or node.name) not in r.hostnames:
        r.hostnames.append(ex.hostname or node.name)
    base = state & 0xF
    if base in (BASE["ALLOCATED"], BASE["MIXED"]) or state & _COMPLETING:
        r.nodes_alloc += 1
    elif state & _DRAIN or base == BASE["DOWN"]:
        r.nodes_other += 1
    else:
        r.nodes_idle += 1
    r.nodes_total += 1
    used = ex.alloc_cpus
    r.cpus_alloc += used
    r.cpus_total += node.cpus
    r.alloc_memory = ex.alloc_memory
    if state & _DRAIN or base == BASE["DOWN"]:
        r.cpus_other += node.cpus - used
    else:
        r.cpus_idle += node.cpus - used


def sinfo_records(
    cluster: ClusterState,
    opts: SinfoOptions | None = None,
    *,
    node_extras: Mapping[str, NodeExtras] | None = None,
    partition_extras: Mapping[str, PartitionExtras] | None = None,
    items: Sequence[FormatItem] | None = None,
) -> list[SinfoRecord]:
    """sinfo's records (grouped and sorted) for a cluster."""
    opts = opts or SinfoOptions()
    items = list(items) if items is not None else format_items(opts)[0]
    flags = {i.field.match for i in items if i.field is not None and i.field.match}
    nex = node_extras or {}
    pexs = partition_extras or {}
    order = {n.name: i for i, n in enumerate(cluster.nodes)}
    by_name = {n.name: n for n in cluster.nodes}
    records: list[SinfoRecord] = []
    parts = [
        (i, p)
        for i, p in enumerate(cluster.partitions)
        if not opts.partitions or p.name in opts.partitions
    ]
    if not opts.node_view and "partition" in flags:
        records.extend(SinfoRecord(p, i, pexs.get(p.name, _NO_PEXTRAS)) for i, p in parts)
    for i, part in parts:
        pex = pexs.get(part.name, _NO_PEXTRAS)
        members = sorted((n for n in part.nodes if n in by_name), key=order.__getitem__)
        for name in members:
            node, ex = by_name[name], nex.get(name, _NO_EXTRAS)
            if _filtered(node, ex, opts):
                continue
            for r in records:
                if not _match_part(r, part, pex, flags):
                    continue
                if r.nodes_total and not _match_node(r, node, ex, opts, flags):
                    continue
                _update(r, node, ex)
                break
            else:
                rec = SinfoRecord(part, i, pex)
                _update(rec, node, ex)
                records.append(rec)
    return _sort(records, opts)


def _sort(records: list[SinfoRecord], opts: SinfoOptions) -> list[SinfoRecord]:
    spec = opts.sort if opts.sort is not None else ("N" if opts.node_view else "#P,-t")
    keys: dict[str, Callable[[SinfoRecord], Any]] = {
        "D": lambda r: r.nodes_total,
        "A": lambda r: r.nodes_alloc,
        "F": lambda r: r.nodes_alloc,
        "c": lambda r: r.min_cpus,
        "d": lambda r: r.min_disk,
        "m": lambda r: r.min_mem,
        "w": lambda r: r.min_weight,
        "l": lambda r: r.part.max_time if r.part else 0,
        "t": lambda r: r.state,
        "T": lambda r: r.state,
        "E": lambda r: (r.first.reason if r.first else None) or "",
        "N": lambda r: _node_key(r.nodes),
    }
    i = len(spec) - 1
    while i >= 0:
        ch = spec[i]
        if ch in ",#+-":
            i -= 1
            continue
        reverse = i > 0 and spec[i - 1] == "-"
        part_order = i > 0 and spec[i - 1] == "#"
        key: Callable[[SinfoRecord], Any]
        if ch in ("P", "R"):
            key = (
                (lambda r: r.part_inx)
                if part_order
                else (lambda r: r.part.name.encode() if r.part else b"")
            )
        elif ch in keys:
            key = keys[ch]
        else:
            i -= 1
            continue

        def cmp(
            a: SinfoRecord,
            b: SinfoRecord,
            key: Callable[[SinfoRecord], Any] = key,
            reverse: bool = reverse,
        ) -> int:
            ka, kb = key(a), key(b)
            diff = int(ka > kb) - int(ka < kb)
            return -diff if reverse else diff

        records = msort(records, cmp)
        i -= 1
    return records


def _node_key(nodes: list[str]) -> tuple[str, int, int]:
    if not nodes:
        return ("", 0, 0)
    first = sorted(nodes, key=_host_sort)[0]
    return _host_sort(first)


def _host_sort(name: str) -> tuple[str, int, int]:
    digits = len(name) - len(name.rstrip("0123456789"))
    if not digits:
        return (name, -1, 0)
    return (name[:-digits], digits, int(name[-digits:]))
