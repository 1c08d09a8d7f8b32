"""`scontrol -o show ...` text: one record per line as key -> value, and partitions as
slurmrestd's document (sinfo's JSON has no partitions in 22.05). Pure."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gateway.compat.duration import time_str_to_mins

__all__ = ["parse_scontrol_line", "partitions_doc_from_scontrol"]

_KEY = re.compile(r"(?:(?<=\s)|^)([A-Z][A-Za-z0-9_]*(?:[:/][A-Za-z0-9_]+)*)=")


def parse_scontrol_line(line: str) -> dict[str, str]:
    """One `scontrol -o show ...` record as key -> value (values may hold spaces)."""
    out: dict[str, str] = {}
    matches = list(_KEY.finditer(line))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        out.setdefault(m.group(1), line[m.end() : end].strip())
    return out


def _limit(text: str | None) -> int | None:
    """A partition limit as slurmrestd prints it: -1 for UNLIMITED, None for NONE."""
    if text is None or text in ("NONE", "N/A", "(null)"):
        return None
    if text == "UNLIMITED":
        return -1
    if text.isdigit():
        return int(text)
    minutes = time_str_to_mins(text)
    return minutes if minutes >= 0 else None


def _mem(text: str | None) -> int | None:
    if text is None or text in ("UNLIMITED", "NONE", "0"):
        return None
    m = re.match(r"^(\d+)([MGT]?)$", text)
    if m is None:
        return None
    mult = {"": 1, "M": 1, "G": 1024, "T": 1024 * 1024}[m.group(2)]
    return int(m.group(1)) * mult


def partitions_doc_from_scontrol(text: str) -> dict[str, Any]:
    """`scontrol -o show partition` as slurmrestd's `/partitions` document (v0.0.38)."""
    parts: list[dict[str, Any]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        rec = parse_scontrol_line(line.strip())
        flags = [
            flag
            for key, flag in (
                ("Default", "default"),
                ("Hidden", "hidden"),
                ("RootOnly", "root_only"),
                ("ExclusiveUser", "exclusive_user"),
                ("LLN", "least_loaded_nodes_scheduling"),
                ("ReqResv", "reservation_required"),
            )
            if rec.get(key) == "YES"
        ]

        def allowed(key: str, r: Mapping[str, str] = rec) -> str:
            value = r.get(key, "ALL")
            return "" if value == "ALL" else value

        nodes = rec.get("Nodes", "")
        parts.append(
            {
                "name": rec.get("PartitionName", ""),
                "nodes": "" if nodes == "(null)" else nodes,
                "flags": flags,
                "state": rec.get("State", "UP"),
                "max_time_limit": _limit(rec.get("MaxTime")),
                "default_time_limit": _limit(rec.get("DefaultTime")),
                "maximum_nodes_per_job": _limit(rec.get("MaxNodes")),
                "min nodes per job": _limit(rec.get("MinNodes")) or 0,
                "maximum_cpus_per_node": _limit(rec.get("MaxCPUsPerNode")),
                "priority_tier": _limit(rec.get("PriorityTier")) or 1,
                "priority_job_factor": _limit(rec.get("PriorityJobFactor")) or 1,
                "allowed_groups": allowed("AllowGroups"),
                "allowed_accounts": allowed("AllowAccounts"),
                "allowed_qos": allowed("AllowQos"),
                "allowed_allocation_nodes": allowed("AllocNodes"),
                "total_cpus": _limit(rec.get("TotalCPUs")) or 0,
                "total_nodes": _limit(rec.get("TotalNodes")) or 0,
                "tres": rec.get("TRES", ""),
                "default_memory_per_cpu": _mem(rec.get("DefMemPerCPU")),
                "default_memory_per_node": _mem(rec.get("DefMemPerNode")),
                "maximum_memory_per_node": _mem(rec.get("MaxMemPerNode")),
                "preemption_grace_time": _limit(rec.get("GraceTime")) or 0,
                "over_time_limit": _limit(rec.get("OverTimeLimit")),
                "qos": "" if rec.get("QoS") in (None, "N/A") else rec["QoS"],
            }
        )
    return {"partitions": parts}
