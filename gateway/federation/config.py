"""The `[routing]` table of caldera.toml: which clusters a job may go to, and at what cost.

Parsed purely from the TOML mapping and the names of the configured clusters (the local
one first); `parse_routing` returns a complete frozen `RoutingConfig` or raises
`ConfigError` naming the file and the place, so nothing is ever half-applied. The format is
documented in docs/federation.md.
"""

from __future__ import annotations

import math
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from gateway.compat.duration import time_str_to_secs
from gateway.control.config import ConfigError
from gateway.federation.routing import RoutePolicy
from gateway.model.jobspec import JobSpec
from gateway.model.values import INFINITE, NO_VAL

__all__ = [
    "ClusterRouting",
    "FsMap",
    "RoutingConfig",
    "RoutingRule",
    "parse_duration",
    "parse_routing",
]

DEFAULT_MARGIN_S = 300.0
DEFAULT_OUTAGE_TIMEOUT_S = 120.0


@dataclass(frozen=True, slots=True)
class FsMap:
    """A submit-directory prefix and where the same files are on a cluster ("": same path)."""

    submit: str
    path: str

    def translate(self, path: str) -> str | None:
        """`path` on the cluster, or None when this prefix does not cover it."""
        if not _covers(self.submit, path):
            return None
        if not self.path or self.path == self.submit:
            return path
        rest = path[len(self.submit) :].lstrip("/") if self.submit != "/" else path[1:]
        return posixpath.join(self.path, rest) if rest else self.path


@dataclass(frozen=True, slots=True)
class ClusterRouting:
    """`[routing.cluster.NAME]`: how jobs may use one cluster."""

    name: str
    burst: bool = True  # a burst target: jobs that name no cluster may go there
    weight_s: float = 0.0  # seconds added to its predicted start (cost or preference)
    max_jobs: int | None = None  # Caldera's jobs there at once; None: no limit
    images: tuple[str, ...] | None = None  # glob patterns; None: any image
    fs: tuple[FsMap, ...] | None = None  # None: the submit hosts' files are there as is


@dataclass(frozen=True, slots=True)
class RoutingRule:
    """`[[routing.rule]]`: jobs of these partitions and/or QOS go to these clusters."""

    partitions: frozenset[str] | None  # None: any partition
    qos: frozenset[str] | None  # None: any QOS
    clusters: tuple[str, ...]
    where: str  # "[[routing.rule]] #2", for reasons and messages

    def matches(self, partition: str | None, qos: str | None) -> bool:
        """Whether a job of that partition and QOS is ruled by this rule."""
        return (self.partitions is None or partition in self.partitions) and (
            self.qos is None or qos in self.qos
        )


@dataclass(frozen=True, slots=True)
class RoutingConfig:
    """The whole routing table, every configured cluster with its (default) settings."""

    clusters: tuple[str, ...]  # home first, then the others in configuration order
    home: str
    margin_s: float = DEFAULT_MARGIN_S
    burst_after_s: float = 0.0
    outage_timeout_s: float = DEFAULT_OUTAGE_TIMEOUT_S
    pack_s: float = 0.0  # packing favour for the smallest cluster that fits (0: off)
    rules: tuple[RoutingRule, ...] = ()
    per_cluster: Mapping[str, ClusterRouting] = field(default_factory=dict)
    _memo: dict[tuple[str | None, str | None], tuple[str, ...]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def cluster(self, name: str) -> ClusterRouting:
        """One cluster's settings (defaults for a cluster the table does not mention)."""
        found = self.per_cluster.get(name)
        return found if found is not None else ClusterRouting(name)

    def rule_for(self, partition: str | None, qos: str | None) -> RoutingRule | None:
        """The first rule matching a partition and QOS, if any."""
        return next((r for r in self.rules if r.matches(partition, qos)), None)

    def clusters_for(self, partition: str | None, qos: str | None) -> tuple[str, ...]:
        """The clusters a job of that partition and QOS may use when it names none
        (`-M`): the first matching rule's, else home and every burst target."""
        key = (partition, qos)
        found = self._memo.get(key)
        if found is None:
            rule = self.rule_for(partition, qos)
            found = (
                rule.clusters
                if rule is not None
                else tuple(c for c in self.clusters if c == self.home or self.cluster(c).burst)
            )
            if len(self._memo) >= 4096:  # partitions and QOS a site has are few; -p typos not
                self._memo.clear()
            self._memo[key] = found
        return found

    def translate_dir(self, path: str, cluster: str) -> str | None:
        """Where the submit side's `path` is on `cluster`; None: not reachable there."""
        fs = self.cluster(cluster).fs
        if fs is None:
            return path
        if not path.startswith("/"):
            return None
        path = "/" + posixpath.normpath(path).lstrip("/")  # /a/../b is /b, //a is /a
        for entry in fs:  # prefixes of one cluster never overlap: at most one covers it
            got = entry.translate(path)
            if got is not None:
                return got
        return None

    def burst_after_for(self, spec: JobSpec) -> float:
        """Seconds a job waits at home before it may go elsewhere (`--burst-after` wins)."""
        if spec.burst_after_min is not None:
            return spec.burst_after_min * 60.0
        return self.burst_after_s

    def policy(self) -> RoutePolicy:
        """The routing policy (gateway/federation/routing.py) this table stands for."""
        weights = {c: s.weight_s for c, s in self.per_cluster.items() if s.weight_s}
        return RoutePolicy(
            home=self.home, margin_s=self.margin_s, weights=weights, pack_s=self.pack_s
        )


def _covers(prefix: str, path: str) -> bool:
    """Whether directory `prefix` holds `path` (by whole components: /home, not /homework)."""
    return prefix == "/" or path == prefix or path.startswith(prefix + "/")


# --- durations ----------------------------------------------------------------------

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_WITH_UNIT = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_DURATION_HELP = 'seconds as a number, or a time such as "90s", "5m", "2h", "1d", "1:30:00"'


def parse_duration(value: Any, *, signed: bool = False) -> float:
    """Seconds from a TOML number (seconds) or string ("90s", "5m", Slurm's "MM:SS",
    "HH:MM:SS", "D-HH[:MM[:SS]]"); raises ValueError. A bare number in a string ("60") is
    refused: Slurm reads it as minutes, TOML numbers here are seconds."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"invalid duration {value!r} ({_DURATION_HELP})")
    sign = 1.0
    if isinstance(value, str):
        text = value.strip()
        if signed and text.startswith("-"):
            sign, text = -1.0, text[1:].strip()
        seconds = _duration_text(text)
        if seconds is None:
            raise ValueError(f"invalid duration {value!r} ({_DURATION_HELP})")
    else:
        seconds = float(value)
        if not math.isfinite(seconds) or abs(seconds) > 1e12:
            raise ValueError(f"invalid duration {value!r} ({_DURATION_HELP})")
    seconds *= sign
    if seconds < 0 and not signed:
        raise ValueError(f"invalid duration {value!r}: must not be negative")
    return seconds


def _duration_text(text: str) -> float | None:
    if text == "0":
        return 0.0
    unit = _WITH_UNIT.fullmatch(text)
    if unit is not None:
        seconds = float(unit.group(1)) * _UNITS[unit.group(2)]
        return seconds if seconds <= 1e12 else None
    if ":" not in text and "-" not in text:
        return None  # a bare number: minutes to Slurm, seconds to TOML; ask to say which
    got = time_str_to_secs(text)
    return None if got in (NO_VAL, INFINITE) or got < 0 else float(got)


# --- the parser ---------------------------------------------------------------------

_TOP_KEYS = ("home", "margin", "burst_after", "outage_timeout", "pack", "rule", "cluster")
_RULE_KEYS = ("partition", "qos", "clusters")
_CLUSTER_KEYS = ("burst", "weight", "max_jobs", "images", "fs")
_FS_KEYS = ("submit", "path")


class _Place:
    """Builds the messages about one place of the file: `<file>: [routing] margin: ...`."""

    def __init__(self, text: str) -> None:
        self.text = text

    def error(self, what: str) -> ConfigError:
        return ConfigError(f"{self.text}: {what}")

    def table(self, value: Any, keys: Sequence[str], shape: str) -> Mapping[str, Any]:
        """`value` as a table with only `keys`; `shape` says how it is written."""
        if not isinstance(value, Mapping):
            raise self.error(f"must be a table ({shape})")
        unknown = sorted(str(k) for k in value if k not in keys)
        if unknown:
            raise self.error(
                f"unknown setting(s) {', '.join(map(repr, unknown))} (known: {', '.join(keys)})"
            )
        return value


def _unknown_cluster(place: _Place, name: Any, known: Sequence[str]) -> ConfigError:
    return place.error(f"No cluster {name!r} known (clusters: {', '.join(known)})")


def _duration(place: _Place, key: str, value: Any, *, signed: bool = False) -> float:
    try:
        return parse_duration(value, signed=signed)
    except ValueError as exc:
        raise ConfigError(f"{place.text} {key}: {exc}") from None


def _names(place: _Place, key: str, value: Any) -> frozenset[str]:
    """A name or a list of names (`partition = "cpu"` or `["cpu", "gpu"]`)."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise place.error(f"{key} must be a name or a non-empty list of names")
    if not all(isinstance(i, str) and i for i in items):
        raise place.error(f"{key}: every item must be a non-empty string")
    return frozenset(items)


def _rule(place: _Place, where: str, value: Any, known: Sequence[str]) -> RoutingRule:
    table = place.table(value, _RULE_KEYS, "[[routing.rule]]")
    partitions = _names(place, "partition", table["partition"]) if "partition" in table else None
    qos = _names(place, "qos", table["qos"]) if "qos" in table else None
    clusters = table.get("clusters")
    if not isinstance(clusters, list) or not clusters:
        raise place.error('clusters is required: a non-empty list of cluster names (["a", "b"])')
    for name in clusters:
        if not isinstance(name, str) or name not in known:
            raise _unknown_cluster(place, name, known)
    if len(set(clusters)) != len(clusters):
        twice = next(c for c in clusters if clusters.count(c) > 1)
        raise place.error(f"cluster {twice!r} is listed twice")
    return RoutingRule(partitions, qos, tuple(clusters), where)


def _dir(place: _Place, key: str, value: Any, *, empty_ok: bool) -> str:
    """An absolute directory, normalised (no trailing slash, no `.` or `..` parts)."""
    if not isinstance(value, str):
        raise place.error(f"{key} must be a string (an absolute directory)")
    if value == "" and empty_ok:
        return ""
    parts = value.split("/")
    if not value.startswith("/") or ".." in parts or "\0" in value:
        raise place.error(f"{key}: {value!r} is not an absolute directory without '..'")
    return posixpath.normpath(value).replace("//", "/")


def _fs(place: _Place, value: Any) -> tuple[FsMap, ...]:
    if not isinstance(value, list):
        raise place.error("fs must be an array of tables ([[routing.cluster.NAME.fs]])")
    entries: list[FsMap] = []
    for i, item in enumerate(value, 1):
        here = _Place(f"{place.text} fs #{i}")
        table = here.table(item, _FS_KEYS, "submit = ..., path = ...")
        if "submit" not in table:
            raise here.error("submit (a submit-directory prefix) is required")
        entry = FsMap(
            _dir(here, "submit", table["submit"], empty_ok=False),
            _dir(here, "path", table.get("path", ""), empty_ok=True),
        )
        for j, other in enumerate(entries, 1):
            if _covers(other.submit, entry.submit) or _covers(entry.submit, other.submit):
                raise here.error(
                    f"submit prefix {entry.submit} overlaps {other.submit} (fs #{j}); "
                    "a directory must have one place on a cluster"
                )
        entries.append(entry)
    return tuple(entries)


def _cluster(place: _Place, name: str, value: Any, home: str) -> ClusterRouting:
    table = place.table(value, _CLUSTER_KEYS, f"[routing.cluster.{name}]")
    burst = table.get("burst", True)
    if not isinstance(burst, bool):
        raise place.error("burst must be true or false")
    if name == home and "burst" in table:
        raise place.error(f"burst does not apply to the home cluster ({home})")
    max_jobs = table.get("max_jobs")
    if max_jobs is not None and (
        isinstance(max_jobs, bool) or not isinstance(max_jobs, int) or not 0 < max_jobs < 2**31
    ):
        raise place.error(f"max_jobs must be a whole number from 1 to {2**31 - 1}")
    images = table.get("images")
    if images is not None:
        if not isinstance(images, list) or not all(isinstance(i, str) and i for i in images):
            raise place.error('images must be a list of image patterns (["localhost/*"])')
        images = tuple(images)
    weight = _duration(place, "weight", table["weight"], signed=True) if "weight" in table else 0
    fs = _fs(place, table["fs"]) if "fs" in table else None
    return ClusterRouting(name, burst, float(weight), max_jobs, images, fs)


def parse_routing(
    data: Mapping[str, Any], known: Sequence[str], source: str = "caldera.toml"
) -> RoutingConfig:
    """The routing table of a parsed caldera.toml (`data`), for the configured clusters
    `known` (the local cluster first); raises ConfigError naming `source` and the place."""
    known = tuple(known)
    if not known:
        raise ConfigError(f"{source}: [routing]: no cluster is configured")
    place = _Place(f"{source}: [routing]")
    raw = data.get("routing", {})
    table = place.table(raw, _TOP_KEYS, "[routing]")
    home = table.get("home", known[0])
    if not isinstance(home, str) or home not in known:
        raise _unknown_cluster(_Place(f"{place.text} home"), home, known)
    durations = {
        key: _duration(place, key, table[key])
        for key in ("margin", "burst_after", "outage_timeout", "pack")
        if key in table
    }
    if durations.get("outage_timeout", 1.0) <= 0:
        raise place.error("outage_timeout must be more than 0 (how long a cluster may be silent)")
    rules_raw = table.get("rule", [])
    if not isinstance(rules_raw, list):
        raise place.error("rule must be an array of tables ([[routing.rule]])")
    rules: list[RoutingRule] = []
    for i, item in enumerate(rules_raw, 1):
        where = f"[[routing.rule]] #{i}"
        rule = _rule(_Place(f"{source}: {where}"), where, item, known)
        catch_all = next((r for r in rules if r.partitions is None and r.qos is None), None)
        if catch_all is not None:
            raise ConfigError(
                f"{source}: [[routing.rule]] #{i}: never used: {catch_all.where} "
                "(no partition, no qos) matches every job first"
            )
        rules.append(rule)
    per_raw = table.get("cluster", {})
    if not isinstance(per_raw, Mapping):
        raise place.error("cluster must be a table of clusters ([routing.cluster.NAME])")
    per: dict[str, ClusterRouting] = {}
    for name, value in per_raw.items():
        here = _Place(f"{source}: [routing.cluster.{name}]")
        if not isinstance(name, str) or name not in known:
            raise _unknown_cluster(here, name, known)
        per[name] = _cluster(here, name, value, home)
    ordered = (home, *(c for c in known if c != home))
    per = {c: per.get(c) or ClusterRouting(c) for c in ordered}  # every cluster: cheap lookups
    return RoutingConfig(
        clusters=ordered,
        home=home,
        margin_s=durations.get("margin", DEFAULT_MARGIN_S),
        burst_after_s=durations.get("burst_after", 0.0),
        outage_timeout_s=durations.get("outage_timeout", DEFAULT_OUTAGE_TIMEOUT_S),
        pack_s=durations.get("pack", 0.0),
        rules=tuple(rules),
        per_cluster=MappingProxyType(per),
    )
