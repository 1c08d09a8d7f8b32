"""Gateway configuration: where state lives, who operates, what the local site offers.

Read from `$CALDERA_HOME/caldera.toml` when present; every field has a working default so
`caldera up` needs nothing else.
"""

from __future__ import annotations

import os
import socket
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import psutil

__all__ = ["GatewayConfig", "LocalNodeConfig", "PartitionConfig", "default_home", "load_config"]


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
    """One node of the local backend (several may share the machine, like `slurmd -N`)."""

    name: str
    cpus: int
    memory_mb: int
    gpus: int = 0
    features: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PartitionConfig:
    """A partition of the local site."""

    name: str
    nodes: tuple[str, ...] = ()  # empty: every local node
    default: bool = False
    max_time: str = "UNLIMITED"
    default_time: str | None = None


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
    max_array_size: int = 1001
    kill_wait_s: int = 30
    time_scale: float = 1.0  # real seconds per job second (tests shorten time limits)
    min_job_age_s: int = 300
    cycle_interval_s: float = 0.2
    min_cycle_gap_s: float = 0.05
    plugins: tuple[str, ...] = ()  # empty: the built-in default list
    qos: tuple[str, ...] = ("normal",)
    accept_any_qos: bool = True
    job_requeue: bool = True
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
    # Slurm clusters behind the gateway: the [slurm] table (slurm_plugin/clusters.example.toml)
    slurm: dict[str, Any] | None = None
    # Kubernetes clusters behind the gateway: the [kubernetes] table (k8s_bridge/config.py)
    kubernetes: dict[str, Any] | None = None
    # node agents (ZeroMQ + CURVE); the endpoint actually bound is written to agents.endpoint
    agents: bool = True
    agent_bind: str = "tcp://127.0.0.1:*"
    agent_period_s: float = 1.0
    agent_missed: int = 3


def _coerce(name: str, value: Any) -> Any:
    if name == "nodes":
        return tuple(
            LocalNodeConfig(
                n["name"],
                int(n["cpus"]),
                int(n["memory_mb"]),
                int(n.get("gpus", 0)),
                tuple(n.get("features", ())),
            )
            for n in value
        )
    if name == "partitions":
        return tuple(
            PartitionConfig(
                p["name"],
                tuple(p.get("nodes", ())),
                bool(p.get("default", False)),
                str(p.get("max_time", "UNLIMITED")),
                p.get("default_time"),
            )
            for p in value
        )
    if name == "operators":
        return frozenset(int(v) for v in value) | {0}
    if name in ("qos", "plugins"):
        return tuple(value)
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
        known = {f.name for f in fields(GatewayConfig)}
        for key, value in data.items():
            if key not in known:
                raise ValueError(f"{path}: unknown setting {key!r}")
            values[key] = _coerce(key, value)
    values.update(overrides)
    return GatewayConfig(**values)
