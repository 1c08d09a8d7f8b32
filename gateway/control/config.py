"""Gateway configuration: where state lives, who operates, what the local site offers.

Read from `$CALDERA_HOME/caldera.toml` when present; every field has a working default so
`caldera up` needs nothing else.
"""

from __future__ import annotations

import os
import socket
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import Any

import psutil

from gateway.model.topology import Topology
from gateway.scheduler.bf_params import parse_scheduler_parameters

__all__ = [
    "ClusterEntry",
    "ClusterKind",
    "ConfigError",
    "GatewayConfig",
    "LocalNodeConfig",
    "PartitionConfig",
    "default_home",
    "load_config",
]


class ConfigError(ValueError):
    """caldera.toml is wrong; the message names the file and the place."""


class ClusterKind(Enum):
    """What runs a cluster's jobs: this machine, a Slurm cluster, a Kubernetes cluster."""

    LOCAL = "local"
    SLURM = "slurm"
    KUBERNETES = "kubernetes"


@dataclass(frozen=True, slots=True)
class ClusterEntry:
    """A `[[cluster]]` of caldera.toml other than the local one. Its kind's own keys are
    kept as written: the adapter's parser reads them when backends are built
    (gateway/control/backends.py), so that no module but that one imports adapters."""

    name: str
    kind: ClusterKind
    settings: Mapping[str, Any]  # the table without `kind`; `name` included
    where: str  # "<file>: [[cluster]] #2", the start of every message about it


def default_home() -> Path:
    """`$CALDERA_HOME`, else /var/lib/caldera for root, else ~/.caldera."""
    env = os.environ.get("CALDERA_HOME")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/lib/caldera")
    return Path.home() / ".caldera"


@dataclass(frozen=True, slots=True)
class LocalNodeConfig:
    """One node of the local backend (several may share the machine, like `slurmd -N`),
    with what slurm.conf's NodeName= line says of it."""

    name: str
    cpus: int
    memory_mb: int
    gpus: int = 0  # GPUs of any type: the sum of `gres`'s gpu counts when that is given
    features: tuple[str, ...] = ()
    sockets: int = 0  # 0: derived from cpus as slurmctld does (gateway/control/site.py)
    cores_per_socket: int = 0
    threads_per_core: int = 1
    gres: tuple[tuple[str, str | None, int], ...] = ()  # (name, type, count)
    weight: int = 1
    state: str = "UNKNOWN"  # slurm.conf State=: DOWN and DRAIN nodes run nothing
    reason: str | None = None
    tmp_disk_mb: int = 0  # TmpDisk=: --tmp asks a node for at least this
    address: str | None = None  # NodeAddr=, Port= (shown by scontrol show node)
    port: int = 0


@dataclass(frozen=True, slots=True)
class PartitionConfig:
    """A partition of the local site."""

    name: str
    nodes: tuple[str, ...] = ()  # empty: every local node
    default: bool = False
    max_time: str = "UNLIMITED"
    default_time: str | None = None
    max_nodes: int | None = None  # None: UNLIMITED
    def_mem_per_cpu_mb: int | None = None  # None: the site's def_mem_per_cpu_mb
    oversubscribe: str = "NO"  # NO, EXCLUSIVE, YES:<n>, FORCE:<n>
    state: str = "UP"  # UP, DOWN, DRAIN, INACTIVE
    priority_tier: int = 1  # slurm.conf PriorityTier (preempt/partition_prio)
    priority_job_factor: int = 1  # slurm.conf PriorityJobFactor (priority/multifactor)
    preempt_mode: str | None = None  # None: the site's preempt_mode
    grace_time_s: int = 0


def _machine_node() -> LocalNodeConfig:
    mem = psutil.virtual_memory().total // 2**20
    return LocalNodeConfig(
        socket.gethostname().split(".")[0] or "localhost", os.cpu_count() or 1, int(mem)
    )


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    """Everything `caldera up` needs."""

    home: Path
    socket_path: Path
    db_path: Path
    spool_dir: Path
    cluster_name: str = "caldera"
    operators: frozenset[int] = frozenset({0})
    nodes: tuple[LocalNodeConfig, ...] = field(default_factory=lambda: (_machine_node(),))
    partitions: tuple[PartitionConfig, ...] = (PartitionConfig("debug", default=True),)
    def_mem_per_cpu_mb: int = 0  # 0: a job without a memory request may use the node's
    # slurm.conf Licenses (name, total) and EnforcePartLimits (NO, ANY, ALL)
    licenses: tuple[tuple[str, int], ...] = ()
    enforce_part_limits: str = "NO"
    # slurm.conf's TopologyPlugin=topology/tree switch tree (gateway/control/site_topology.py)
    topology: Topology | None = None
    # slurm.conf AccountingStorageTRES: the TRES accounted beyond cpu, mem, node, billing...
    # (gres/gpu:a100, license/matlab); None: not set, GPUs are (gateway/compat/tres.py)
    accounting_storage_tres: tuple[str, ...] | None = None
    # slurm.conf GresTypes, in its order (scontrol show config, GresUsed); (): the GRES
    # the site's nodes have (gateway/control/site.py gres_types_of)
    gres_types: tuple[str, ...] = ()
    # the [local] table: `slurm_conf` names a slurm.conf whose nodes, partitions, licences,
    # DefMemPerCPU and EnforcePartLimits describe the local site (gateway/control/site_tables.py)
    local: dict[str, Any] | None = None
    max_array_size: int = 1001
    kill_wait_s: int = 30
    # slurm.conf AuthInfo=cred_expire (seconds, 5 or more): slurmctld lets a requeued job
    # start again only cred_expire + 1 s after its run ended (batch_requeue_fini)
    cred_expire_s: int = 120
    time_scale: float = 1.0  # real seconds per job second (tests shorten time limits)
    min_job_age_s: int = 300
    cycle_interval_s: float = 0.2
    min_cycle_gap_s: float = 0.05
    plugins: tuple[str, ...] = ()  # empty: the built-in default list
    # Slurm's SchedulerParameters syntax for the backfill knobs (bf_window, bf_resolution,
    # bf_max_job_test, bf_mode, bf_depth, bf_estimates): gateway/scheduler/bf_params.py
    scheduler_parameters: str = ""
    qos: tuple[str, ...] = ("normal",)
    accept_any_qos: bool = True
    job_requeue: bool = True
    # slurm.conf PreemptType, PreemptMode, PreemptExemptTime (gateway/policy/preempt_rules.py)
    preempt_type: str = "preempt/none"
    preempt_mode: str = "OFF"
    preempt_exempt_time: str = "0"
    socket_mode: int = 0o666  # every local user may connect; peer credentials decide
    # API socket bounds (gateway/api/limits.py): idle connections are closed, and one uid
    # may hold only so many open (operators more)
    api_idle_timeout_s: float = 30.0
    api_max_connections_per_user: int = 64
    api_max_connections_operator: int = 1024
    docker_host: str | None = None
    # how the local backend tracks each job's processes (containers.proctrack): auto,
    # cgroup2, freezer (cgroup v1) or session
    proctrack: str = "auto"
    # Slurm and Kubernetes clusters from [[cluster]] tables (the local one sets the fields
    # above instead)
    clusters: tuple[ClusterEntry, ...] = ()
    # [routing]: multi-cluster routing and bursting, parsed by gateway/federation/config.py
    routing: Mapping[str, Any] | None = None
    # Slurm clusters behind the gateway: the [slurm] table (slurm_plugin/clusters.example.toml)
    slurm: dict[str, Any] | None = None
    # Kubernetes clusters behind the gateway: the [kubernetes] table (k8s_bridge/config.py)
    kubernetes: dict[str, Any] | None = None
    # slurm.conf's Priority* settings: the [priority] table (gateway/policy/config.py)
    priority: dict[str, Any] | None = None
    # Prometheus /metrics on TCP: the [metrics] table (gateway/metrics/listener.py)
    metrics: dict[str, Any] | None = None
    # the web dashboard's [dashboard] table (gateway/dashboard/settings.py): TCP listener, key
    dashboard: dict[str, Any] | None = None
    # node agents (ZeroMQ + CURVE); the endpoint actually bound is written to agents.endpoint
    agents: bool = True
    agent_bind: str = "tcp://127.0.0.1:*"
    agent_period_s: float = 1.0
    agent_missed: int = 3


def _coerce(name: str, value: Any) -> Any:
    if name in ("nodes", "partitions", "licenses", "enforce_part_limits", "local"):
        from gateway.control.site_tables import site_value

        try:
            return site_value(name, value)
        except ValueError as exc:
            raise ConfigError(f"caldera.toml: {exc}") from None
    if name == "operators":
        return frozenset(int(v) for v in value) | {0}
    if name == "accounting_storage_tres":
        from gateway.control.slurm_conf import tres_names

        return tres_names(value if isinstance(value, str) else ",".join(value))
    if name in ("qos", "plugins"):
        return tuple(value)
    if name == "priority":
        from gateway.policy.config import priority_config

        try:
            priority_config(value)
        except (ValueError, TypeError, AttributeError) as exc:
            raise ConfigError(f"caldera.toml: {exc}") from None
        return dict(value)
    if name in ("preempt_type", "preempt_mode", "preempt_exempt_time"):
        from gateway.policy.preempt_rules import preempt_config

        try:
            preempt_config({name: value})
        except ValueError as exc:
            raise ConfigError(f"caldera.toml: {exc}") from None
        return str(value)
    if name == "cred_expire_s":
        if not isinstance(value, int) or isinstance(value, bool) or value < 5:
            raise ConfigError(f"caldera.toml: cred_expire_s={value!r}: 5 seconds or more")
        return value
    if name == "scheduler_parameters":
        try:
            parse_scheduler_parameters(str(value))
        except ValueError as exc:
            raise ConfigError(f"caldera.toml: scheduler_parameters: {exc}") from None
        return str(value)
    return value


def load_config(home: Path | None = None, **overrides: Any) -> GatewayConfig:
    """The configuration of the gateway living in `home` (defaults applied)."""
    home = home or default_home()
    values: dict[str, Any] = {
        "home": home,
        "socket_path": Path(os.environ.get("CALDERA_SOCKET", home / "gateway.sock")),
        "db_path": home / "caldera.db",
        "spool_dir": home / "spool",
    }
    path = home / "caldera.toml"
    if path.exists():
        with path.open("rb") as fh:
            data = tomllib.load(fh)
        known = {f.name for f in fields(GatewayConfig)} - {"clusters", "topology", "gres_types"}
        for key, value in data.items():
            if key == "cluster":
                continue
            if key not in known:
                raise ConfigError(f"{path}: unknown setting {key!r}")
            values[key] = _coerce(key, value)
        if "cluster" in data:
            _clusters(str(path), data, values)
        if "routing" in data:
            _check_routing(str(path), data, values)
    values.update(overrides)
    if values.get("local"):
        from gateway.control.site_tables import from_slurm_conf

        values.update(from_slurm_conf(values["local"], values, path))
    _check_preempt(path, values)
    return GatewayConfig(**values)


def _check_preempt(path: Path, values: Mapping[str, Any]) -> None:
    """The preemption settings together (each key alone was checked as it was read):
    e.g. SUSPEND with preempt/qos, which Caldera refuses."""
    from gateway.policy.preempt_rules import preempt_config

    keys = ("preempt_type", "preempt_mode", "preempt_exempt_time")
    try:
        preempt_config({k: values[k] for k in keys if k in values})
    except ValueError as exc:
        local = values.get("local")
        where = f"{path} (with {local['slurm_conf']})" if isinstance(local, dict) else path
        raise ConfigError(f"{where}: {exc}") from None


_LOCAL_KEYS = {"name", "kind", "nodes", "partitions", "licenses", "enforce_part_limits"}
_KINDS = ", ".join(k.value for k in ClusterKind)


def _check_routing(path: str, data: Mapping[str, Any], values: Mapping[str, Any]) -> None:
    """A wrong [routing] table stops `caldera up` with its message (the gateway parses it
    again when it builds its router)."""
    from gateway.federation.config import parse_routing  # it imports ConfigError from here

    names = [
        values.get("cluster_name", "caldera"),
        *(e.name for e in values.get("clusters", ())),
        *_table_names(data, "slurm"),
        *_table_names(data, "kubernetes"),
    ]
    parse_routing(data, names, path)


def _table_names(data: Mapping[str, Any], table: str) -> dict[str, str]:
    """The cluster names an old-style `[slurm]`/`[kubernetes]` table declares, and where."""
    section = data.get(table)
    items = section.get("cluster") if isinstance(section, dict) else None
    if not isinstance(items, list):
        return {}
    return {
        c["name"]: f"[{table}].cluster[{i}]"
        for i, c in enumerate(items)
        if isinstance(c, dict) and isinstance(c.get("name"), str)
    }


def _clusters(path: str, data: Mapping[str, Any], values: dict[str, Any]) -> None:
    """Check the `[[cluster]]` tables and put them in `values`; nothing is put there unless
    every table is right."""
    items = data["cluster"]
    if not isinstance(items, list):
        raise ConfigError(f"{path}: cluster must be an array of tables ([[cluster]])")
    used = {**_table_names(data, "slurm"), **_table_names(data, "kubernetes")}
    local: dict[str, Any] = {}
    entries: list[ClusterEntry] = []
    for i, item in enumerate(items, 1):
        where = f"{path}: [[cluster]] #{i}"
        if not isinstance(item, dict):
            raise ConfigError(f"{where}: must be a table")
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}: name (the cluster's name in Caldera) is required")
        where = f"{where} ({name})"
        try:
            kind = ClusterKind(item.get("kind"))
        except ValueError:
            got = item.get("kind")
            what = "kind is required" if got is None else f"unknown kind {got!r}"
            raise ConfigError(f"{where}: {what} (one of {_KINDS})") from None
        if name in used:
            raise ConfigError(f"{where}: cluster name {name!r} is also configured by {used[name]}")
        used[name] = f"[[cluster]] #{i}"
        if kind is ClusterKind.LOCAL:
            if local:
                raise ConfigError(f"{where}: only one cluster may be of kind 'local'")
            local = _local(where, item, data)
            continue
        settings = {k: v for k, v in item.items() if k != "kind"}
        entries.append(ClusterEntry(name, kind, settings, where))
    local_name = local.get("cluster_name", values.get("cluster_name", "caldera"))
    for entry in entries:
        if entry.name == local_name:
            raise ConfigError(
                f"{entry.where}: cluster name {entry.name!r} is the local cluster's (cluster_name)"
            )
    values.update(local)
    values["clusters"] = tuple(entries)


def _local(where: str, item: Mapping[str, Any], data: Mapping[str, Any]) -> dict[str, Any]:
    """The top-level settings a `kind = "local"` cluster stands for."""
    unknown = sorted(set(item) - _LOCAL_KEYS)
    if unknown:
        raise ConfigError(
            f"{where}: unknown setting(s) {', '.join(map(repr, unknown))} for kind 'local'"
        )
    if "cluster_name" in data and data["cluster_name"] != item["name"]:
        raise ConfigError(
            f"{where}: the local cluster is named {item['name']!r} here and "
            f"{data['cluster_name']!r} by cluster_name; keep one"
        )
    out: dict[str, Any] = {"cluster_name": item["name"]}
    for key in ("nodes", "partitions", "licenses", "enforce_part_limits"):
        if key in item:
            if key in data:
                raise ConfigError(f"{where}: {key} is also set at the top level; keep one")
            out[key] = _coerce(key, item[key])
    return out
