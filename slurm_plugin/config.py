"""Slurm clusters behind Caldera: the configuration file and its typed form.

One TOML file (documented, with every key, in `slurm_plugin/clusters.example.toml`) names
each Slurm cluster, says how to reach it and which of its partitions Caldera offers under
which names. The same tables may live in `caldera.toml` under `[slurm]`; `parse_slurm_config`
takes either document.

```toml
[[cluster]]
name = "hpc"                              # Caldera's name for the cluster (Job.cluster)
transport = "cli"                         # "cli" | "rest" | "pyslurm"
slurm_conf = "/etc/slurm/slurm.conf"      # SLURM_CONF for the commands
rest_url = "unix:/run/slurmrestd.sock"    # slurmrestd (unix:PATH, or http://host:port)
[[cluster.partition]]
slurm = "batch"                           # the partition on the cluster
name = "hpc-batch"                        # the name Caldera shows (default: the same)
```
"""

from __future__ import annotations

import os
import socket
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

__all__ = [
    "ContainerConfig",
    "OfferedPartition",
    "RestAuth",
    "SlurmClusterConfig",
    "SlurmConfigError",
    "SlurmSiteConfig",
    "SubmitAs",
    "Transport",
    "load_slurm_config",
    "parse_slurm_cluster",
    "parse_slurm_config",
]


class SlurmConfigError(ValueError):
    """The configuration file is malformed; the message names the file and the key."""


class Transport(Enum):
    """How Caldera submits to and controls a cluster."""

    CLI = "cli"  # sbatch/squeue/scontrol/scancel/sacct/sinfo with SLURM_CONF
    REST = "rest"  # slurmrestd
    PYSLURM = "pyslurm"  # the pyslurm extension, when installed and matching the site


class SubmitAs(Enum):
    """Whose identity the commands run with (the job runs as that user on Slurm)."""

    USER = "user"  # the job's user: the commands run with its uid/gid (gateway is root)
    UID_OPTION = "uid-option"  # root runs `sbatch --uid=U --gid=G`
    SERVICE = "service"  # the gateway's own identity: every job runs as the gateway's user


class RestAuth(Enum):
    """How slurmrestd authenticates Caldera."""

    LOCAL = "local"  # rest_auth/local: the Unix socket peer's user (22.05's only choice here)
    JWT = "jwt"  # auth/jwt: X-SLURM-USER-NAME + X-SLURM-USER-TOKEN headers


@dataclass(frozen=True, slots=True)
class OfferedPartition:
    """A Slurm partition Caldera offers, and the name it has in Caldera."""

    slurm: str
    name: str
    default: bool = False


@dataclass(frozen=True, slots=True)
class ContainerConfig:
    """How a job that asks for an image runs in a container on the Slurm nodes."""

    runtime: str = "podman"  # "podman" (rootless as the job's user, rootful as root) | "none"
    runtime_path: str = "podman"
    containers_conf: str | None = None  # CONTAINERS_CONF exported to the runtime
    image_archive_dir: str | None = None  # <dir>/<image as file name>.tar, loaded when missing
    network: str = "host"  # the job's nodes' network: srun/MPI peers and services
    extra_args: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SlurmClusterConfig:
    """One Slurm cluster and how Caldera reaches it."""

    name: str
    transport: Transport = Transport.CLI
    slurm_conf: str | None = None  # None: the commands' default (/etc/slurm/slurm.conf)
    bin_dir: str | None = None  # where sbatch & co live (None: PATH)
    commands: bool = True  # the Slurm commands can be run from the gateway host
    rest_url: str | None = None  # unix:PATH (may hold {user}) or http(s)://host:port
    rest_auth: RestAuth = RestAuth.LOCAL
    rest_user: str | None = None  # who slurmrestd acts as (local auth); None: any user
    rest_token_file: str | None = None  # JWT (auth/jwt); may hold {user}
    rest_versions: tuple[str, ...] = ("v0.0.38", "v0.0.37", "v0.0.36")  # preference order
    submit_as: SubmitAs = SubmitAs.USER
    instance: str = field(default_factory=lambda: socket.gethostname().split(".")[0] or "gw")
    partitions: tuple[OfferedPartition, ...] = ()  # empty: every partition, same names
    node_prefix: str = ""  # prepended to node names in Caldera (clusters may share names)
    poll_interval_s: float = 0.25
    refresh_s: float = 30.0  # rediscovery of nodes and partitions
    command_timeout_s: float = 30.0
    unreachable_backoff_s: float = 2.0  # submit fails fast this long after a failure
    predict_ttl_s: float = 5.0  # one answer of Slurm's planner serves a job shape this long
    containers: ContainerConfig = ContainerConfig()
    native_dependencies: bool = True  # pass dependencies among this cluster's jobs to Slurm

    def offered(self, slurm_partition: str) -> str | None:
        """Caldera's name for a Slurm partition, or None when it is not offered."""
        if not self.partitions:
            return slurm_partition
        for p in self.partitions:
            if p.slurm == slurm_partition:
                return p.name
        return None

    def slurm_partition(self, name: str) -> str | None:
        """The Slurm partition behind a Caldera partition name, or None."""
        if not self.partitions:
            return name
        for p in self.partitions:
            if p.name == name:
                return p.slurm
        return None

    def command_env(self) -> dict[str, str]:
        """What the commands need besides the caller's environment."""
        return {"SLURM_CONF": self.slurm_conf} if self.slurm_conf else {}

    def command(self, name: str) -> str:
        """The path of a Slurm command."""
        return str(Path(self.bin_dir) / name) if self.bin_dir else name


@dataclass(frozen=True, slots=True)
class SlurmSiteConfig:
    """Every configured Slurm cluster."""

    clusters: tuple[SlurmClusterConfig, ...] = ()

    def cluster(self, name: str) -> SlurmClusterConfig:
        """The cluster of that name; KeyError when unknown."""
        for c in self.clusters:
            if c.name == name:
                return c
        raise KeyError(name)


_CLUSTER_KEYS = {
    "name",
    "transport",
    "slurm_conf",
    "bin_dir",
    "commands",
    "rest_url",
    "rest_auth",
    "rest_user",
    "rest_token_file",
    "rest_versions",
    "submit_as",
    "instance",
    "partition",
    "node_prefix",
    "poll_interval_s",
    "refresh_s",
    "command_timeout_s",
    "unreachable_backoff_s",
    "predict_ttl_s",
    "containers",
    "native_dependencies",
}
_PARTITION_KEYS = {"slurm", "name", "default"}
_CONTAINER_KEYS = {
    "runtime",
    "runtime_path",
    "containers_conf",
    "image_archive_dir",
    "network",
    "extra_args",
}


def _err(where: str, message: str) -> SlurmConfigError:
    return SlurmConfigError(f"{where}: {message}")


def _check_keys(where: str, data: Mapping[str, Any], known: set[str]) -> None:
    unknown = sorted(set(data) - known)
    if unknown:
        raise _err(where, f"unknown setting(s) {', '.join(map(repr, unknown))}")


def _str(where: str, data: Mapping[str, Any], key: str, default: str | None = None) -> str | None:
    value = data.get(key, default)
    if value is not None and not isinstance(value, str):
        raise _err(where, f"{key} must be a string")
    return value


def _float(where: str, data: Mapping[str, Any], key: str, default: float) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise _err(where, f"{key} must be a non-negative number")
    return float(value)


def _enum(where: str, data: Mapping[str, Any], key: str, kind: type[Any], default: Any) -> Any:
    value = data.get(key)
    if value is None:
        return default
    try:
        return kind(value)
    except ValueError:
        choices = ", ".join(repr(m.value) for m in kind)
        raise _err(where, f"{key} must be one of {choices}, not {value!r}") from None


def _partitions(where: str, items: Any) -> tuple[OfferedPartition, ...]:
    if not isinstance(items, list):
        raise _err(where, "partition must be an array of tables ([[cluster.partition]])")
    out: list[OfferedPartition] = []
    for i, item in enumerate(items):
        here = f"{where}.partition[{i}]"
        if not isinstance(item, dict):
            raise _err(here, "must be a table")
        _check_keys(here, item, _PARTITION_KEYS)
        slurm = _str(here, item, "slurm")
        if not slurm:
            raise _err(here, "slurm (the partition's name on the cluster) is required")
        name = _str(here, item, "name") or slurm
        out.append(OfferedPartition(slurm, name, bool(item.get("default", False))))
    names = [p.name for p in out]
    if len(set(names)) != len(names):
        raise _err(where, "two offered partitions have the same name")
    return tuple(out)


def _containers(where: str, data: Any) -> ContainerConfig:
    here = f"{where}.containers"
    if not isinstance(data, dict):
        raise _err(here, "must be a table")
    _check_keys(here, data, _CONTAINER_KEYS)
    extra = data.get("extra_args", [])
    if not isinstance(extra, list) or not all(isinstance(a, str) for a in extra):
        raise _err(here, "extra_args must be an array of strings")
    runtime = _str(here, data, "runtime", "podman") or "podman"
    if runtime not in ("podman", "none"):
        raise _err(here, f"runtime must be 'podman' or 'none', not {runtime!r}")
    return ContainerConfig(
        runtime=runtime,
        runtime_path=_str(here, data, "runtime_path", "podman") or "podman",
        containers_conf=_str(here, data, "containers_conf"),
        image_archive_dir=_str(here, data, "image_archive_dir"),
        network=_str(here, data, "network", "host") or "host",
        extra_args=tuple(extra),
    )


def _cluster(where: str, data: Any) -> SlurmClusterConfig:
    if not isinstance(data, dict):
        raise _err(where, "must be a table ([[cluster]])")
    _check_keys(where, data, _CLUSTER_KEYS)
    name = _str(where, data, "name")
    if not name:
        raise _err(where, "name is required")
    return _named_cluster(f"{where} ({name})", name, data)


def _named_cluster(where: str, name: str, data: Mapping[str, Any]) -> SlurmClusterConfig:
    transport = _enum(where, data, "transport", Transport, Transport.CLI)
    rest_url = _str(where, data, "rest_url")
    if transport is Transport.REST and not rest_url:
        raise _err(where, "transport 'rest' needs rest_url")
    if rest_url and not rest_url.startswith(("unix:", "http://", "https://")):
        raise _err(where, f"rest_url must start with unix:, http:// or https://: {rest_url!r}")
    commands = data.get("commands", True)
    if not isinstance(commands, bool):
        raise _err(where, "commands must be true or false")
    if not commands and transport is not Transport.REST:
        raise _err(where, "commands = false needs transport 'rest'")
    versions = data.get("rest_versions", ["v0.0.38", "v0.0.37", "v0.0.36"])
    if not isinstance(versions, list) or not all(isinstance(v, str) for v in versions):
        raise _err(where, "rest_versions must be an array of strings")
    kwargs: dict[str, Any] = {}
    instance = _str(where, data, "instance")
    if instance is not None:
        if not instance or any(c.isspace() or c == ":" for c in instance):
            raise _err(where, "instance must be a non-empty word without ':'")
        kwargs["instance"] = instance
    return SlurmClusterConfig(
        name=name,
        transport=transport,
        slurm_conf=_str(where, data, "slurm_conf"),
        bin_dir=_str(where, data, "bin_dir"),
        commands=commands,
        rest_url=rest_url,
        rest_auth=_enum(where, data, "rest_auth", RestAuth, RestAuth.LOCAL),
        rest_user=_str(where, data, "rest_user"),
        rest_token_file=_str(where, data, "rest_token_file"),
        rest_versions=tuple(versions),
        submit_as=_enum(where, data, "submit_as", SubmitAs, SubmitAs.USER),
        partitions=_partitions(where, data.get("partition", [])),
        node_prefix=_str(where, data, "node_prefix", "") or "",
        poll_interval_s=_float(where, data, "poll_interval_s", 0.25),
        refresh_s=_float(where, data, "refresh_s", 30.0),
        command_timeout_s=_float(where, data, "command_timeout_s", 30.0),
        unreachable_backoff_s=_float(where, data, "unreachable_backoff_s", 2.0),
        predict_ttl_s=_float(where, data, "predict_ttl_s", 5.0),
        containers=_containers(where, data.get("containers", {})),
        native_dependencies=bool(data.get("native_dependencies", True)),
        **kwargs,
    )


def parse_slurm_cluster(name: str, data: Mapping[str, Any], where: str) -> SlurmClusterConfig:
    """One named cluster's table (a `[[cluster]]` of caldera.toml, without its `kind`);
    `where` (which names the cluster) starts every error message."""
    _check_keys(where, data, _CLUSTER_KEYS)
    return _named_cluster(where, name, data)


def parse_slurm_config(data: Mapping[str, Any], where: str = "slurm config") -> SlurmSiteConfig:
    """The typed form of a document with `[[cluster]]` tables (or `[slurm]` holding them)."""
    if "slurm" in data and isinstance(data["slurm"], dict):
        data = data["slurm"]
    _check_keys(where, data, {"cluster"})
    items = data.get("cluster", [])
    if not isinstance(items, list):
        raise _err(where, "cluster must be an array of tables ([[cluster]])")
    clusters = tuple(_cluster(f"{where}: cluster[{i}]", c) for i, c in enumerate(items))
    names = [c.name for c in clusters]
    if len(set(names)) != len(names):
        raise _err(where, "two clusters have the same name")
    return SlurmSiteConfig(clusters)


def load_slurm_config(path: str | os.PathLike[str]) -> SlurmSiteConfig:
    """Read and check a clusters file."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise SlurmConfigError(f"{p}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise SlurmConfigError(f"{p}: {exc}") from exc
    return parse_slurm_config(data, str(p))
