"""Read the parts of a slurm.conf that describe a site to its users: nodes, partitions
(with PriorityTier, PreemptMode, GraceTime), licences, GresTypes, DefMemPerCPU,
EnforcePartLimits, MaxArraySize, PreemptType/PreemptMode/PreemptExemptTime, and
TopologyPlugin (gateway/control/site_topology.py reads the topology.conf it names).

Pure: text in, a `SlurmConf` out, so that the local site can be declared by the very file a
real cluster uses (`[local] slurm_conf = "/etc/slurm/slurm.conf"` in caldera.toml). Keys are
case-insensitive as in slurmctld's parser; `NodeName=DEFAULT` / `PartitionName=DEFAULT` lines
set defaults for the lines after them; node names are hostlists; `Nodes=ALL` is every node.
Keys that only matter to daemons (ports, addresses, plugins, paths) are skipped; what cannot
be read is a `SlurmConfError` naming `file:line`, never a traceback.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from gateway.compat.duration import time_str_to_mins
from gateway.compat.hostlist import HostlistError, expand
from gateway.model.values import NO_VAL
from gateway.policy.preempt_rules import parse_mode, preempt_config

__all__ = [
    "ConfNode",
    "ConfPartition",
    "SlurmConf",
    "SlurmConfError",
    "parse_gres",
    "parse_licenses",
    "parse_slurm_conf",
    "topology",
    "tres_names",
]


class SlurmConfError(ValueError):
    """A slurm.conf line Caldera cannot read; the message starts with `file:line:`."""


@dataclass(frozen=True, slots=True)
class ConfNode:
    """A `NodeName=` line's node, as slurmctld derives it (CPUs from the topology when
    not given; Sockets from CPUs when only CPUs are given)."""

    name: str
    cpus: int
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    memory_mb: int
    gres: tuple[tuple[str, str | None, int], ...] = ()
    features: tuple[str, ...] = ()
    weight: int = 1
    state: str = "UNKNOWN"
    reason: str | None = None
    tmp_disk_mb: int = 0
    address: str | None = None  # NodeAddr= (None: the node's name)
    port: int = 0  # Port= (0: SlurmdPort)


@dataclass(frozen=True, slots=True)
class ConfPartition:
    """A `PartitionName=` line; times in minutes (None: not set)."""

    name: str
    nodes: tuple[str, ...]
    default: bool = False
    max_time: int | None = None  # None: UNLIMITED
    default_time: int | None = None
    max_nodes: int | None = None
    def_mem_per_cpu_mb: int | None = None
    oversubscribe: str = "NO"
    state: str = "UP"
    priority_tier: int = 1
    priority_job_factor: int = 1
    preempt_mode: str | None = None  # OFF, CANCEL, REQUEUE (None: the site's)
    grace_time_s: int = 0


@dataclass(frozen=True, slots=True)
class SlurmConf:
    """What a slurm.conf tells users about its site."""

    cluster_name: str | None
    nodes: tuple[ConfNode, ...]
    partitions: tuple[ConfPartition, ...]
    licenses: tuple[tuple[str, int], ...] = ()
    gres_types: tuple[str, ...] = ()
    def_mem_per_cpu_mb: int = 0
    enforce_part_limits: str = "NO"
    max_array_size: int | None = None  # MaxArraySize; None: not set (Slurm's 1001)
    # PreemptType, PreemptMode, PreemptExemptTime as caldera.toml's preempt_* keys
    preempt: tuple[tuple[str, str], ...] = ()
    accounting_storage_tres: tuple[str, ...] | None = None  # AccountingStorageTRES
    # KillWait, MinJobAge as caldera.toml's kill_wait_s, min_job_age_s
    timers: tuple[tuple[str, int], ...] = ()
    topology_plugin: str | None = None  # TopologyPlugin (topology/tree reads topology.conf)


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# keys of NodeName= lines that describe what only daemons use
_NODE_SKIP = _words(
    "nodeaddr nodehostname port bcastaddr cpuspeclist corespeccount memspeclimit "
    "boards socketsperboard cpubind reservedlimits features_active"
)
_NODE_KEYS = _words(
    "cpus procs sockets corespersocket threadspercore realmemory gres feature "
    "features weight state reason tmpdisk"
)
_PART_SKIP = _words(
    "allocnodes allowaccounts allowgroups allowqos alternate cpubind denyaccounts "
    "denyqos disablerootjobs exclusiveuser hidden lln maxcpuspernode "
    "maxmempercpu maxmempernode minnodes overtimelimit priorityjobfactor "
    "qos reqresv resumetimeout rootonly selecttypeparameters suspendtime "
    "suspendtimeout tresbillingweights defcpupergpu defmempergpu defmempernode"
)
_PART_KEYS = _words(
    "nodes default maxtime defaulttime maxnodes defmempercpu oversubscribe shared state "
    "prioritytier preemptmode gracetime"
)
_PART_STATES = ("UP", "DOWN", "DRAIN", "INACTIVE")
_ENFORCE = {"NO": "NO", "ANY": "ANY", "YES": "ANY", "ALL": "ALL"}
_TOKEN = re.compile(r'([^\s=]+)=("(?:[^"]*)"|\S*)')
_SUFFIX = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4, "p": 1024**5}
_NAME = re.compile(r"[A-Za-z0-9_.\-]+")


def _count(text: str) -> int | None:
    """A non-negative count with Slurm's optional K/M/G/T/P suffix (None: not one)."""
    m = re.fullmatch(r"(\d+)([kKmMgGtTpP]?)", text)
    if not m:
        return None
    return int(m.group(1)) * _SUFFIX[m.group(2).lower()]


def topology(cpus: int, sockets: int, cores: int, threads: int) -> tuple[int, int, int, int]:
    """CPUs, Sockets, CoresPerSocket, ThreadsPerCore as slurmctld completes them (0: not
    given): CPUs from the rest; with only CPUs, a socket per CPU; with CPUs and Sockets,
    the cores that make up the CPUs."""
    threads = max(threads, 1)
    if not sockets:
        sockets = max(cpus // max(cores, 1) // threads, 1) if cores else max(cpus, 1)
    if not cores:
        cores = max(cpus // (sockets * threads), 1)
    return cpus or sockets * cores * threads, sockets, cores, threads


def parse_gres(text: str) -> tuple[tuple[str, str | None, int], ...] | None:
    """`gpu:a100:4,craynetwork:4,gpu` as (name, type, count) triples; None when malformed."""
    out: list[tuple[str, str | None, int]] = []
    for item in text.split(","):
        parts = [p for p in item.split(":") if p != "no_consume"]
        if not parts or not all(_NAME.fullmatch(p) for p in parts) or len(parts) > 3:
            return None
        count: int | None = 1
        if len(parts) > 1 and parts[-1][:1].isdigit():
            count = _count(parts.pop())
        if count is None or len(parts) > 2:
            return None
        out.append((parts[0], parts[1] if len(parts) == 2 else None, count))
    return tuple(out)


def tres_names(text: str) -> tuple[str, ...]:
    """AccountingStorageTRES's names (`gres/gpu,gres/gpu:a100,license/matlab`), in order."""
    return tuple(name.strip() for name in text.split(",") if name.strip())


def parse_licenses(text: str) -> tuple[tuple[str, int], ...] | None:
    """`name[:count]` (or `name*count`) items separated by `,` or `;`; None when malformed
    (an empty name, a count that is not a number)."""
    out: list[tuple[str, int]] = []
    for item in re.split("[,;]", text):
        m = re.fullmatch(r"([^:*]*)(?:([:*])(.*))?", item)
        name, sep, num = (m.group(1), m.group(2), m.group(3)) if m else ("", None, "")
        if not name or not _NAME.fullmatch(name) or (sep and not num.isdigit()):
            return None
        out.append((name, int(num) if sep else 1))
    return tuple(out)


def _pairs(line: str, where: str) -> list[tuple[str, str]]:
    """The `Key=Value` pairs of a line (quotes removed); anything else is an error."""
    pairs: list[tuple[str, str]] = []
    pos = 0
    for m in _TOKEN.finditer(line):
        if line[pos : m.start()].strip():
            raise SlurmConfError(f"{where}: cannot read {line[pos : m.start()].strip()!r}")
        value = m.group(2)
        if value.startswith('"'):
            value = value[1:-1]
        pairs.append((m.group(1).lower(), value))
        pos = m.end()
    if line[pos:].strip():
        raise SlurmConfError(f"{where}: cannot read {line[pos:].strip()!r}")
    return pairs


def _int(key: str, value: str, where: str, *, minimum: int = 0) -> int:
    if not value.isdigit() or int(value) < minimum:
        raise SlurmConfError(f"{where}: {key}={value!r} is not a number >= {minimum}")
    return int(value)


def _minutes(key: str, value: str, where: str) -> int | None:
    """A slurm.conf time; None for INFINITE/UNLIMITED."""
    if value.upper() in ("INFINITE", "UNLIMITED"):
        return None
    mins = time_str_to_mins(value)
    if mins == NO_VAL or mins < 0:
        raise SlurmConfError(f"{where}: {key}={value!r} is not a time")
    return mins


def _hosts(value: str, where: str) -> list[str]:
    try:
        return expand(value)
    except HostlistError:
        raise SlurmConfError(f"{where}: invalid hostlist {value!r}") from None


def _node(names: list[str], opts: dict[str, str], where: str) -> list[ConfNode]:
    """The nodes of one NodeName= line (defaults already merged into `opts`)."""
    get = opts.get
    sockets = _int("Sockets", get("sockets", "0"), where)
    cores = _int("CoresPerSocket", get("corespersocket", "0"), where)
    threads = _int("ThreadsPerCore", get("threadspercore", "1"), where, minimum=1)
    cpus_text = get("cpus", get("procs"))
    cpus = _int("CPUs", cpus_text, where, minimum=1) if cpus_text is not None else 0
    cpus, sockets, cores, threads = topology(cpus, sockets, cores, threads)
    gres: tuple[tuple[str, str | None, int], ...] = ()
    if get("gres") and get("gres", "").lower() != "(null)":
        parsed = parse_gres(get("gres", ""))
        if parsed is None:
            raise SlurmConfError(f"{where}: cannot read Gres={get('gres')!r}")
        gres = parsed
    features_text = get("features", get("feature", ""))
    features = tuple(f for f in features_text.split(",") if f)
    state = get("state", "UNKNOWN").upper()
    node = ConfNode(
        name="",
        cpus=cpus,
        sockets=sockets,
        cores_per_socket=cores,
        threads_per_core=threads,
        memory_mb=_int("RealMemory", get("realmemory", "1"), where),
        gres=gres,
        features=features,
        weight=_int("Weight", get("weight", "1"), where),
        state=state,
        reason=get("reason"),
        tmp_disk_mb=_int("TmpDisk", get("tmpdisk", "0"), where),
        port=_int("Port", get("port", "0"), where),
    )
    addresses = _hosts(get("nodeaddr", ""), where) if get("nodeaddr") else []
    if len(addresses) not in (0, 1, len(names)):
        raise SlurmConfError(
            f"{where}: NodeAddr names {len(addresses)} hosts for {len(names)} nodes"
        )
    if len(addresses) == 1:
        addresses *= len(names)
    return [
        replace(node, name=n, address=addresses[i] if addresses else None)
        for i, n in enumerate(names)
    ]


def _partition(name: str, opts: dict[str, str], where: str) -> tuple[ConfPartition, list[str]]:
    """A PartitionName= line's partition and its node names as written (ALL expanded at
    the end, since nodes may be declared after the partition)."""
    get = opts.get
    names = [] if get("nodes") in (None, "") else _hosts(get("nodes", ""), where)
    over = get("oversubscribe", get("shared", "NO")).upper()
    kind, _, num = over.partition(":")
    if kind not in ("NO", "EXCLUSIVE", "YES", "FORCE") or (num and not num.isdigit()):
        raise SlurmConfError(f"{where}: OverSubscribe={over!r} is not NO, EXCLUSIVE, YES or FORCE")
    if kind in ("YES", "FORCE"):
        over = f"{kind}:{num or 4}"
    state = get("state", "UP").upper()
    if state not in _PART_STATES:
        raise SlurmConfError(f"{where}: State={state!r} is not one of {', '.join(_PART_STATES)}")
    default = get("default", "NO").upper()
    if default not in ("YES", "NO"):
        raise SlurmConfError(f"{where}: Default={default!r} is not YES or NO")
    max_nodes = get("maxnodes")
    unlimited = max_nodes is None or max_nodes.upper() in ("UNLIMITED", "INFINITE")
    def_mem = get("defmempercpu")
    part = ConfPartition(
        name=name,
        nodes=(),
        default=default == "YES",
        max_time=_minutes("MaxTime", get("maxtime", "UNLIMITED"), where),
        default_time=(
            None
            if get("defaulttime") is None
            else _minutes("DefaultTime", get("defaulttime", ""), where)
        ),
        max_nodes=None if unlimited else _int("MaxNodes", max_nodes or "", where),
        def_mem_per_cpu_mb=None if def_mem is None else _int("DefMemPerCPU", def_mem, where),
        oversubscribe=over,
        state=state,
        priority_tier=_int("PriorityTier", get("prioritytier", "1"), where),
        priority_job_factor=_int("PriorityJobFactor", get("priorityjobfactor", "1"), where),
        preempt_mode=None if get("preemptmode") is None else _preempt_mode(get, where),
        grace_time_s=_int("GraceTime", get("gracetime", "0"), where),
    )
    return part, names


def _preempt_mode(get: Any, where: str) -> str:
    try:
        return parse_mode("PreemptMode", get("preemptmode")).name
    except ValueError as exc:
        raise SlurmConfError(f"{where}: {exc}") from None


def _lines(text: str) -> list[tuple[int, str]]:
    """Logical lines with their first line number: comments cut (`\\#` kept), `\\`
    continuations joined, blank lines dropped."""
    out: list[tuple[int, str]] = []
    pending = ""
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = re.sub(r"(?<!\\)#.*", "", raw).replace("\\#", "#")
        if not pending:
            start = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        line = pending + line
        pending = ""
        if line.strip():
            out.append((start, line.strip()))
    if pending.strip():
        out.append((start, pending.strip()))
    return out


def parse_slurm_conf(text: str, path: str = "slurm.conf") -> SlurmConf:
    """The site a slurm.conf describes; `SlurmConfError` names `path:line` otherwise."""
    nodes: dict[str, ConfNode] = {}
    parts: list[tuple[ConfPartition, list[str], str]] = []
    node_defaults: dict[str, str] = {}
    part_defaults: dict[str, str] = {}
    top: dict[str, tuple[str, str]] = {}
    for number, line in _lines(text):
        where = f"{path}:{number}"
        pairs = _pairs(line, where)
        head, value = pairs[0]
        opts = dict(pairs[1:])
        if head == "include":
            raise SlurmConfError(f"{where}: Include is not supported; put the lines in one file")
        if head == "nodename":
            _check_keys(opts, _NODE_KEYS, _NODE_SKIP, "NodeName", where)
            if value.upper() == "DEFAULT":
                node_defaults.update(opts)
                continue
            names = _hosts(value, where)
            if not names:
                raise SlurmConfError(f"{where}: NodeName is empty")
            for node in _node(names, {**node_defaults, **opts}, where):
                if node.name in nodes:
                    raise SlurmConfError(f"{where}: node {node.name} is declared twice")
                nodes[node.name] = node
        elif head == "partitionname":
            _check_keys(opts, _PART_KEYS, _PART_SKIP, "PartitionName", where)
            if value.upper() == "DEFAULT":
                part_defaults.update(opts)
                continue
            if not _NAME.fullmatch(value):
                raise SlurmConfError(f"{where}: invalid partition name {value!r}")
            if any(p.name == value for p, _, _ in parts):
                raise SlurmConfError(f"{where}: partition {value} is declared twice")
            part, names = _partition(value, {**part_defaults, **opts}, where)
            parts.append((part, names, where))
        elif head in ("downnodes", "frontendname", "nodeset", "slurmctldhost", "controlmachine"):
            continue
        else:
            if opts:
                raise SlurmConfError(f"{where}: one Key=Value per line expected after {head}")
            top[head] = (value, where)
    return SlurmConf(
        cluster_name=top["clustername"][0] if "clustername" in top else None,
        nodes=tuple(nodes.values()),
        partitions=_resolve(parts, nodes),
        **_site(top),
    )


def _check_keys(
    opts: dict[str, str], known: frozenset[str], skip: frozenset[str], what: str, where: str
) -> None:
    for key in opts:
        if key not in known and key not in skip:
            raise SlurmConfError(f"{where}: unknown {what} key {key!r}")


def _resolve(
    parts: list[tuple[ConfPartition, list[str], str]], nodes: dict[str, ConfNode]
) -> tuple[ConfPartition, ...]:
    """Partitions with their node lists checked; ALL is every node, in declaration order."""
    out: list[ConfPartition] = []
    defaults = [where for p, _, where in parts if p.default]
    if len(defaults) > 1:
        raise SlurmConfError(f"{defaults[1]}: a second partition has Default=YES")
    for part, names, where in parts:
        if [n.upper() for n in names] == ["ALL"]:
            names = list(nodes)
        unknown = [n for n in names if n not in nodes]
        if unknown:
            raise SlurmConfError(
                f"{where}: partition {part.name}: node {unknown[0]} is not declared"
            )
        out.append(replace(part, nodes=tuple(dict.fromkeys(names))))
    return tuple(out)


def _site(top: dict[str, tuple[str, str]]) -> dict[str, Any]:
    """The cluster-wide settings users see."""
    out: dict[str, Any] = {}
    if "licenses" in top:
        text, where = top["licenses"]
        lic = parse_licenses(text)
        if lic is None:
            raise SlurmConfError(f"{where}: cannot read Licenses={text!r}")
        out["licenses"] = lic
    if "topologyplugin" in top:
        out["topology_plugin"] = top["topologyplugin"][0]
    if "grestypes" in top:
        out["gres_types"] = tuple(t for t in top["grestypes"][0].split(",") if t)
    if "accountingstoragetres" in top:
        out["accounting_storage_tres"] = tres_names(top["accountingstoragetres"][0])
    if "defmempercpu" in top:
        text, where = top["defmempercpu"]
        out["def_mem_per_cpu_mb"] = _int("DefMemPerCPU", text, where)
    if "maxarraysize" in top:
        text, where = top["maxarraysize"]
        value = _int("MaxArraySize", text, where)
        if value > _MAX_ARRAY_SIZE:  # slurmctld refuses to start beyond it
            raise SlurmConfError(f"{where}: MaxArraySize={text} is above {_MAX_ARRAY_SIZE}")
        out["max_array_size"] = value
    if "enforcepartlimits" in top:
        text, where = top["enforcepartlimits"]
        if text.upper() not in _ENFORCE:
            raise SlurmConfError(f"{where}: EnforcePartLimits={text!r} is not NO, ANY or ALL")
        out["enforce_part_limits"] = _ENFORCE[text.upper()]
    preempt = []
    for key, name in _PREEMPT:
        if key in top:
            text, where = top[key]
            try:
                preempt_config({name: text})
            except ValueError as exc:
                raise SlurmConfError(f"{where}: {exc}") from None
            preempt.append((name, text))
    out["preempt"] = tuple(preempt)
    out["timers"] = tuple(
        (name, _int(key, *top[key.lower()])) for key, name in _TIMERS if key.lower() in top
    )
    return out


_TIMERS = (("KillWait", "kill_wait_s"), ("MinJobAge", "min_job_age_s"))


_MAX_ARRAY_SIZE = 4_000_001

_PREEMPT = (
    ("preempttype", "preempt_type"),
    ("preemptmode", "preempt_mode"),
    ("preemptexempttime", "preempt_exempt_time"),
)
