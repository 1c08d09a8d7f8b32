"""What the readers of Slurm's JSON share: their results and small value converters
(strings, integers, times, reasons, TRES items, holds, arrays)."""

from __future__ import annotations

import grp
import json
import pwd
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.compat.arrays import parse_array
from gateway.compat.fmt_common import (
    JobExtras,
    NodeExtras,
    PartitionExtras,
)
from gateway.compat.gres import parse_gres
from gateway.model.cluster import ClusterState
from gateway.model.job import Hold, Job, Step
from gateway.model.jobspec import Sharing
from gateway.model.state import Reason
from gateway.model.values import INFINITE, ArraySpec, GresItem

Doc = Mapping[str, Any]
UidOf = Callable[[str], int]


@dataclass(frozen=True, slots=True)
class SlurmJobs:
    """squeue's view: jobs in slurmctld's order, and what the model cannot hold."""

    jobs: tuple[Job, ...]
    extras: dict[int, JobExtras] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SlurmAccounting:
    """sacct's view: job records, their steps (by the record's job id) and extras."""

    jobs: tuple[Job, ...]
    steps: dict[int, tuple[Step, ...]] = field(default_factory=dict)
    extras: dict[int, JobExtras] = field(default_factory=dict)
    tres_ids: dict[str, int] = field(default_factory=dict)  # "gres/gpu" -> slurmdbd's id


@dataclass(frozen=True, slots=True)
class SlurmCluster:
    """sinfo's view: the cluster plus per-node and per-partition extras."""

    cluster: ClusterState
    node_extras: dict[str, NodeExtras] = field(default_factory=dict)
    partition_extras: dict[str, PartitionExtras] = field(default_factory=dict)


def _load(doc: Doc | str) -> Doc:
    if isinstance(doc, str):
        loaded: Doc = json.loads(doc)
        return loaded
    return doc


def _default_uid(name: str) -> int:
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return -1


def _default_gid(name: str) -> int:
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        return -1


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value != "" else None


def _int(value: Any, default: int = 0) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else default


def _opt_int(value: Any) -> int | None:
    """An integer as printed, None for null (or anything else)."""
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _time(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and value not in (0, INFINITE) else None


def _reason(text: str) -> tuple[Reason, str | None]:
    try:
        return Reason.parse(text), None
    except ValueError:
        return Reason.NONE, text


def _tres_items(text: str | None) -> tuple[GresItem, ...]:
    if not text:
        return ()
    items: list[GresItem] = []
    for part in text.split(","):
        body = part.removeprefix("gres:").removeprefix("gres/")
        parsed = parse_gres(body)
        if parsed:
            items.extend(parsed)
    return tuple(items)


_SHARED = {
    "none": Sharing.EXCLUSIVE,
    "shared": Sharing.OVERSUBSCRIBE,
    "user": Sharing.USER,
    "mcs": Sharing.MCS,
}


def _per_gpu(text: str | None) -> int | None:
    """`gres:gpu:61440` (memory_per_tres, cpus_per_tres) -> 61440."""
    if not text or not text.startswith("gres:gpu:"):
        return None
    tail = text.rsplit(":", 1)[1]
    return int(tail) if tail.isdigit() else None


def _hold(reason: Reason) -> Hold | None:
    if reason is Reason.JOB_HELD_USER:
        return Hold.USER
    if reason is Reason.JOB_HELD_ADMIN:
        return Hold.ADMIN
    return None


def _array_spec(text: str | None, throttle: int) -> ArraySpec | None:
    if not text:
        return None
    body = text.split("%", 1)[0]
    parsed = parse_array(body, max_array_size=4_000_001)
    if parsed is None:
        return None
    return ArraySpec(parsed.ranges, throttle)
