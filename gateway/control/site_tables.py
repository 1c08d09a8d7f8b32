"""caldera.toml's site tables (`nodes`, `partitions`, ...) and `[local] slurm_conf`, read
into GatewayConfig's values as slurmctld reads slurm.conf's NodeName= and PartitionName=
lines (gateway/control/site.py makes the site's ClusterState from them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from gateway.control.config import LocalNodeConfig, PartitionConfig
from gateway.control.site import partition_minutes
from gateway.control.site_topology import read_site_topology
from gateway.control.slurm_conf import (
    SlurmConfError,
    parse_gres,
    parse_licenses,
    parse_slurm_conf,
    topology,
)
from gateway.policy.preempt_rules import parse_mode

__all__ = ["from_slurm_conf", "site_value"]

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
            partition_minutes(str(p[key]))
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
            address=n.address,
            port=n.port,
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
    if conf.gres_types:
        out["gres_types"] = conf.gres_types
    if conf.accounting_storage_tres is not None and "accounting_storage_tres" not in values:
        out["accounting_storage_tres"] = conf.accounting_storage_tres
    if conf.def_mem_per_cpu_mb and "def_mem_per_cpu_mb" not in values:
        out["def_mem_per_cpu_mb"] = conf.def_mem_per_cpu_mb
    for key, value in (*conf.preempt, *conf.timers):  # unless caldera.toml sets them
        if key not in values:
            out[key] = value
    return out
