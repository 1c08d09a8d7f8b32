"""The `Key=value` settings sacctmgr accepts for associations and QOS, parsed into one
typed change each (`sacctmgr_set_assoc_rec` in association_functions.c, `_set_rec` in
qos_functions.c, with their keyword lengths). Values are checked here, before anything is
applied, so a bad value changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.policy.model import Qos
from gateway.policy.sacctmgr_parse import Pair, keyword
from gateway.policy.values import (
    SacctmgrError,
    parse_count,
    parse_float,
    parse_minutes,
    parse_seconds,
    parse_tres,
)

__all__ = ["Change", "assoc_changes", "qos_changes", "unknown_option"]


@dataclass(frozen=True, slots=True)
class Change:
    """One setting: the record field, its new value (CLEAR: unset), and for lists the
    operation ("" replace, "+" add, "-" remove); `label`/`shown` as sacctmgr echoes it."""

    field: str
    value: Any
    op: str = ""
    label: str = ""
    shown: str = ""


# (keyword, min length, field, kind, label in the " Settings" echo)
_ASSOC_KEYS: tuple[tuple[str, int, str, str, str], ...] = (
    ("DefaultQOS", 8, "default_qos", "qosname", "DefQOS"),
    ("FairShare", 1, "shares", "shares", "Fairshare"),
    ("Shares", 1, "shares", "shares", "Fairshare"),
    ("GrpCPUs", 7, "grp_tres.cpu", "count", "GrpTRES"),
    ("GrpJobs", 4, "grp_jobs", "count", "GrpJobs"),
    ("GrpMemory", 4, "grp_tres.mem", "count", "GrpTRES"),
    ("GrpNodes", 4, "grp_tres.node", "count", "GrpTRES"),
    ("GrpSubmitJobs", 4, "grp_submit", "count", "GrpSubmitJobs"),
    ("GrpTRES", 7, "grp_tres", "tres", "GrpTRES"),
    ("GrpWall", 4, "grp_wall", "wall", "GrpWall"),
    ("MaxCpusPerJob", 7, "max_tres_pj.cpu", "count", "MaxTRES"),
    ("MaxJobs", 4, "max_jobs", "count", "MaxJobs"),
    ("MaxNodesPerJob", 4, "max_tres_pj.node", "count", "MaxTRES"),
    ("MaxSubmitJobs", 4, "max_submit", "count", "MaxSubmitJobs"),
    ("MaxTRESPerJob", 7, "max_tres_pj", "tres", "MaxTRES"),
    ("MaxWallDurationPerJob", 4, "max_wall", "wall", "MaxWall"),
    ("Parent", 1, "parent", "name", "Parent"),
    ("Priority", 3, "priority", "count", "Priority"),
    ("QosLevel", 1, "qos", "qoslist", "QOS"),
)

_QOS_KEYS: tuple[tuple[str, int, str, str, str], ...] = (
    ("Description", 1, "description", "text", "Description"),
    ("Flags", 2, "flags", "flags", "Flags"),
    ("GraceTime", 3, "grace_time_s", "count", "GraceTime"),  # get_uint: seconds
    ("GrpJobs", 4, "grp_jobs", "count", "GrpJobs"),
    ("GrpSubmitJobs", 4, "grp_submit", "count", "GrpSubmitJobs"),
    ("GrpTRES", 7, "grp_tres", "tres", "GrpTRES"),
    ("GrpWall", 4, "grp_wall", "wall", "GrpWall"),
    ("MaxJobsPerUser", 4, "max_jobs_pu", "count", "MaxJobsPerUser"),
    ("MaxJobsPU", 9, "max_jobs_pu", "count", "MaxJobsPerUser"),
    ("MaxSubmitJobsPerUser", 4, "max_submit_pu", "count", "MaxSubmitJobsPerUser"),
    ("MaxSubmitJobsPU", 10, "max_submit_pu", "count", "MaxSubmitJobsPerUser"),
    ("MaxSubmitPU", 10, "max_submit_pu", "count", "MaxSubmitJobsPerUser"),
    ("MaxTRESPerJob", 7, "max_tres_pj", "tres", "MaxTRESPerJob"),
    ("MaxTRESPerUser", 11, "max_tres_pu", "tres", "MaxTRESPerUser"),
    ("MaxTRESPU", 9, "max_tres_pu", "tres", "MaxTRESPerUser"),
    ("MaxWallDurationPerJob", 4, "max_wall", "wall", "MaxWall"),
    ("Preempt", 7, "preempt", "qoslist", "Preempt"),
    ("PreemptMode", 8, "preempt_mode", "mode", "PreemptMode"),
    ("PreemptExemptTime", 8, "preempt_exempt_s", "seconds", "PreemptExemptTime"),
    ("Priority", 3, "priority", "count", "Priority"),
    ("UsageFactor", 6, "usage_factor", "float", "UsageFactor"),
)

_PREEMPT_MODES = ("cluster", "off", "cancel", "requeue", "suspend", "gang")
_QOS_FLAGS = (
    "DenyOnLimit",
    "EnforceUsageThreshold",
    "NoDecay",
    "NoReserve",
    "OverPartQOS",
    "PartitionMaxNodes",
    "PartitionMinNodes",
    "PartitionTimeLimit",
    "Privileged",  # Caldera's: delayed job-level preemption (docs/preemption.md)
    "RequiresReservation",
    "UsageFactorSafe",
)


def unknown_option(pair: Pair) -> SacctmgrError:
    """sacctmgr's answer to a `set` key it does not know."""
    return SacctmgrError(f" Unknown option: {pair.raw}\n Use keyword 'where' to modify condition")


def _lookup(
    table: Sequence[tuple[str, int, str, str, str]], key: str
) -> tuple[str, int, str, str, str] | None:
    return next((row for row in table if keyword(key, row[0], row[1])), None)


def _value(kind: str, pair: Pair, what: str, qos: Mapping[str, Qos]) -> Any:
    text = pair.value
    if kind == "count":
        return parse_count(text, what)
    if kind == "shares":
        if text.lower().startswith("parent"):
            return None
        return parse_count(text, "FairShare")
    if kind == "tres":
        return parse_tres(text)
    if kind == "wall":
        return parse_minutes(text, what, pair.raw)
    if kind == "seconds":
        return parse_seconds(text, what, pair.raw)
    if kind == "float":
        return parse_float(text, what)
    if kind in ("name", "text"):
        return text.strip("'\"")
    if kind == "qosname":
        name = text.strip("'\"").lower()
        if name not in qos:
            raise SacctmgrError(
                f"You gave a bad default qos '{text}'.  Use 'list qos' to get complete list."
            )
        return name
    if kind == "qoslist":
        names = tuple(n.strip().lower() for n in text.strip("'\"").split(",") if n.strip())
        for name in names:
            if name not in qos:
                valid = ",".join(qos)
                raise SacctmgrError(
                    f"sacctmgr: error: You gave a bad qos '{name}'. Valid QOS's are {valid}"
                )
        return names
    if kind == "mode":
        mode = text.strip("'\"").lower()
        if mode not in _PREEMPT_MODES:
            raise SacctmgrError(f"sacctmgr: error: Unknown preempt mode '{text}'")
        return mode
    if kind == "flags":
        out = []
        for flag in (f for f in text.split(",") if f):
            found = next((f for f in _QOS_FLAGS if f.lower() == flag.lower()), None)
            if found is None:
                raise SacctmgrError(f"sacctmgr: error: Unknown QOS flag '{flag}'")
            out.append(found)
        return tuple(out)
    raise AssertionError(kind)


def _changes(
    table: Sequence[tuple[str, int, str, str, str]],
    pairs: Sequence[Pair],
    qos: Mapping[str, Qos],
    modify: bool,
) -> list[Change]:
    try:
        return _parse_all(table, pairs, qos)
    except SacctmgrError as exc:
        if modify and len(pairs) == 1 and exc.message.startswith("sacctmgr: error: Invalid"):
            # sacctmgr goes on after a bad value; with nothing else given it then says so
            raise SacctmgrError(exc.message + "\n You didn't give me anything to set") from None
        raise


def _parse_all(
    table: Sequence[tuple[str, int, str, str, str]],
    pairs: Sequence[Pair],
    qos: Mapping[str, Qos],
) -> list[Change]:
    out: list[Change] = []
    for pair in pairs:
        row = _lookup(table, pair.key)
        if row is None:
            raise unknown_option(pair)
        name, _, dest, kind, label = row
        value = _value(kind, pair, label if kind == "wall" else name, qos)
        if "." in dest:  # GrpCPUs=8 -> grp_tres["cpu"] = 8
            dest, tres = dest.split(".")
            value = {tres: value}
        if pair.op and kind not in ("qoslist",):
            raise unknown_option(pair)
        out.append(Change(dest, value, pair.op, label, pair.value))
    return out


def assoc_changes(
    pairs: Sequence[Pair], qos: Mapping[str, Qos], modify: bool = False
) -> list[Change]:
    """Association settings (add/modify account and user)."""
    return _changes(_ASSOC_KEYS, pairs, qos, modify)


def qos_changes(
    pairs: Sequence[Pair], qos: Mapping[str, Qos], modify: bool = False
) -> list[Change]:
    """QOS settings (add/modify qos)."""
    return _changes(_QOS_KEYS, pairs, qos, modify)
