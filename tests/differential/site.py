"""Site facts of the real Slurm test cluster, read from it (never assumed): what the cluster
adds to a request (default partition and time, DefMemPerCPU, MaxArraySize, JobRequeue, the
submitting user's account and QOS). The sbatch differential tests (conftest.py) compare
Caldera's predictions with these.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gateway.compat.duration import time_str_to_mins
from gateway.compat.job_fields import SiteDefaults
from gateway.model.values import INFINITE
from tests.support.slurm_stack import parse_scontrol_records, scontrol_lines

__all__ = ["Site", "read_site"]


@dataclass(frozen=True)
class Site:
    """What the cluster adds to a request, and who submits."""

    defaults: SiteDefaults
    max_array_size: int
    user: str
    account: str
    gres_names: tuple[str, ...]
    allow_spec_resources: bool


def _config(env: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in scontrol_lines(["show", "config"], env=env).splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def _minutes(text: str) -> int:
    if text in ("UNLIMITED", "NONE", "INFINITE"):
        return INFINITE
    return time_str_to_mins(text)


def _sacctmgr(args: Sequence[str], env: Mapping[str, str]) -> list[list[str]]:
    import subprocess

    out = subprocess.run(
        ["sacctmgr", "-n", "-P", *args],
        env=dict(env),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return [line.split("|") for line in out.splitlines() if line]


def read_site(env: Mapping[str, str], user: str = "root") -> Site:
    """Site defaults from `scontrol show config|partition` and the accounting database."""
    config = _config(env)
    partitions = parse_scontrol_records(scontrol_lines(["show", "partition"], env=env))
    default = next(p["PartitionName"] for p in partitions if p.get("Default") == "YES")
    part_time = {
        p["PartitionName"]: _minutes(
            p["DefaultTime"] if p.get("DefaultTime", "NONE") != "NONE" else p["MaxTime"]
        )
        for p in partitions
    }
    mem_cpu = config.get("DefMemPerCPU", "UNLIMITED")
    mem_node = config.get("DefMemPerNode", "UNLIMITED")
    sched = config.get("SchedulerParameters", "")
    wait = re.search(r"max_switch_wait=(\d+)", sched)
    account = _sacctmgr(["show", "user", user, "format=defaultaccount"], env)[0][0]
    assoc = [
        row
        for row in _sacctmgr(
            ["show", "assoc", f"user={user}", "format=account,qos,defaultqos"], env
        )
        if row[0] == account
    ]
    qos_list = assoc[0][1].split(",") if assoc else []
    default_qos = (assoc[0][2] if assoc and assoc[0][2] else "") or (
        qos_list[0] if len(qos_list) == 1 else "normal"
    )
    defaults = SiteDefaults(
        default_partition=default,
        partition_time=part_time,
        def_mem_per_cpu_mb=int(mem_cpu) if mem_cpu.isdigit() else None,
        def_mem_per_node_mb=int(mem_node) if mem_node.isdigit() else None,
        max_switch_wait_s=int(wait.group(1)) if wait else 300,
        default_qos=default_qos,
        job_requeue=config.get("JobRequeue", "1") == "1",
    )
    gres = config.get("GresTypes", "(null)")
    return Site(
        defaults,
        int(config["MaxArraySize"]),
        user,
        account,
        tuple(g for g in gres.split(",") if g and gres != "(null)"),
        config.get("AllowSpecResourcesUsage", "No").lower() in ("yes", "1"),
    )
