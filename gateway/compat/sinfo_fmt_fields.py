"""sinfo's fields: one table of `-o` letters, `-O` names, headers and grouping keys.

A `SinfoRecord` is one printed line (a group of nodes); each `SinfoField` prints one of
its values the way sinfo 22.05's `print.c` does and names the attribute nodes must share
to be grouped into one record (`match`). The `-o`/`-O` parsers live here too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.compat.fmt_common import (
    NodeExtras,
    PartitionExtras,
    byte_len,
    c_str,
    convert_num_unit,
    hostlist_compress,
    make_time_str,
)
from gateway.compat.node_fmt_state import (
    FLAGS,
    node_state_string,
    node_state_string_compact,
    node_state_string_complete,
)
from gateway.model.cluster import Node, Partition
from gateway.model.values import INFINITE, NO_VAL

__all__ = [
    "SINFO_FIELDS",
    "FormatItem",
    "SinfoField",
    "SinfoRecord",
    "parse_sinfo_format",
    "parse_sinfo_long_format",
]

_DRAIN, _COMPLETING, _NO_RESPOND = FLAGS["DRAIN"], FLAGS["COMPLETING"], FLAGS["NOT_RESPONDING"]
_NO_EXTRAS = NodeExtras()
_NO_PEXTRAS = PartitionExtras()


@dataclass(slots=True)
class SinfoRecord:
    """One printed line: a partition's group of nodes (or one node with `-N`)."""

    part: Partition | None
    part_inx: int
    pex: PartitionExtras
    nodes: list[str] = field(default_factory=list)
    addrs: list[str] = field(default_factory=list)
    hostnames: list[str] = field(default_factory=list)
    state: int = 0
    first: Node | None = None
    first_ex: NodeExtras = field(default_factory=NodeExtras)
    min_cpus: int = 0
    max_cpus: int = 0
    min_sockets: int = 0
    max_sockets: int = 0
    min_cores: int = 0
    max_cores: int = 0
    min_threads: int = 0
    max_threads: int = 0
    min_disk: int = 0
    max_disk: int = 0
    min_mem: int = 0
    max_mem: int = 0
    min_weight: int = 0
    max_weight: int = 0
    min_load: int = NO_VAL
    max_load: int = NO_VAL
    min_free: int | None = None
    max_free: int | None = None
    alloc_memory: int = 0
    nodes_alloc: int = 0
    nodes_idle: int = 0
    nodes_other: int = 0
    nodes_total: int = 0
    cpus_alloc: int = 0
    cpus_idle: int = 0
    cpus_other: int = 0
    cpus_total: int = 0


Getter = Callable[[SinfoRecord, "_Ctx"], str | None]


@dataclass(frozen=True, slots=True)
class SinfoField:
    """One sinfo field: `-o` letter, `-O` names, header, grouping key, value."""

    letter: str | None
    names: tuple[str, ...]
    header: str
    value: Getter
    match: str | None = None  # the match flag it sets (grouping), None: none
    header_cut: bool = True


@dataclass(frozen=True, slots=True)
class FormatItem:
    """A parsed format element; `field` None prints only `suffix`."""

    field: SinfoField | None
    width: int
    right: bool
    suffix: str = ""


@dataclass(frozen=True, slots=True)
class _Ctx:
    part_width: int | None
    node_width: int | None


# --- node facts -----------------------------------------------------------------------


def _gres(node: Node) -> str | None:
    items = [f"{n}:{t}:{c}" if t else f"{n}:{c}" for n, t, c in node.gres]
    return ",".join(items) if items else None


def _cores(node: Node) -> int:
    if node.cores_per_socket:
        return node.cores_per_socket
    return max(node.cpus // max(node.sockets, 1) // max(node.threads_per_core, 1), 1)


def _features(node: Node) -> str | None:
    return ",".join(node.features) if node.features else None


def _features_act(node: Node, ex: NodeExtras) -> str | None:
    if ex.active_features is not None:
        return ",".join(ex.active_features) or None
    return _features(node)


def _minmax(lo: int, hi: int, *, range_: bool = False, suffix: bool = True) -> str:
    a = convert_num_unit(lo) if suffix else str(lo)
    b = convert_num_unit(hi) if suffix else str(hi)
    if lo == hi:
        return b
    if range_:
        return f"{a}-infinite" if hi == INFINITE else f"{a}-{b}"
    return f"{a}+"


def _secs(seconds: int) -> str:
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    mins, secs = divmod(rest, 60)
    if days:
        return f"{days}-{hours:02d}:{mins:02d}:{secs:02d}"
    if hours:
        return f"{hours}:{mins:02d}:{secs:02d}"
    return f"{mins}:{secs:02d}"


# --- field values -----------------------------------------------------------------------


def _avail(r: SinfoRecord, _: _Ctx) -> str:
    if r.part is None:
        return "n/a"
    state = r.pex.state or ("UP" if r.part.up else "DOWN")
    return state.lower() if state in ("UP", "DOWN", "DRAIN", "INACTIVE") else "unknown"


def _partition(r: SinfoRecord, ctx: _Ctx, width: int) -> str:
    if r.part is None:
        return "n/a"
    name = r.part.name
    if r.part.default:
        if byte_len(name) < width or width == 0:
            name += "*"
        elif width > 0:
            name = c_str(name, width - 1) + "*"
    return name


def _time(minutes: int | None) -> str:
    if minutes is None or minutes == NO_VAL:
        return "n/a"
    if minutes == INFINITE:
        return "infinite"
    return _secs(minutes * 60)


def _state(r: SinfoRecord, compact: bool) -> str:
    if not r.nodes_total:
        return "n/a"
    text = node_state_string_compact(r.state) if compact else node_state_string(r.state)
    return text.lower()


def _size(r: SinfoRecord) -> str:
    if r.part is None:
        return "n/a"
    lo = r.pex.min_nodes
    hi = r.part.max_nodes if r.part.max_nodes is not None else INFINITE
    if lo < 1 and hi > 0:
        lo = 1
    return _minmax(lo, hi, range_=True)


def _oversubscribe(r: SinfoRecord) -> str:
    share = r.pex.max_share
    force, val = bool(share & 0x8000), share & ~0x8000
    if val == 0:
        return "EXCLUSIVE"
    if force:
        return f"FORCE:{val}"
    return "NO" if val == 1 else f"YES:{val}"


def _reason(r: SinfoRecord) -> str:
    reason = r.first.reason if r.first is not None else None
    return "none" if not reason or reason.startswith("(null)") else reason


def _load(r: SinfoRecord) -> str:
    def one(v: int) -> str:
        return "N/A" if v == NO_VAL else f"{v / 100:.2f}"

    if r.min_load == r.max_load:
        return one(r.max_load)
    return f"{one(r.min_load)}-{one(r.max_load)}"


def _free(r: SinfoRecord) -> str:
    def one(v: int | None) -> str:
        return "N/A" if v is None else str(v)

    if r.min_free == r.max_free:
        return one(r.max_free)
    return f"{one(r.min_free)}-{one(r.max_free)}"


def _user(r: SinfoRecord, long: bool) -> str:
    ex = r.first_ex
    if ex.reason_uid is None and ex.reason_user is None:
        return "Unknown"
    name = ex.reason_user or f"Unk({ex.reason_uid})"
    if long and ex.reason_user and ex.reason_uid is not None:
        return f"{name}({ex.reason_uid})"
    return name


def _first(get: Callable[[Node, NodeExtras], str | None]) -> Getter:
    return lambda r, _: get(r.first, r.first_ex) if r.first is not None else None


F = SinfoField
# fmt: off
SINFO_FIELDS: tuple[SinfoField, ...] = (
    F("a", ("available",), "AVAIL", _avail, "avail"),
    F("A", ("nodeai",), "NODES(A/I)", lambda r, _: f'{r.nodes_alloc}/{r.nodes_idle}'),
    F("b", ("features_act",), "ACTIVE_FEATURES", _first(_features_act), "features_act"),
    F("B", ("maxcpuspernode",), "MAX_CPUS_PER_NODE", lambda r,
      _: "UNLIMITED" if r.pex.max_cpus_per_node == INFINITE else str(r.pex.max_cpus_per_node),
      "max_cpus"),
    F("c", ("cpus",), "CPUS", lambda r, _: _minmax(r.min_cpus, r.max_cpus), "cpus"),
    F("C", ("cpusstate",), "CPUS(A/I/O/T)", lambda r,
      _: f'{r.cpus_alloc}/{r.cpus_idle}/{r.cpus_other}/{r.cpus_total}', "cpus"),
    F("d", ("disk",), "TMP_DISK", lambda r, _: _minmax(r.min_disk, r.max_disk, suffix=False),
      "disk"),
    F("D", ("nodes",), "NODES", lambda r, _: str(r.nodes_total)),
    F("e", ("freemem",), "FREE_MEM", lambda r, _: _free(r), "free_mem"),
    F("E", ("reason",), "REASON", lambda r, _: _reason(r), "reason"),
    F("f", ("features",), "AVAIL_FEATURES", _first(lambda n, e: _features(n)), "features"),
    F("F", ("nodeaiot",), "NODES(A/I/O/T)", lambda r,
      _: f'{r.nodes_alloc}/{r.nodes_idle}/{r.nodes_other}/{r.nodes_total}'),
    F("g", ("groups",), "GROUPS", lambda r,
      _: "n/a" if r.part is None else r.pex.allow_groups or "all", "groups"),
    F("G", ("gres",), "GRES", _first(lambda n, e: _gres(n)), "gres"),
    F("h", ("oversubscribe", "share"), "OVERSUBSCRIBE", lambda r, _: _oversubscribe(r),
      "oversubscribe"),
    F("H", ("timestamp",), "TIMESTAMP", lambda r,
      _: make_time_str(r.first_ex.reason_time) if r.first_ex.reason_time else "Unknown",
      "reason_time"),
    F("I", ("priorityjobfactor",), "PRIO_JOB_FACTOR", lambda r, _: str(r.pex.priority_job_factor),
      "prio_job_factor"),
    F("l", ("time",), "TIMELIMIT", lambda r, _: "n/a" if r.part is None else _time(r.part.max_time),
      "max_time"),
    F("L", ("defaulttime",), "DEFAULTTIME", lambda r,
      _: "n/a" if r.part is None or r.part.default_time is None else _time(r.part.default_time),
      "default_time"),
    F("m", ("memory",), "MEMORY", lambda r, _: _minmax(r.min_mem, r.max_mem, suffix=False),
      "memory"),
    F("M", ("preemptmode",), "PREEMPT_MODE", lambda r, _: r.pex.preempt_mode, "preempt_mode"),
    F("n", ("nodehost",), "HOSTNAMES", lambda r, _: hostlist_compress(r.hostnames), "hostnames",
      header_cut=False),
    F("N", ("nodelist",), "NODELIST", lambda r, _: hostlist_compress(r.nodes), header_cut=False),
    F("o", ("nodeaddr",), "NODE_ADDR", lambda r, _: hostlist_compress(r.addrs, sort=False),
      "node_addr", header_cut=False),
    F("O", ("cpusload",), "CPU_LOAD", lambda r, _: _load(r), "cpu_load"),
    F("p", ("prioritytier",), "PRIO_TIER", lambda r, _: str(r.pex.priority_tier), "prio_tier"),
    F("P", ("partition",), "PARTITION", lambda r, _: None, "partition"),
    F("r", ("root",), "ROOT", lambda r,
      _: "n/a" if r.part is None else "yes" if r.pex.root_only else "no", "root"),
    F("R", ("partitionname",), "PARTITION", lambda r, _: "n/a" if r.part is None else r.part.name,
      "partition"),
    F("s", ("size",), "JOB_SIZE", lambda r, _: _size(r), "job_size"),
    F("S", ("allocnodes",), "ALLOCNODES", lambda r,
      _: "n/a" if r.part is None else r.pex.allow_alloc_nodes or "all"),
    F("t", ("statecompact",), "STATE", lambda r, _: _state(r, True), "state"),
    F("T", ("statelong",), "STATE", lambda r, _: _state(r, False), "state"),
    F("u", ("user",), "USER", lambda r, _: _user(r, False), "reason_user"),
    F("U", ("userlong",), "USER", lambda r, _: _user(r, True), "reason_user"),
    F("v", ("version",), "VERSION", lambda r, _: r.first_ex.version or "N/A", "version"),
    F("V", ("cluster",), "CLUSTER", lambda r, _: "N/A"),
    F("w", ("weight",), "WEIGHT", lambda r, _: _minmax(r.min_weight, r.max_weight, suffix=False),
      "weight"),
    F("X", ("sockets",), "SOCKETS", lambda r, _: _minmax(r.min_sockets, r.max_sockets), "sockets"),
    F("Y", ("cores",), "CORES", lambda r, _: _minmax(r.min_cores, r.max_cores), "cores"),
    F("Z", ("threads",), "THREADS", lambda r, _: _minmax(r.min_threads, r.max_threads), "threads"),
    F("z", ("socketcorethread",), "S:C:T", lambda r, _: ":".join((_minmax(r.min_sockets,
      r.max_sockets), _minmax(r.min_cores, r.max_cores), _minmax(r.min_threads, r.max_threads))),
      "sct"),
    F(None, ("allocmem",), "ALLOCMEM", lambda r, _: str(r.alloc_memory), "alloc_mem"),
    F(None, ("comment",), "COMMENT", _first(lambda n, e: e.comment), "comment"),
    F(None, ("extra",), "EXTRA", _first(lambda n, e: e.extra), "extra"),
    F(None, ("gresused",), "GRES_USED", _first(lambda n, e: e.gres_used), "gres_used"),
    F(None, ("port",), "PORT", lambda r, _: str(r.first_ex.port), "port"),
    F(None, ("statecomplete",), "STATECOMPLETE", lambda r,
      _: "n/a" if not r.nodes_total else node_state_string_complete(r.state).lower(),
      "statecomplete"),
)
# fmt: on
del F

_BY_LETTER = {f.letter: f for f in SINFO_FIELDS if f.letter}
_BY_NAME = {n: f for f in SINFO_FIELDS for n in f.names}


# --- parsing (sinfo's own copies of squeue's rules) -----------------------------------


def parse_sinfo_format(fmt: str) -> list[FormatItem]:
    """`-o`: `%[.][width]letter` with prefix/suffix text (`%%` prints nothing)."""
    items: list[FormatItem] = []
    pos = fmt.find("%")
    if pos != 0:
        items.append(FormatItem(None, 0, False, fmt if pos < 0 else fmt[:pos]))
    if pos < 0:
        return items
    for token in (t for t in fmt[pos:].split("%") if t):
        i = 1 if token.startswith(".") else 0
        right = i == 1
        width = 0
        while i < len(token) and token[i].isdigit():
            width = width * 10 + int(token[i])
            i += 1
        letter = token[i] if i < len(token) else ""
        found = _BY_LETTER.get(letter) if letter else None
        if found is None:
            items.append(FormatItem(None, width, right, "%" + token))
        else:
            items.append(FormatItem(found, width, right, token[i + 1 :]))
    return items


def parse_sinfo_long_format(fmt: str) -> list[FormatItem]:
    """`-O`: comma list of `name[:[.]width[suffix]]` (no width: 20, left)."""
    items: list[FormatItem] = []
    for token in (t for t in fmt.split(",") if t):
        name, sep, spec = token.partition(":")
        width, right, suffix = 20, False, ""
        if sep:
            right = spec.startswith(".")
            body = spec[1:] if right else spec
            j = 1 if body[:1] in "+-" else 0
            while j < len(body) and body[j].isdigit():
                j += 1
            digits = body[:j]
            width = int(digits) if digits.lstrip("+-") else 0
            suffix = body[j:] if digits.lstrip("+-") else body
        if name.lower() == "all":
            items.extend(parse_sinfo_format("%all"))
            continue
        items.append(FormatItem(_BY_NAME.get(name.lower()), width, right, suffix))
    return items


def _print_str(value: str | None, width: int, right: bool, cut: bool) -> str:
    """sinfo's `_print_str` (any non-zero width, negative ones included)."""
    text = c_str(value)
    if width == 0:
        return text
    if right:
        out = text.rjust(width) if width > 0 else text.ljust(-width)
        if cut and width > 0:
            out = c_str(out, width)
    else:
        out = c_str(text, width) if width > 0 else text
    return out + " " * max(width - byte_len(out), 0)
