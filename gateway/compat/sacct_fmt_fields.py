"""sacct's fields: one table of names, default widths (negative: left-justified), kinds.

Each `SacctField` computes its value for a job record or a step line (`Rec`) the way
sacct 22.05's `print_fields` does (`src/sacct/print.c`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from gateway.compat.clusters import cluster_of
from gateway.compat.duration import mins_to_str
from gateway.compat.fmt_common import UNIT_MEGA, convert_num_unit, hostlist_compress
from gateway.compat.job_fmt_values import JobValues
from gateway.compat.tres import recorded_count, recorded_gpus
from gateway.model.job import Job, Step, exit_code_pair
from gateway.model.state import JobState
from gateway.model.suspension import suspended_seconds
from gateway.model.values import INFINITE, NO_VAL

__all__ = ["SACCT_FIELDS", "Kind", "Rec", "SacctField", "Value", "accounted_exit_code"]


class Kind(Enum):
    """How a value prints (`print_fields_*`)."""

    STR = "str"
    UINT = "uint"  # NO_VAL/INFINITE (None here) print blank
    DATE = "date"
    SECS = "secs"


Value = str | int | float | None


@dataclass(frozen=True, slots=True)
class Rec:
    """A printed line: a job record, or one of its steps."""

    values: JobValues
    step: Step | None
    now: float

    @property
    def job(self) -> Job:
        return self.values.job


@dataclass(frozen=True, slots=True)
class SacctField:
    """One sacct field: name, default width (negative: left-justified), kind, value."""

    name: str
    width: int
    kind: Kind
    value: Callable[[Rec], Value]


# --- values ------------------------------------------------------------------------


def _tres_count(tres: str | None, key: str) -> int | None:
    for part in (tres or "").split(","):
        name, _, count = part.partition("=")
        if name == key:
            return _tres_int(count)
    return None


def _tres_int(count: str) -> int:
    units = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3}
    if count and count[-1] in units:
        return int(float(count[:-1]) * units[count[-1]])
    return int(count) if count.isdigit() else 0


def _job_tres(v: JobValues) -> str:
    return v.tres_alloc or v.tres_req


def _cpus(r: Rec) -> int:
    if r.step is not None:
        count = _tres_count(r.step.extra.get("tres_alloc"), "cpu")
        if count is not None:
            return count
        return r.step.cpus or (_tres_count(_job_tres(r.values), "cpu") or 0)
    return _tres_count(_job_tres(r.values), "cpu") or 0


def _job_alloc_nodes(r: Rec) -> int:
    """slurmdbd's alloc_nodes (a requeued job keeps its last count without nodes)."""
    if r.values.extras.num_nodes is not None:
        return r.values.extras.num_nodes
    return len(r.job.nodes)


def _nnodes(r: Rec) -> int:
    if r.step is not None:
        return len(r.step.nodes)
    return _job_alloc_nodes(r) or _tres_count(_job_tres(r.values), "node") or 0


def _alloc_nodes(r: Rec) -> int:
    if r.step is not None:
        return len(r.step.nodes)
    return _job_alloc_nodes(r) or _tres_count(r.values.tres_alloc, "node") or 0


def _elapsed(r: Rec) -> int:
    start = r.step.start_time if r.step is not None else r.job.start_time
    end = r.step.end_time if r.step is not None else r.job.end_time
    if r.step is not None and not end:
        end = r.job.end_time
    if not start:
        return 0
    state = r.step.state if r.step is not None else r.job.state
    if not end or state in (JobState.RUNNING, JobState.SUSPENDED):
        end = r.now
    # slurmdbd: end - start - the time suspended (the job's, for its steps too)
    return max(int(end) - int(start) - suspended_seconds(r.job, r.now), 0)


def accounted_exit_code(job: Job) -> int:
    """The job's exit code as slurmdbd holds it: a job slurmctld ended at its time limit or
    by preemption was recorded then, before its batch shell's status (scontrol's ExitCode,
    0:15 or 0:9) came: 0:0 (both recorded on the test clusters). slurmctld's own status 1
    (a job failed at submission) is stored as exit code 1, not signal 1 (`as_mysql_job`)."""
    if job.state in (JobState.TIMEOUT, JobState.PREEMPTED):
        return 0
    return 256 if job.exit_code == 1 else job.exit_code


def _exit(status: int) -> str:
    code, sig = exit_code_pair(status)
    if code >= 128:
        code -= 128
    return f"{code}:{sig}"


def _state(r: Rec) -> str:
    if r.step is not None:
        state, by = r.step.state, r.step.extra.get("requid")
    else:
        uid = r.values.extras.requid
        state, by = r.job.state, None if uid is None else str(uid)
    if state is JobState.CANCELLED and by is not None:
        return f"{state.long} by {by}"
    return state.long


def _job_id(r: Rec) -> str:
    job = r.job
    if job.is_array_meta and r.values.array_task_str:
        base = f"{job.array_job_id}_[{r.values.array_task_str}]"
    elif job.array_task_id is not None:
        base = f"{job.array_job_id}_{job.array_task_id}"
    elif r.values.extras.het_job_id:
        base = f"{r.values.extras.het_job_id}+{r.values.extras.het_job_offset}"
    else:
        base = str(job.job_id)
    return f"{base}.{r.step.step_id}" if r.step is not None else base


def _job_id_raw(r: Rec) -> str:
    base = str(r.job.job_id)
    return f"{base}.{r.step.step_id}" if r.step is not None else base


def _alloc_tres(r: Rec) -> str | None:
    if r.step is not None:
        recorded = r.step.extra.get("tres_alloc")
        if recorded is None and r.step.cpus and r.step.nodes:
            batch = r.step.step_id == "batch"
            mem = recorded_count(r.step.extra.get("mem_mb")) or None  # 0: memory not tracked
            gpus = recorded_gpus(r.step.extra.get("gpus"), len(r.step.nodes))
            recorded = r.values.step_tres(r.step.cpus, r.step.nodes, batch, gpus, mem)
        return _tres_display(recorded)
    return _tres_display(r.values.tres_alloc)


def _tres_display(tres: str | None) -> str | None:
    """`slurmdb_make_tres_string_from_simple`: sorted, memory converted (`mem=100M`)."""
    if not tres:
        return None
    items: list[str] = []
    for part in tres.split(","):
        name, _, count = part.partition("=")
        if name in ("mem",) or name.startswith("bb/"):
            items.append(f"{name}={convert_num_unit(_tres_int(count), UNIT_MEGA)}")
        else:
            items.append(f"{name}={count}")
    return ",".join(sorted(items))


def _timelimit(r: Rec, raw: bool) -> str | None:
    if r.step is not None:
        return None
    limit = r.job.time_limit
    if limit == INFINITE:
        return "UNLIMITED"
    if limit == NO_VAL:
        return "Partition_Limit"
    if not limit:
        return None
    return str(limit) if raw else mins_to_str(limit)


def _req_mem(r: Rec) -> str | None:
    if r.step is not None:
        return ""
    mem = _tres_count(r.values.tres_req, "mem")
    return convert_num_unit(mem, UNIT_MEGA) if mem is not None else ""


def _nodelist(r: Rec) -> str | None:
    nodes = r.step.nodes if r.step is not None else r.job.nodes
    if not nodes:
        return "None assigned"
    return hostlist_compress(nodes)


def _job_only(get: Callable[[Rec], Value]) -> Callable[[Rec], Value]:
    return lambda r: None if r.step is not None else get(r)


def _max_rss(r: Rec) -> str:
    if r.step is None or not r.step.max_rss_kb:
        return ""
    return convert_num_unit(r.step.max_rss_kb * 1024)


def _req_nodes(r: Rec) -> str:
    if r.step is not None:
        return convert_num_unit(_nnodes(r))
    return convert_num_unit(_tres_count(r.values.tres_req, "node") or 0)


def _resv(r: Rec) -> int | None:
    if r.step is not None:
        return None
    eligible = r.job.eligible_time
    if not eligible or int(eligible) == INFINITE:
        return 0
    wait = int(r.job.start_time or r.now) - int(eligible)
    return (wait + 2**31) % 2**32 - 2**31  # sacct keeps it in an int


_F = SacctField
_S, _U, _D, _T = Kind.STR, Kind.UINT, Kind.DATE, Kind.SECS
# fmt: off
SACCT_FIELDS: tuple[SacctField, ...] = (
    _F("Account", 10, _S, lambda r: r.job.account),
    _F("AdminComment", 15, _S, lambda r: None),
    _F("AllocCPUS", 10, _U, _cpus),
    _F("AllocNodes", 10, _S, lambda r: convert_num_unit(_alloc_nodes(r))),
    _F("AllocTRES", 10, _S, _alloc_tres),
    _F("AssocID", 7, _U, _job_only(lambda r: r.values.extras.assoc_id or 0)),
    _F("AveCPU", 10, _S, lambda r: ""),
    _F("AveCPUFreq", 10, _S, lambda r: ""),
    _F("AveDiskRead", 14, _S, lambda r: ""),
    _F("AveDiskWrite", 14, _S, lambda r: ""),
    _F("AvePages", 10, _S, lambda r: ""),
    _F("AveRSS", 10, _S, lambda r: ""),
    _F("AveVMSize", 10, _S, lambda r: ""),
    _F("BlockID", 16, _S, lambda r: None),
    _F("Cluster", 10, _S, lambda r: r.values.extras.cluster or cluster_of(r.job)),
    _F("Comment", 14, _S, _job_only(lambda r: r.job.spec.comment)),
    _F("Constraints", 19, _S, _job_only(lambda r: r.job.spec.constraint or "")),
    _F("ConsumedEnergy", 14, _S, lambda r: "0"),
    _F("ConsumedEnergyRaw", 17, _U, lambda r: 0),
    _F("Container", 19, _S, lambda r: r.job.spec.container),
    _F("CPUTime", 10, _T, lambda r: _elapsed(r) * _cpus(r)),
    _F("CPUTimeRAW", 10, _U, lambda r: _elapsed(r) * _cpus(r)),
    _F("DBIndex", -10, _U, lambda r: None),
    _F("DerivedExitCode", 15, _S,
      lambda r: "" if r.step is not None else _exit(r.job.derived_exit_code)),
    _F("Elapsed", 10, _T, _elapsed),
    _F("ElapsedRaw", 10, _U, _elapsed),
    _F("Eligible", 19, _D,
      lambda r: r.step.start_time if r.step is not None else r.job.eligible_time),
    _F("End", 19, _D,
      lambda r: r.step.end_time or r.job.end_time if r.step is not None else r.job.end_time),
    _F("ExitCode", 8, _S,
      lambda r: _exit(r.step.exit_code if r.step else accounted_exit_code(r.job))),
    _F("Flags", 19, _S, _job_only(lambda r: ",".join(r.values.extras.acct_flags) or None)),
    _F("GID", 6, _U, _job_only(lambda r: r.job.gid)),
    _F("Group", 9, _S, _job_only(lambda r: r.job.group)),
    _F("JobID", -12, _S, _job_id),
    _F("JobIDRaw", -12, _S, _job_id_raw),
    _F("JobName", 10, _S, lambda r: r.step.name if r.step is not None else r.job.spec.name),
    _F("Layout", 9, _S, lambda r: "Unknown" if r.step is not None else None),
    _F("MaxDiskRead", 12, _S, lambda r: ""),
    _F("MaxDiskReadNode", 15, _S, lambda r: None),
    _F("MaxDiskReadTask", 15, _U, lambda r: None),
    _F("MaxDiskWrite", 12, _S, lambda r: ""),
    _F("MaxDiskWriteNode", 16, _S, lambda r: None),
    _F("MaxDiskWriteTask", 16, _U, lambda r: None),
    _F("MaxPages", 8, _S, lambda r: ""),
    _F("MaxPagesNode", 12, _S, lambda r: None),
    _F("MaxPagesTask", 14, _U, lambda r: None),
    _F("MaxRSS", 10, _S, _max_rss),
    _F("MaxRSSNode", 10, _S, lambda r: None),
    _F("MaxRSSTask", 10, _U, lambda r: None),
    _F("MaxVMSize", 10, _S, lambda r: ""),
    _F("MaxVMSizeNode", 14, _S, lambda r: None),
    _F("MaxVMSizeTask", 14, _U, lambda r: None),
    _F("McsLabel", 12, _S, _job_only(lambda r: r.values.extras.mcs_label)),
    _F("MinCPU", 10, _S, lambda r: ""),
    _F("MinCPUNode", 10, _S, lambda r: None),
    _F("MinCPUTask", 10, _U, lambda r: None),
    _F("NCPUS", 10, _U, _cpus),
    _F("NNodes", 8, _U, _nnodes),
    _F("NodeList", 15, _S, _nodelist),
    _F("NTasks", 8, _U, lambda r: r.step.ntasks if r.step is not None else None),
    _F("Partition", 10, _S, _job_only(lambda r: r.job.partition)),
    _F("Priority", 10, _U, _job_only(lambda r: r.job.priority)),
    _F("QOS", 10, _S, _job_only(lambda r: r.job.qos)),
    _F("QOSRAW", 6, _U, _job_only(lambda r: None)),
    _F("Reason", 22, _S, _job_only(lambda r: r.values.extras.reason_prev or r.job.reason.value)),
    _F("ReqCPUFreq", 10, _S, lambda r: "Unknown" if r.step is not None else None),
    _F("ReqCPUFreqGov", 13, _S, lambda r: "Unknown" if r.step is not None else None),
    _F("ReqCPUFreqMax", 13, _S, lambda r: "Unknown" if r.step is not None else None),
    _F("ReqCPUFreqMin", 13, _S, lambda r: "Unknown" if r.step is not None else None),
    _F("ReqCPUS", 8, _U, lambda r: _cpus(r) if r.step is not None else r.values.req_cpus),
    _F("ReqMem", 10, _S, _req_mem),
    _F("ReqNodes", 8, _S, _req_nodes),
    _F("ReqTRES", 10, _S, _job_only(lambda r: _tres_display(r.values.tres_req))),
    _F("Reservation", 20, _S, _job_only(lambda r: r.job.spec.reservation or "")),
    _F("ReservationId", 8, _U, _job_only(lambda r: 0)),
    _F("Reserved", 10, _T, _resv),
    _F("ResvCPU", 10, _T, lambda r: None if (x := _resv(r)) is None else x * r.values.num_cpus),
    _F("ResvCPURAW", 10, _U, lambda r: None if (x := _resv(r)) is None else x * r.values.num_cpus),
    _F("Start", 19, _D, lambda r: r.step.start_time if r.step is not None else r.job.start_time),
    _F("State", 10, _S, _state),
    _F("Submit", 19, _D, lambda r: r.step.start_time if r.step is not None else r.job.submit_time),
    _F("SubmitLine", 20, _S,
      lambda r: r.step.extra.get("submit_line") if r.step is not None else r.job.submit_line),
    _F("Suspended", 10, _T, lambda r: suspended_seconds(r.job, r.now)),
    _F("SystemComment", 15, _S, _job_only(lambda r: None)),
    _F("SystemCPU", 10, _S, lambda r: "00:00:00"),
    _F("Timelimit", 10, _S, lambda r: _timelimit(r, False)),
    _F("TimelimitRaw", 10, _S, lambda r: _timelimit(r, True)),
    _F("TotalCPU", 10, _S, lambda r: "00:00:00"),
    _F("TRESUsageInAve", 14, _S, lambda r: ""),
    _F("TRESUsageInMax", 14, _S, lambda r: ""),
    _F("TRESUsageInMaxNode", 18, _S, lambda r: ""),
    _F("TRESUsageInMaxTask", 18, _S, lambda r: ""),
    _F("TRESUsageInMin", 14, _S, lambda r: ""),
    _F("TRESUsageInMinNode", 18, _S, lambda r: ""),
    _F("TRESUsageInMinTask", 18, _S, lambda r: ""),
    _F("TRESUsageInTot", 14, _S, lambda r: ""),
    _F("TRESUsageOutAve", 15, _S, lambda r: ""),
    _F("TRESUsageOutMax", 15, _S, lambda r: ""),
    _F("TRESUsageOutMaxNode", 19, _S, lambda r: ""),
    _F("TRESUsageOutMaxTask", 19, _S, lambda r: ""),
    _F("TRESUsageOutMin", 15, _S, lambda r: ""),
    _F("TRESUsageOutMinNode", 19, _S, lambda r: ""),
    _F("TRESUsageOutMinTask", 19, _S, lambda r: ""),
    _F("TRESUsageOutTot", 15, _S, lambda r: ""),
    _F("UID", 6, _U, _job_only(lambda r: r.job.uid)),
    _F("User", 9, _S, _job_only(lambda r: r.job.user)),
    _F("UserCPU", 10, _S, lambda r: "00:00:00"),
    _F("WCKey", 10, _S, _job_only(lambda r: r.job.spec.wckey or "")),
    _F("WCKeyID", 10, _U, _job_only(lambda r: 0)),
    _F("WorkDir", 20, _S, _job_only(lambda r: r.job.spec.workdir)),
)
# fmt: on
del _F
