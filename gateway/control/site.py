"""The local site: its nodes, partitions and licences as a ClusterState (from caldera.toml's
tables or a slurm.conf, gateway/control/slurm_conf.py), and the submit-time checks and
answers slurmctld makes against a site (partition names and states, EnforcePartLimits,
licences, whether any node could ever fit a job, what a partition adds to a job, GresTypes,
`sbatch --test-only`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from gateway.compat.duration import time_str_to_mins
from gateway.compat.slurm_errors import SlurmErrno
from gateway.compat.verify import SubmitError
from gateway.control.config import GatewayConfig, LocalNodeConfig, PartitionConfig
from gateway.control.site_topology import read_site_topology, switch_paths
from gateway.control.slurm_conf import (
    SlurmConfError,
    parse_gres,
    parse_licenses,
    parse_slurm_conf,
    topology,
)
from gateway.model.cluster import ClusterState, Gpu, Node, NodeState, Partition
from gateway.model.jobspec import JobSpec, Sharing
from gateway.model.values import INFINITE, NO_VAL
from gateway.policy.preempt_rules import mode_text, parse_mode
from gateway.scheduler.licenses import valid_request
from gateway.scheduler.part_limits import config_detail, could_hold, fitting_nodes
from gateway.scheduler.request import constraint_satisfied, node_request
from gateway.scheduler.selection import default_target

__all__ = [
    "check_request",
    "from_slurm_conf",
    "gres_types_of",
    "local_cluster",
    "partition_defaults",
    "pick_partitions",
    "site_value",
]


def _minutes(text: str | None) -> int | None:
    if text is None:
        return None
    value = time_str_to_mins(text)
    if value == NO_VAL:
        raise ValueError(f"invalid time {text!r} in the partition configuration")
    return value


_NODE_STATES = {"DOWN": NodeState.DOWN, "DRAIN": NodeState.DRAINED, "FAIL": NodeState.DRAINED}


def local_cluster(config: GatewayConfig) -> ClusterState:
    """The local backend's nodes and partitions from the configuration."""
    names = tuple(n.name for n in config.nodes)
    partitions = tuple(
        Partition(
            name=p.name,
            nodes=p.nodes or names,
            default=p.default,
            up=p.state in ("UP", "DRAIN"),  # DRAIN: runs what it has, takes no more
            state=p.state,
            max_time=_minutes(p.max_time) or 0,
            default_time=_minutes(p.default_time),
            max_nodes=p.max_nodes,
            oversubscribe=p.oversubscribe,
            def_mem_per_cpu_mb=p.def_mem_per_cpu_mb,
            priority_tier=p.priority_tier,
            priority_job_factor=p.priority_job_factor,
            preempt_mode=p.preempt_mode
            or mode_text(parse_mode("preempt_mode", config.preempt_mode, site=True)),
            grace_time_s=p.grace_time_s,
        )
        for p in config.partitions
    )
    if partitions and not any(p.default for p in partitions):
        partitions = (replace(partitions[0], default=True), *partitions[1:])
    paths = switch_paths(config.topology)
    nodes = tuple(
        Node(
            name=n.name,
            cpus=n.cpus,
            memory_mb=n.memory_mb,
            state=_NODE_STATES.get(n.state, NodeState.IDLE),
            reason=n.reason,
            partitions=tuple(p.name for p in partitions if n.name in p.nodes),
            features=n.features,
            gres=n.gres or ((("gpu", None, n.gpus),) if n.gpus else ()),
            gpus=tuple(Gpu(index=i) for i in range(n.gpus)),
            sockets=n.sockets or n.cpus,
            cores_per_socket=n.cores_per_socket or 1,
            threads_per_core=n.threads_per_core,
            weight=n.weight,
            tmp_disk_mb=n.tmp_disk_mb,
            switch=paths[n.name][0] if paths.get(n.name) else None,
            uplinks=paths.get(n.name, ())[1:],
        )
        for n in config.nodes
    )
    return ClusterState(
        name=config.cluster_name,
        nodes=nodes,
        partitions=partitions,
        licenses=config.licenses,
        enforce_part_limits=config.enforce_part_limits,
    )


def partition_defaults(
    spec: JobSpec, partitions: tuple[str, ...], clusters: dict[str, ClusterState]
) -> JobSpec:
    """What the first partition named adds to a job at submission, as slurmctld stores it
    in the job: its DefMemPerCPU when the job asks no memory (MinMemoryCPU), and whole
    nodes in an OverSubscribe=EXCLUSIVE partition (OverSubscribe=NO)."""
    part = next((p for c in clusters.values() if (p := c.partition(partitions[0]))), None)
    if part is None:
        return spec
    asked = (spec.mem_per_node_mb, spec.mem_per_cpu_mb, spec.mem_per_gpu_mb)
    if part.def_mem_per_cpu_mb is not None and all(m is None for m in asked):
        spec = replace(spec, mem_per_cpu_mb=part.def_mem_per_cpu_mb)
    if part.oversubscribe == "EXCLUSIVE" and spec.sharing is None:
        spec = replace(spec, sharing=Sharing.EXCLUSIVE)
    return spec


def pick_partitions(spec: JobSpec, clusters: dict[str, ClusterState]) -> tuple[str, ...]:
    """The partitions a job may use; raises Slurm's "Invalid partition name" otherwise."""
    known = {p.name for c in clusters.values() for p in c.partitions}
    if spec.partitions:
        for name in spec.partitions:
            if name not in known:  # slurmctld's err_msg names the first unknown one
                raise SubmitError(
                    SlurmErrno.INVALID_PARTITION_NAME, f"invalid partition specified: {name}"
                )
        return spec.partitions
    home = default_target(clusters)
    if home is None:
        raise SubmitError(SlurmErrno.DEFAULT_PARTITION_NOT_SET)
    return (home.partition,)


def check_request(
    spec: JobSpec,
    partitions: tuple[str, ...],
    clusters: dict[str, ClusterState],
    def_mem_per_cpu_mb: int,
    *,
    fit: bool = True,
) -> None:
    """Reject a request no node of its partitions could ever hold, as slurmctld does;
    without `fit` (a held job, or one beyond its partition's size) only names are checked.
    In `_job_create`'s order: node names, partitions that take no jobs (DRAIN, INACTIVE),
    partition limits (EnforcePartLimits), licences, then what the nodes could hold."""
    from gateway.compat.hostlist import HostlistError, expand

    nodelist = tuple(expand(spec.nodelist)) if spec.nodelist else ()
    try:
        excluded = set(expand(spec.exclude)) if spec.exclude else set()
    except HostlistError:
        raise SubmitError(SlurmErrno.INVALID_NODE_NAME) from None
    known = {n.name for c in clusters.values() for n in c.nodes}
    if any(name not in known for name in (*nodelist, *excluded)) or excluded & set(nodelist):
        raise SubmitError(SlurmErrno.INVALID_NODE_NAME)  # (-w and -x naming one node too)
    parts = [p for c in clusters.values() for name in partitions if (p := c.partition(name))]
    if parts and all(p.state in ("DRAIN", "INACTIVE") for p in parts):
        raise SubmitError(SlurmErrno.PARTITION_NOT_AVAIL)
    _enforce_part_limits(spec, partitions, clusters)
    if spec.licenses is not None:
        holding = [c for c in clusters.values() if any(c.partition(p) for p in partitions)]
        if not valid_request(spec.licenses, holding):
            raise SubmitError(SlurmErrno.INVALID_LICENSES)
    req = node_request(spec, nodelist)
    seen: list[Node] = []
    for cluster in clusters.values():
        for pname in partitions:
            part = cluster.partition(pname)
            if part is None:
                continue
            members = [n for n in cluster.nodes if n.name in part.nodes]
            members = [n for n in members if n.name not in excluded]
            seen.extend(members)
            if nodelist and any(name not in part.nodes for name in nodelist):
                continue
            required = [n for n in members if n.name in nodelist]
            if fit and fitting_nodes(req, required, def_mem_per_cpu_mb) < len(nodelist):
                continue  # a required node that could never take its share
            if fit and could_hold(req, members, def_mem_per_cpu_mb):
                return
            if spec.constraint and not any(
                constraint_satisfied(spec.constraint, n.features) for n in members
            ):
                raise SubmitError(SlurmErrno.INVALID_FEATURE)
    if fit:
        raise SubmitError(SlurmErrno.REQUESTED_NODE_CONFIG_UNAVAILABLE, config_detail(spec, seen))


def _part_refusal(spec: JobSpec, cluster: ClusterState, part: Partition) -> SlurmErrno | None:
    """What slurmctld's `_part_access_check` answers, in its order: more CPUs than the
    partition has, more nodes than it has or than its MaxNodes (the job's maximum: `-N 2`
    is 2-2), a time limit beyond its MaxTime."""
    members = [n for n in cluster.nodes if n.name in set(part.nodes)]
    if spec.min_cpus > sum(n.cpus for n in members):
        return SlurmErrno.TOO_MANY_REQUESTED_CPUS
    if spec.nodes_min is not None and spec.nodes_min > len(part.nodes):
        return SlurmErrno.INVALID_NODE_COUNT
    most = spec.nodes_max or spec.nodes_min
    if most is not None and part.max_nodes is not None and most > part.max_nodes:
        return SlurmErrno.INVALID_NODE_COUNT
    limit = spec.time_limit
    if (
        part.max_time != INFINITE
        and limit is not None
        and (limit == INFINITE or limit > part.max_time)
    ):
        return SlurmErrno.INVALID_TIME_LIMIT
    return None


def _enforce_part_limits(
    spec: JobSpec, partitions: tuple[str, ...], clusters: dict[str, ClusterState]
) -> None:
    """EnforcePartLimits=ALL refuses a job that some partition it names would not admit
    (the first refusal), ANY one that none would (the last refusal, as `_valid_job_part`
    keeps it); NO, the default, lets it wait (gateway/scheduler/part_limits.py)."""
    refusals: list[SlurmErrno | None] = []
    enforce = "NO"
    for cluster in clusters.values():
        for name in partitions:
            part = cluster.partition(name)
            if part is not None:
                enforce = cluster.enforce_part_limits
                refusals.append(_part_refusal(spec, cluster, part))
    failed = [r for r in refusals if r is not None]
    if enforce == "ALL" and failed:
        raise SubmitError(failed[0])
    if enforce == "ANY" and failed and len(failed) == len(refusals):
        raise SubmitError(failed[-1])


def gres_types_of(clusters: Iterable[ClusterState]) -> tuple[str, ...]:
    """Slurm's GresTypes: the generic resources some node of these clusters has."""
    clusters = tuple(clusters)
    names = {name for c in clusters for n in c.nodes for name, _, _ in n.gres}
    names |= {"gpu"} if any(n.gpus for c in clusters for n in c.nodes) else set()
    return tuple(sorted(names))


# --- caldera.toml's site tables and [local] slurm_conf ----------------------------------

_NODE_KEYS = frozenset(
    {"name", "cpus", "memory_mb", "gpus", "gres", "features", "sockets", "cores_per_socket"}
    | {"threads_per_core", "weight", "state", "reason", "tmp_disk_mb"}
)
_PART_KEYS = frozenset(
    {"name", "nodes", "default", "max_time", "default_time", "max_nodes", "def_mem_per_cpu_mb"}
    | {"oversubscribe", "state", "priority_tier", "priority_job_factor", "preempt_mode"}
    | {"grace_time"}
)
_ENFORCE = {"NO": "NO", "ANY": "ANY", "YES": "ANY", "ALL": "ALL"}


def _table(kind: str, i: int, item: object, known: frozenset[str]) -> Mapping[str, Any]:
    if not isinstance(item, Mapping):
        raise ValueError(f"{kind}[{i}] must be a table")
    unknown = sorted(set(item) - known)
    if unknown:
        raise ValueError(f"{kind}[{i}]: unknown setting(s) {', '.join(map(repr, unknown))}")
    if not isinstance(item.get("name"), str) or not item["name"]:
        raise ValueError(f"{kind}[{i}]: name is required")
    return item


def _num(where: str, key: str, value: object, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{where}: {key} must be an integer >= {minimum}")
    return value


def _names(where: str, value: object) -> tuple[str, ...]:
    """A list of names, or one comma-separated string (features, hostlists)."""
    if isinstance(value, str):
        return tuple(v for v in value.split(",") if v)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ValueError(f"{where}: expected a list of strings or a comma-separated string")


def _hostlist(where: str, value: object) -> tuple[str, ...]:
    """Node names: a hostlist string (`node[01-04],gpu1`) or a list of them."""
    from gateway.compat.hostlist import HostlistError, expand

    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(v, str) for v in items):
        raise ValueError(f"{where}: nodes must be a hostlist or a list of node names")
    try:
        return tuple(dict.fromkeys(h for v in items for h in expand(v)))
    except HostlistError:
        raise ValueError(f"{where}: invalid hostlist in nodes") from None


def _node_configs(i: int, item: Mapping[str, Any]) -> list[LocalNodeConfig]:
    """One `[[nodes]]` table: `name` may be a hostlist (`node[01-04]`)."""
    from gateway.compat.hostlist import HostlistError, expand

    where = f"nodes[{i}] ({item['name']})"
    try:
        names = expand(item["name"])
    except HostlistError:
        raise ValueError(f"{where}: invalid hostlist") from None
    get = item.get
    cpus, sockets, cores, threads = topology(
        _num(where, "cpus", get("cpus", 0)),
        _num(where, "sockets", get("sockets", 0)),
        _num(where, "cores_per_socket", get("cores_per_socket", 0)),
        _num(where, "threads_per_core", get("threads_per_core", 1), 1),
    )
    gres: tuple[tuple[str, str | None, int], ...] = ()
    if "gres" in item:
        text = ",".join(_names(where, item["gres"]))
        parsed = parse_gres(text) if text else ()
        if parsed is None:
            raise ValueError(f"{where}: cannot read gres {text!r} (name[:type][:count],...)")
        gres = parsed
    gpus = sum(c for n, _, c in gres if n == "gpu")
    if gres and "gpus" in item and item["gpus"] != gpus:
        raise ValueError(f"{where}: gpus = {item['gpus']} but gres has {gpus} GPUs; keep one")
    if not gres:
        gpus = _num(where, "gpus", get("gpus", 0))
    if "memory_mb" not in item:
        raise ValueError(f"{where}: memory_mb is required")
    state = str(get("state", "UNKNOWN")).upper()
    base = LocalNodeConfig(
        name="",
        cpus=cpus,
        memory_mb=_num(where, "memory_mb", item["memory_mb"], 1),
        gpus=gpus,
        features=_names(where, get("features", [])),
        sockets=sockets,
        cores_per_socket=cores,
        threads_per_core=threads,
        gres=gres,
        weight=_num(where, "weight", get("weight", 1)),
        tmp_disk_mb=_num(where, "tmp_disk_mb", get("tmp_disk_mb", 0)),
        state=state,
        reason=None if get("reason") is None else str(get("reason")),
    )
    return [replace(base, name=n) for n in names]


def _partition_config(i: int, p: Mapping[str, Any]) -> PartitionConfig:
    where = f"partitions[{i}] ({p['name']})"
    over = str(p.get("oversubscribe", "NO")).upper()
    kind, _, num = over.partition(":")
    if kind not in ("NO", "EXCLUSIVE", "YES", "FORCE") or (num and not num.isdigit()):
        raise ValueError(f"{where}: oversubscribe must be NO, EXCLUSIVE, YES[:n] or FORCE[:n]")
    state = str(p.get("state", "UP")).upper()
    if state not in ("UP", "DOWN", "DRAIN", "INACTIVE"):
        raise ValueError(f"{where}: state must be UP, DOWN, DRAIN or INACTIVE")
    for key in ("max_time", "default_time"):
        if key in p:
            _minutes(str(p[key]))
    max_nodes = p.get("max_nodes")
    def_mem = p.get("def_mem_per_cpu_mb")
    mode = None
    if p.get("preempt_mode") is not None:
        mode = parse_mode(f"{where}: preempt_mode", p["preempt_mode"]).name
    return PartitionConfig(
        p["name"],
        _hostlist(where, p.get("nodes", [])),
        bool(p.get("default", False)),
        str(p.get("max_time", "UNLIMITED")),
        None if p.get("default_time") is None else str(p["default_time"]),
        max_nodes=None if max_nodes is None else _num(where, "max_nodes", max_nodes, 1),
        def_mem_per_cpu_mb=None if def_mem is None else _num(where, "def_mem_per_cpu_mb", def_mem),
        oversubscribe=f"{kind}:{num or 4}" if kind in ("YES", "FORCE") else kind,
        state=state,
        priority_tier=_num(where, "priority_tier", p.get("priority_tier", 1), 0),
        priority_job_factor=_num(where, "priority_job_factor", p.get("priority_job_factor", 1), 0),
        preempt_mode=mode,
        grace_time_s=_num(where, "grace_time", p.get("grace_time", 0)),
    )


def site_value(name: str, value: Any) -> Any:
    """A caldera.toml site setting (nodes, partitions, licenses, enforce_part_limits,
    local) in its typed form; ValueError names what is wrong."""
    if name == "nodes":
        if not isinstance(value, list) or not value:
            raise ValueError("nodes must be a non-empty array of tables ([[nodes]])")
        items = [_table("nodes", i, v, _NODE_KEYS) for i, v in enumerate(value)]
        return tuple(n for i, item in enumerate(items) for n in _node_configs(i, item))
    if name == "partitions":
        if not isinstance(value, list):
            raise ValueError("partitions must be an array of tables ([[partitions]])")
        items = [_table("partitions", i, v, _PART_KEYS) for i, v in enumerate(value)]
        return tuple(_partition_config(i, p) for i, p in enumerate(items))
    if name == "licenses":
        if isinstance(value, Mapping):
            text = ",".join(f"{k}:{v}" for k, v in value.items())
        else:
            text = str(value)
        lic = parse_licenses(text)
        if lic is None:
            raise ValueError(f"licenses: cannot read {value!r} (name[:count],...)")
        return lic
    if name == "enforce_part_limits":
        if str(value).upper() not in _ENFORCE:
            raise ValueError("enforce_part_limits must be NO, ANY or ALL")
        return _ENFORCE[str(value).upper()]
    if not isinstance(value, Mapping) or set(value) - {"slurm_conf"}:
        raise ValueError("[local] takes one setting: slurm_conf (the path of a slurm.conf)")
    if not isinstance(value.get("slurm_conf"), str):
        raise ValueError("[local] slurm_conf must be a path")
    return dict(value)


def from_slurm_conf(
    local: Mapping[str, Any], values: Mapping[str, Any], toml: Path
) -> dict[str, Any]:
    """The settings `[local] slurm_conf` stands for; refuses what caldera.toml also sets."""
    from gateway.control.config import ConfigError

    path = Path(local["slurm_conf"])
    if not path.is_absolute():
        path = toml.parent / path
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ConfigError(
            f"{toml}: [local] slurm_conf: cannot read {path}: {exc.strerror}"
        ) from None
    try:
        conf = parse_slurm_conf(text, str(path))
    except SlurmConfError as exc:
        raise ConfigError(str(exc)) from None
    both = [k for k in ("nodes", "partitions", "licenses", "enforce_part_limits") if k in values]
    if both:
        raise ConfigError(f"{toml}: {', '.join(both)} set here and by [local] slurm_conf; keep one")
    if not conf.nodes:
        raise ConfigError(f"{path}: no NodeName= line")
    nodes = tuple(
        LocalNodeConfig(
            n.name,
            n.cpus,
            n.memory_mb,
            gpus=sum(c for g, _, c in n.gres if g == "gpu"),
            features=n.features,
            sockets=n.sockets,
            cores_per_socket=n.cores_per_socket,
            threads_per_core=n.threads_per_core,
            gres=n.gres,
            weight=n.weight,
            state=n.state,
            reason=n.reason,
            tmp_disk_mb=n.tmp_disk_mb,
        )
        for n in conf.nodes
    )
    parts = tuple(
        PartitionConfig(
            p.name,
            p.nodes,
            p.default,
            "UNLIMITED" if p.max_time is None else str(p.max_time),
            None if p.default_time is None else str(p.default_time),
            max_nodes=p.max_nodes,
            def_mem_per_cpu_mb=p.def_mem_per_cpu_mb,
            oversubscribe=p.oversubscribe,
            state=p.state,
            priority_tier=p.priority_tier,
            priority_job_factor=p.priority_job_factor,
            preempt_mode=p.preempt_mode,
            grace_time_s=p.grace_time_s,
        )
        for p in conf.partitions
    )
    out: dict[str, Any] = {
        "nodes": nodes,
        "partitions": parts,
        "licenses": conf.licenses,
        "enforce_part_limits": conf.enforce_part_limits,
    }
    out["topology"] = read_site_topology(path, conf.topology_plugin)
    if conf.max_array_size is not None and "max_array_size" not in values:
        out["max_array_size"] = conf.max_array_size
    if conf.accounting_storage_tres is not None and "accounting_storage_tres" not in values:
        out["accounting_storage_tres"] = conf.accounting_storage_tres
    if conf.def_mem_per_cpu_mb and "def_mem_per_cpu_mb" not in values:
        out["def_mem_per_cpu_mb"] = conf.def_mem_per_cpu_mb
    for key, value in (*conf.preempt, *conf.timers):  # unless caldera.toml sets them
        if key not in values:
            out[key] = value
    return out
