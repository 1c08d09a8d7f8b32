"""Kubernetes clusters from the gateway's configuration: the `[kubernetes]` table.

    [[kubernetes.cluster]]
    name = "k8s"                                  # the cluster's name in Caldera
    kubeconfig = "/etc/caldera/k8s.kubeconfig"    # or: server, token_file, ca_file
    context = "caldera"                           # optional, with kubeconfig
    volcano = "auto"                              # "auto" (detect), true or false
    namespace = "caldera"                         # and any other K8sOptions field
    [[kubernetes.cluster.filesystem]]             # submit directories the nodes have too
    prefix = "/home"                              # host_path = "/export/home" if it differs
    [[kubernetes.cluster.toleration]]             # taints the job pods tolerate
    key = "dedicated"
    value = "hpc"
    operator = "Equal"
    effect = "NoSchedule"

Every K8sOptions field (k8s_bridge/options.py) may be set by its name; DefMemPerCPU and
KillWait default to the gateway's own so that pods are sized and stopped like local jobs.
Parsing is pure; `make_kubernetes_backends` connects.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from k8s_bridge.options import GangMode, K8sOptions, SharedDir, Toleration

__all__ = [
    "KubeClusterConfig",
    "KubeConfigError",
    "make_kubernetes_backends",
    "parse_kubernetes_cluster",
    "parse_kubernetes_config",
]

_CONNECTION = ("name", "kubeconfig", "context", "server", "token_file", "ca_file", "volcano")
_OPTION_FIELDS = {f.name: f for f in fields(K8sOptions)}
# a pod's dnsPolicy values ("None" needs a dnsConfig, which the configuration does not give)
DNS_POLICIES = ("ClusterFirst", "ClusterFirstWithHostNet", "Default")
_DEFAULTS = K8sOptions()


@dataclass(frozen=True, slots=True)
class KubeClusterConfig:
    """One Kubernetes cluster: how to reach it and how to translate jobs for it."""

    name: str
    options: K8sOptions
    kubeconfig: str | None = None
    context: str | None = None
    server: str | None = None
    token_file: str | None = None
    ca_file: str | None = None
    volcano: bool | None = None  # None: detect


class KubeConfigError(ValueError):
    """The [kubernetes] table is wrong; the message names the place and the key."""


def _string(where: str, key: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise KubeConfigError(f"{where}: {key} must be a non-empty string, not {value!r}")
    return value


def _option(where: str, key: str, value: object) -> object:
    """A K8sOptions value from its TOML form, checked against the default's type."""
    if key == "mode":
        try:
            return GangMode(value)
        except ValueError:
            modes = ", ".join(m.value for m in GangMode)
            raise KubeConfigError(f"{where}: mode must be one of {modes}, not {value!r}") from None
    if key in ("pod_annotations", "pod_labels"):
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise KubeConfigError(f"{where}: {key} must be a table of strings")
        return dict(value)
    if key == "dns_policy":
        if value not in DNS_POLICIES:
            raise KubeConfigError(f"{where}: dns_policy must be one of {', '.join(DNS_POLICIES)}")
        return value
    if key == "worker_command":
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            raise KubeConfigError(f"{where}: worker_command must be a list of strings")
        return tuple(value)
    default = getattr(_DEFAULTS, key)
    if default is None or isinstance(default, str):
        return _string(where, key, value)
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise KubeConfigError(f"{where}: {key} must be true or false, not {value!r}")
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise KubeConfigError(f"{where}: {key} must be a whole number >= 0, not {value!r}")
        return value
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise KubeConfigError(f"{where}: {key} must be a number > 0, not {value!r}")
        return float(value)
    raise KubeConfigError(f"{where}: {key} cannot be set from the configuration")


def _tolerations(where: str, value: object) -> tuple[Toleration, ...]:
    if not isinstance(value, list):
        raise KubeConfigError(f"{where}: toleration must be a list of tables")
    out = []
    for i, item in enumerate(value):
        here = f"{where}.toleration[{i}]"
        if not isinstance(item, dict):
            raise KubeConfigError(f"{here}: must be a table")
        unknown = set(item) - {"key", "operator", "value", "effect"}
        if unknown:
            raise KubeConfigError(f"{here}: unknown setting {sorted(unknown)[0]!r}")
        operator = item.get("operator", "Exists")
        if operator not in ("Exists", "Equal"):
            raise KubeConfigError(f"{here}: operator must be Exists or Equal, not {operator!r}")
        effect = item.get("effect")
        if effect not in (None, "NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise KubeConfigError(f"{here}: unknown effect {effect!r}")
        out.append(
            Toleration(
                key=str(item.get("key", "")),
                operator=operator,
                value=None if item.get("value") is None else str(item["value"]),
                effect=effect,
            )
        )
    return tuple(out)


def _filesystem(where: str, value: object) -> tuple[SharedDir, ...]:
    """`[[kubernetes.cluster.filesystem]]` tables: prefix (and host_path), absolute, not
    nested in one another (a path must have one place on the nodes)."""
    if not isinstance(value, list):
        raise KubeConfigError(f"{where}: filesystem must be a list of tables")
    out: list[SharedDir] = []
    for i, item in enumerate(value):
        here = f"{where}.filesystem[{i}]"
        if not isinstance(item, dict):
            raise KubeConfigError(f"{here}: must be a table")
        unknown = set(item) - {"prefix", "host_path"}
        if unknown:
            raise KubeConfigError(f"{here}: unknown setting {sorted(unknown)[0]!r}")
        paths = [_string(here, k, item[k]) for k in ("prefix", "host_path") if k in item]
        if "prefix" not in item or any(not p.startswith("/") or "/.." in p for p in paths):
            raise KubeConfigError(f"{here}: prefix and host_path must be absolute paths")
        entry = SharedDir(*(posixpath.normpath(p) for p in paths))
        clash = next((d for d in out if d.holds(entry.prefix) or entry.holds(d.prefix)), None)
        if clash is not None:
            raise KubeConfigError(f"{here}: {entry.prefix} overlaps {clash.prefix}")
        out.append(entry)
    return tuple(out)


def _cluster(
    where: str, table: Mapping[str, Any], def_mem_per_cpu_mb: int, kill_wait_s: int
) -> KubeClusterConfig:
    if not isinstance(table, Mapping):
        raise KubeConfigError(f"{where}: must be a table")
    name = _string(where, "name", table.get("name"))
    connection: dict[str, Any] = {}
    options: dict[str, Any] = {
        "def_mem_per_cpu_mb": def_mem_per_cpu_mb,
        "kill_wait_s": kill_wait_s,
    }
    for key, value in table.items():
        if key == "name":
            continue
        if key == "volcano":
            if value not in ("auto", True, False):
                raise KubeConfigError(f'{where}: volcano must be "auto", true or false')
            connection["volcano"] = None if value == "auto" else value
        elif key in _CONNECTION:
            connection[key] = _string(where, key, value)
        elif key == "toleration":
            options["tolerations"] = _tolerations(where, value)
        elif key == "filesystem":
            options["filesystem"] = _filesystem(where, value)
        elif key in _OPTION_FIELDS and key != "tolerations":
            options[key] = _option(where, key, value)
        else:
            raise KubeConfigError(f"{where}: unknown setting {key!r}")
    if "server" in connection and "token_file" not in connection:
        raise KubeConfigError(f"{where}: server needs token_file (a bearer token)")
    if "server" in connection and "kubeconfig" in connection:
        raise KubeConfigError(f"{where}: give either kubeconfig or server, not both")
    return KubeClusterConfig(name=name, options=K8sOptions(**options), **connection)


def parse_kubernetes_cluster(
    table: Mapping[str, Any], where: str, *, def_mem_per_cpu_mb: int = 0, kill_wait_s: int = 30
) -> KubeClusterConfig:
    """One cluster's table (a `[[kubernetes.cluster]]`, or a `[[cluster]]` of caldera.toml
    without its `kind`); `where` starts every error message."""
    return _cluster(where, table, def_mem_per_cpu_mb, kill_wait_s)


def parse_kubernetes_config(
    table: Mapping[str, Any],
    where: str = "[kubernetes]",
    *,
    def_mem_per_cpu_mb: int = 0,
    kill_wait_s: int = 30,
) -> list[KubeClusterConfig]:
    """The clusters of a `[kubernetes]` table; KubeConfigError names what is wrong."""
    unknown = set(table) - {"cluster"}
    if unknown:
        raise KubeConfigError(f"{where}: unknown setting {sorted(unknown)[0]!r}")
    items = table.get("cluster", [])
    if not isinstance(items, list) or not items:
        raise KubeConfigError(f"{where}: needs at least one [[kubernetes.cluster]] table")
    out = [
        _cluster(f"{where}.cluster[{i}]", item, def_mem_per_cpu_mb, kill_wait_s)
        for i, item in enumerate(items)
    ]
    names = [c.name for c in out]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise KubeConfigError(f"{where}: cluster name {dup!r} is used twice")
    return out


def make_kubernetes_backends(clusters: list[KubeClusterConfig]) -> dict[str, Any]:
    """One started KubernetesBackend per configured cluster, by name."""
    from k8s_bridge.backend import KubernetesBackend

    out: dict[str, Any] = {}
    for c in clusters:
        token = Path(c.token_file).read_text().strip() if c.token_file else None
        out[c.name] = KubernetesBackend(
            cluster=c.name,
            kubeconfig=c.kubeconfig,
            context=c.context,
            server=c.server,
            token=token,
            ca_file=c.ca_file,
            volcano=c.volcano,
            options=c.options,
        )
    return out
