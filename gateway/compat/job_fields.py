"""The request fields of `scontrol show job`, computed from a JobSpec as slurmctld records them.

Slurm fills gaps in a request with site defaults (default partition, the partition's time
limit, DefMemPerCPU, the user's default account) and prints each field in its own format
(`TimeLimit=1-02:30:00`, `MinMemoryCPU=4G`, `TresPerNode=gres:gpu:2`). This module is
that translation, pure: the same function serves Caldera's own `scontrol show job` and
the differential tests that compare Caldera with a real slurmctld.
"""

from __future__ import annotations

import time as _time
from dataclasses import dataclass, field
from typing import Any

from gateway.compat.cnum import to_int32
from gateway.compat.duration import mins_to_str, secs_to_str
from gateway.compat.filename import NO_TASK, PatternContext, expand_for_display
from gateway.compat.quantity import mail_type_str
from gateway.compat.tres import TresNames
from gateway.model.job import Job
from gateway.model.jobspec import JobSpec, Sharing
from gateway.model.state import JobState
from gateway.model.values import INFINITE, GresItem

__all__ = [
    "JobIdentity",
    "SiteDefaults",
    "format_mem",
    "preempt_line",
    "request_fields",
    "site_from",
    "slurm_time",
]


@dataclass(frozen=True, slots=True)
class SiteDefaults:
    """What slurmctld adds to a request that leaves it out."""

    default_partition: str = "debug"
    partition_time: dict[str, int] = field(default_factory=dict)  # DefaultTime or MaxTime
    def_mem_per_cpu_mb: int | None = None
    def_mem_per_node_mb: int | None = None
    max_switch_wait_s: int = 300
    default_qos: str = "normal"
    job_requeue: bool = True  # slurm.conf JobRequeue
    partition_cpus: dict[str, int] = field(default_factory=dict)  # its largest node's CPUs
    partition_mem: dict[str, int] = field(default_factory=dict)  # its largest node's MiB
    tres_names: TresNames = field(default_factory=TresNames)  # AccountingStorageTRES
    # PreemptExemptTime when preemption is on (None: PreemptType=preempt/none), and each
    # QOS's own; scontrol shows PreemptEligibleTime = StartTime + it, as slurmctld does
    preempt_exempt_s: int | None = None
    qos_preempt_exempt: dict[str, int] = field(default_factory=dict)

    def time_limit(self, partition: str) -> int:
        """A job's limit when it gave none: the partition's default (or max) time."""
        return self.partition_time.get(partition, INFINITE)


@dataclass(frozen=True, slots=True)
class JobIdentity:
    """Facts about a submitted job that are not part of its request."""

    job_id: int
    user: str
    account: str  # the user's default account, used when the request names none
    array_job_id: int = 0
    array_task_id: int = NO_TASK  # NO_TASK for a job, or the pending meta record of an array
    array_targets: frozenset[int] = frozenset()  # dependency targets that are job arrays


def format_mem(mb: int) -> str:
    """`convert_num_unit(..., UNIT_MEGA, CONVERT_NUM_UNIT_EXACT)`: 4096 -> 4G, 100 -> 100M."""
    if mb == 0:
        return "0"
    units = "MGTPE"
    i = 0
    while mb % 1024 == 0 and i < len(units) - 1:
        mb //= 1024
        i += 1
    return f"{mb}{units[i]}"


def preempt_line(job: Job, site: SiteDefaults) -> list[str]:
    """slurmctld's PreemptEligibleTime line, for a job that has started while preemption
    is on (never under preempt/none, nor for a pending or requeued job: recorded on the
    burst cluster)."""
    pending = job.state is JobState.PENDING or job.shown_requeued
    if site.preempt_exempt_s is None or pending or not job.start_time:
        return []
    exempt = site.qos_preempt_exempt.get(job.qos, site.preempt_exempt_s)
    at = slurm_time(int(job.preempt_time)) if job.preempt_time else "None"
    return [f"PreemptEligibleTime={slurm_time(int(job.start_time) + exempt)} PreemptTime={at}"]


def slurm_time(epoch: int | None) -> str:
    """`slurm_make_time_str` with the default ISO-like format; None or 0 is Unknown."""
    if not epoch:
        return "Unknown"
    return _time.strftime("%Y-%m-%dT%H:%M:%S", _time.localtime(epoch))


def _tres(prefix: str, items: tuple[GresItem, ...]) -> list[str]:
    del prefix
    return [i.tres() for i in items]


_SHARING = {
    None: "OK",
    Sharing.EXCLUSIVE: "NO",
    Sharing.OVERSUBSCRIBE: "YES",
    Sharing.USER: "USER",
    Sharing.MCS: "MCS",
}


def _memory(spec: JobSpec, site: SiteDefaults) -> tuple[str, str]:
    """MinMemoryNode/MinMemoryCPU; --mem-per-gpu leaves the site default showing."""
    if spec.mem_per_node_mb is not None:
        return "MinMemoryNode", format_mem(spec.mem_per_node_mb)
    if spec.mem_per_cpu_mb is not None:
        return "MinMemoryCPU", format_mem(spec.mem_per_cpu_mb)
    if site.def_mem_per_cpu_mb is not None:
        return "MinMemoryCPU", format_mem(site.def_mem_per_cpu_mb)
    return "MinMemoryNode", format_mem(site.def_mem_per_node_mb or 0)


def _num_tasks(spec: JobSpec) -> str:
    """NumTasks: the request's, else nodes x tasks-per-node, else one per node."""
    nodes = max(spec.nodes_min or 1, 1)
    if spec.ntasks is not None:
        return str(spec.ntasks)
    if spec.ntasks_per_node is not None:
        return str(nodes * spec.ntasks_per_node)
    return str(nodes)


def _time_min(spec: JobSpec) -> str:
    """TimeMin; slurmctld sets one minute for a deadline job that gave no limit."""
    if spec.time_min:
        return mins_to_str(spec.time_min)
    if spec.deadline and spec.time_limit is None and spec.time_min is None:
        return mins_to_str(1)
    return "N/A"


def _switch_wait(spec: JobSpec, site: SiteDefaults) -> int:
    """The switch wait slurmctld keeps: at most max_switch_wait, which is also the default.

    sbatch sends only a wait that is a non-negative C int (not NO_VAL or INFINITE).
    """
    wait = spec.switches_wait_s
    if wait is None or not to_int32(wait) >= 0:
        return site.max_switch_wait_s
    return min(wait, site.max_switch_wait_s)


def request_fields(spec: JobSpec, ident: JobIdentity, site: SiteDefaults) -> dict[str, str]:
    """The request-related `key=value` fields of `scontrol show job`, as Slurm prints them."""
    partition = ",".join(spec.partitions) if spec.partitions else site.default_partition
    time_limit = spec.time_limit
    if time_limit is None:
        time_limit = site.time_limit(spec.partitions[0] if spec.partitions else partition)
    mem_key, mem_value = _memory(spec, site)
    ctx = PatternContext(
        job_id=ident.job_id,
        job_name=spec.name,
        user=ident.user,
        workdir=spec.workdir,
        array_job_id=ident.array_job_id,
        array_task_id=ident.array_task_id,
    )
    out: dict[str, str] = {
        "JobName": spec.name,
        "Account": (spec.account if spec.account is not None else ident.account).lower(),
        "QOS": spec.qos if spec.qos is not None else site.default_qos,
        "Nice": str(spec.nice or 0),
        "Partition": partition,
        "TimeLimit": mins_to_str(time_limit),
        "TimeMin": _time_min(spec),
        "NumTasks": _num_tasks(spec),
        "CPUs/Task": str(spec.cpus_per_task or 1),
        mem_key: mem_value,
        "Features": spec.constraint if spec.constraint is not None else "(null)",
        "Dependency": spec.dependency.display(ident.array_targets) if spec.dependency else "(null)",
        "Requeue": str(int(spec.requeue if spec.requeue is not None else site.job_requeue)),
        "OverSubscribe": _SHARING[spec.sharing],
        "StdOut": expand_for_display(spec.stdout, ctx),
        "StdErr": expand_for_display(spec.stderr or spec.stdout, ctx),
        "StdIn": expand_for_display(spec.stdin, ctx, is_stdin=True),
        "WorkDir": spec.workdir,
        "Licenses": spec.licenses if spec.licenses is not None else "(null)",
        "ReqNodeList": spec.nodelist or "(null)",
        "ExcNodeList": spec.exclude or "(null)",
        "Contiguous": str(int(spec.contiguous)),
    }
    if spec.nodes_min is not None:
        hi = spec.nodes_max or 0
        out["NumNodes"] = f"{spec.nodes_min}-{hi}" if hi else str(spec.nodes_min)
    if spec.array is not None:
        if spec.array.throttle:
            out["ArrayTaskThrottle"] = str(spec.array.throttle)
        out["ArrayTaskId"] = spec.array.task_str()
    if spec.comment is not None:
        out["Comment"] = spec.comment
    if spec.switches:
        out["Switches"] = f"{spec.switches}@{secs_to_str(_switch_wait(spec, site))}"
    if spec.mail_type:
        out["MailUser"] = spec.mail_user or ident.user
        out["MailType"] = mail_type_str(spec.mail_type)
    per_node = [i.tres() for i in spec.gpus_per_node] + [i.tres() for i in spec.gres]
    if per_node:
        out["TresPerNode"] = ",".join(per_node)
    if spec.gpus_per_socket:
        out["TresPerSocket"] = ",".join(i.tres() for i in spec.gpus_per_socket)
    if spec.gpus_per_task:
        out["TresPerTask"] = ",".join(i.tres() for i in spec.gpus_per_task)
    if spec.cpus_per_gpu is not None:
        out["CpusPerTres"] = f"gres:gpu:{spec.cpus_per_gpu}"
    if spec.gpus:
        out["TresPerJob"] = ",".join(i.tres() for i in spec.gpus)
    if spec.mem_per_gpu_mb is not None:
        out["MemPerTres"] = f"gres:gpu:{spec.mem_per_gpu_mb}"
    if spec.reservation is not None:
        out["Reservation"] = spec.reservation
    if spec.begin:
        out["EligibleTime"] = slurm_time(spec.begin)
    return out


def site_from(data: dict[str, Any]) -> SiteDefaults:
    """Site defaults from the gateway's document (its `site` object), for every command
    and the gateway's own rendering alike."""
    site = data.get("site") or {}
    names = site.get("tres_names")
    return SiteDefaults(
        default_partition=site.get("default_partition", "debug"),
        partition_time={k: int(v) for k, v in (site.get("partition_time") or {}).items()},
        def_mem_per_cpu_mb=site.get("def_mem_per_cpu_mb"),
        def_mem_per_node_mb=site.get("def_mem_per_node_mb"),
        job_requeue=bool(site.get("job_requeue", True)),
        partition_cpus={k: int(v) for k, v in (site.get("partition_cpus") or {}).items()},
        partition_mem={k: int(v) for k, v in (site.get("partition_mem") or {}).items()},
        tres_names=TresNames(None if names is None else tuple(names)),
        preempt_exempt_s=site.get("preempt_exempt_s"),
        qos_preempt_exempt={k: int(v) for k, v in (site.get("qos_preempt_exempt") or {}).items()},
    )
