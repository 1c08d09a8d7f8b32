"""squeue's job fields: one table of `-o` letters, `-O` names, headers, default widths.

Each `SqueueField` says how squeue 22.05 prints one value of a job (`print.c`), including
which values are never cut (node lists, durations) and which headers are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gateway.compat.clusters import cluster_of
from gateway.compat.fmt_common import (
    hostlist_compress,
    hostlist_expand,
    make_time_str,
    secs_short,
)
from gateway.compat.job_fmt_values import JobValues
from gateway.model.job import Job
from gateway.model.state import JobState
from gateway.model.values import INFINITE, NO_VAL

__all__ = [
    "SQUEUE_FIELDS",
    "FormatItem",
    "SqueueField",
    "SqueueRow",
    "field_by_letter",
    "field_by_name",
]

_FORMAT_STRING_SIZE = 32  # squeue prints ids through a 32-byte buffer


@dataclass(frozen=True, slots=True)
class SqueueRow:
    """One printed line: a job, or one task of a pending array (`-r`)."""

    values: JobValues
    now: float
    partition: str
    task_id: int | None  # the array task index shown (None: not an array task)
    task_str: str | None  # the pending part of an array meta record (`3-9%2`)

    @property
    def job(self) -> Job:
        return self.values.job


Getter = Callable[[SqueueRow], str | None]


@dataclass(frozen=True, slots=True)
class SqueueField:
    """One squeue job field: `-o` letter, `-O` names, header, default width/justify."""

    letter: str | None
    names: tuple[str, ...]
    header: str
    value: Getter
    width: int = 20
    right: bool = False
    cut: bool = True  # values: node lists and durations are never cut
    header_cut: bool = True
    # whether the value reads the clock (`SqueueRow.now`): "" never, "run" unless the job
    # is pending (time used), "any" always; lines without it can be kept (squeue_fmt_cache)
    clock: str = ""


@dataclass(frozen=True, slots=True)
class FormatItem:
    """A parsed format element; `field` None prints only `suffix` (prefix/invalid)."""

    field: SqueueField | None
    width: int
    right: bool
    suffix: str = ""


# --- values --------------------------------------------------------------------------


def _int(n: int) -> str:
    return str(n)


def _nodes(text: str | None) -> str:
    """`slurm_sort_node_list_str`: a sorted hostlist, "" for none."""
    return hostlist_compress(hostlist_expand(text)) if text else ""


def _time_or_na(epoch: float | None) -> str:
    return make_time_str(epoch) if epoch else "N/A"


def _sched_nodes(r: SqueueRow) -> str | None:
    """The nodes a pending job is planned on (Slurm's or Caldera's backfill plan)."""
    if r.values.extras.sched_nodes is not None:
        return r.values.extras.sched_nodes
    return r.job.sched_nodes if r.job.state is JobState.PENDING else None


def _job_id(r: SqueueRow) -> str:
    job = r.job
    ex = r.values.extras
    if r.task_str is not None:
        text = f"{job.array_job_id}_[{r.task_str}]"
    elif r.task_id is not None:
        text = f"{job.array_job_id}_{r.task_id}"
    elif ex.het_job_id:
        text = f"{ex.het_job_id}+{ex.het_job_offset}"
    else:
        text = str(job.job_id)
    return text[: _FORMAT_STRING_SIZE - 1]


def _array_job_id(r: SqueueRow) -> str:
    if r.task_str is not None or r.task_id is not None:
        return str(r.job.array_job_id)
    return str(r.job.job_id)


def _array_task_id(r: SqueueRow) -> str:
    if r.task_str is not None:
        return r.task_str
    return str(r.task_id) if r.task_id is not None else "N/A"


def _time_limit(minutes: int) -> str:
    if minutes == INFINITE:
        return "UNLIMITED"
    if minutes == NO_VAL:
        return "NOT_SET"
    return secs_short(minutes * 60)


def _time_left(r: SqueueRow) -> str:
    limit = r.job.time_limit
    if limit in (INFINITE, NO_VAL):
        return _time_limit(limit)
    return secs_short(limit * 60 - r.values.time_used(r.now))


def _end_time(r: SqueueRow) -> str:
    end = r.job.end_time or 0
    if r.job.time_limit == INFINITE and end > r.now:
        return "NONE"
    return _time_or_na(end)


def _priority(r: SqueueRow) -> str:
    return f"{r.job.priority / 0xFFFFFFFF:16.14f}"


_REASON_STATES = (
    JobState.PENDING,
    JobState.STAGE_OUT,
    JobState.TIMEOUT,
    JobState.OUT_OF_MEMORY,
    JobState.DEADLINE,
    JobState.FAILED,
)


def _reason_list(r: SqueueRow) -> str:
    if r.job.state in _REASON_STATES:
        return f"({r.values.reason})"
    return r.values.nodes_str


def _pending_time(r: SqueueRow) -> str:
    start, submit = r.job.start_time, r.job.submit_time
    if start and start < r.now:
        return str(int(start) - int(submit))
    return str(int(r.now) - int(submit))


def _sct(r: SqueueRow) -> str:
    spec = r.job.spec
    parts = (spec.sockets_per_node, spec.cores_per_socket, spec.threads_per_core)
    return ":".join("*" if p is None else str(p) for p in parts)


def _opt(value: int | None) -> str:
    return "*" if value is None else str(value)


def _na(value: int | None) -> str:
    return "N/A" if value is None else str(value)


def _std_err(r: SqueueRow) -> str | None:
    v = r.values
    if not v.batch_flag:
        return "N/A"
    raw = v.stderr_raw or v.stdout_raw
    return raw or f"{r.job.spec.workdir}/slurm-{r.job.job_id}.out"


def _std_out(r: SqueueRow) -> str | None:
    raw = r.values.stdout_raw
    return raw or f"{r.job.spec.workdir}/slurm-{r.job.job_id}.out"


def _exec_host(r: SqueueRow) -> str | None:
    v = r.values
    if v.batch_flag:
        return v.batch_host or ""
    return v.extras.alloc_node or r.job.submit_host


def _derived_or(value: str | None, default: str | None = None) -> str | None:
    return value if value is not None else default


F = SqueueField
# fmt: off
SQUEUE_FIELDS: tuple[SqueueField, ...] = (
    F("a", ("account",), "ACCOUNT", lambda r: r.job.account),
    F("A", ("jobid",), "JOBID", lambda r: str(r.job.job_id)),
    F("b", ("gres", "tres-per-node"), "TRES_PER_NODE", lambda r: r.values.tres_per_node or "N/A"),
    F("B", ("batchhost",), "EXEC_HOST", _exec_host),
    F("c", ("mincpus",), "MIN_CPUS", lambda r: str(r.values.min_cpus_node)),
    F("C", ("numcpus",), "CPUS", lambda r: str(r.values.num_cpus)),
    F("d", ("mintmpdisk",), "MIN_TMP_DISK", lambda r: r.values.tmp_disk_str),
    F("D", ("numnodes",), "NODES", lambda r: str(r.values.num_nodes), 6, True),
    F("e", ("endtime",), "END_TIME", _end_time, clock="any"),
    F("E", ("dependency",), "DEPENDENCY", lambda r: r.values.dependency),
    F("f", ("feature",), "FEATURES", lambda r: r.values.features),
    F("F", ("arrayjobid",), "ARRAY_JOB_ID", _array_job_id),
    F("g", ("groupname",), "GROUP", lambda r: r.job.group),
    F("G", ("groupid",), "GROUP", lambda r: str(r.job.gid)),
    F("h", ("oversubscribe", "shared"), "OVER_SUBSCRIBE", lambda r: r.values.shared),
    F("H", ("sockets",), "SOCKETS_PER_NODE", lambda r: _opt(r.job.spec.sockets_per_node)),
    F("i", ("jobarrayid",), "JOBID", _job_id, 18, True),
    F("I", ("cores",), "CORES_PER_SOCKET", lambda r: _opt(r.job.spec.cores_per_socket)),
    F("j", ("name",), "NAME", lambda r: r.job.spec.name, 8, True),
    F("J", ("threads",), "THREADS_PER_CORE", lambda r: _opt(r.job.spec.threads_per_core)),
    F("k", ("comment",), "COMMENT", lambda r: r.job.spec.comment),
    F("K", ("arraytaskid",), "ARRAY_TASK_ID", _array_task_id),
    F("l", ("timelimit",), "TIME_LIMIT", lambda r: _time_limit(r.job.time_limit), 9, True,
      cut=False),
    F("L", ("timeleft",), "TIME_LEFT", _time_left, cut=False, clock="run"),
    F("m", ("minmemory",), "MIN_MEMORY", lambda r: r.values.min_memory_str),
    F("M", ("timeused",), "TIME", lambda r: secs_short(r.values.time_used(r.now)), 10, True,
      cut=False, clock="run"),
    F("n", ("reqnodes",), "REQ_NODES", lambda r: _nodes(r.job.spec.nodelist), cut=False),
    F("N", ("nodelist",), "NODELIST", lambda r: r.values.nodes_str, cut=False, header_cut=False),
    F("o", ("command",), "COMMAND", lambda r: r.values.command),
    F("O", ("contiguous",), "CONTIGUOUS", lambda r: str(int(r.job.spec.contiguous))),
    F("p", ("priority",), "PRIORITY", _priority),
    F("P", ("partition",), "PARTITION", lambda r: r.partition, 9, True),
    F("q", ("qos",), "QOS", lambda r: r.job.qos),
    F("Q", ("prioritylong",), "PRIORITY", lambda r: str(r.job.priority)),
    F("r", ("reason",), "REASON", lambda r: r.values.reason),
    F("R", ("reasonlist",), "NODELIST(REASON)", _reason_list, 0, False, cut=False,
      header_cut=False),
    F("s", ("selectjobinfo",), "", lambda r: ""),
    F("S", ("starttime",), "START_TIME", lambda r: _time_or_na(r.job.expected_start), 19, True),
    F("t", ("statecompact",), "ST", lambda r: r.job.state.code, 2, True),
    F("T", ("state",), "STATE", lambda r: r.job.state.long, 8, True),
    F("u", ("username",), "USER", lambda r: r.job.user, 8, True),
    F("U", ("userid",), "UID", lambda r: str(r.job.uid)),
    F("v", ("reservation",), "RESERVATION", lambda r: r.job.spec.reservation),
    F("V", ("submittime",), "SUBMIT_TIME", lambda r: _time_or_na(r.job.submit_time)),
    F("w", ("wckey",), "WCKEY", lambda r: r.job.spec.wckey),
    F("W", ("licenses",), "LICENSES", lambda r: r.job.spec.licenses),
    F("x", ("excnodes",), "EXC_NODES", lambda r: _nodes(r.job.spec.exclude), cut=False),
    F("X", ("corespec",), "CORE_SPEC", lambda r: "N/A"),
    F("y", ("nice",), "NICE", lambda r: str(r.values.nice)),
    F("Y", ("schednodes",), "SCHEDNODES", _sched_nodes, 20, False,
      cut=False, header_cut=False),
    F("z", ("sct",), "S:C:T", _sct),
    F("Z", ("workdir",), "WORK_DIR", lambda r: r.job.spec.workdir),
    # -O only
    F(None, ("accruetime",), "ACCRUE_TIME", lambda r: _time_or_na(r.values.extras.accrue_time)),
    F(None, ("admin_comment",), "ADMIN_COMMENT", lambda r: None),
    F(None, ("allocnodes",), "ALLOC_NODES",
      lambda r: r.values.extras.alloc_node or r.job.submit_host),
    F(None, ("allocsid",), "ALLOC_SID", lambda r: str(r.values.extras.alloc_sid or 0)),
    F(None, ("associd",), "ASSOC_ID", lambda r: str(r.values.extras.assoc_id or 0)),
    F(None, ("batchflag",), "BATCH_FLAG", lambda r: str(int(r.values.batch_flag))),
    F(None, ("boardspernode",), "BOARDS_PER_NODE", lambda r: "N/A"),
    F(None, ("burstbuffer",), "BURST_BUFFER", lambda r: r.job.spec.burst),
    F(None, ("burstbufferstate",), "BURST_BUFFER_STATE", lambda r: None),
    F(None, ("cluster",), "CLUSTER", lambda r: r.values.extras.cluster or cluster_of(r.job)),
    F(None, ("clusterfeature",), "CLUSTER_FEATURES", lambda r: None),
    F(None, ("container",), "CONTAINER", lambda r: r.job.spec.container),
    F(None, ("cpuspertask", "cpus-per-task"), "CPUS_PER_TASK",
      lambda r: str(r.values.cpus_per_task)),
    F(None, ("cpus-per-tres",), "CPUS_PER_TRES", lambda r: "N/A"),
    F(None, ("deadline",), "DEADLINE", lambda r: _time_or_na(r.job.spec.deadline)),
    F(None, ("delayboot",), "DELAY_BOOT", lambda r: "0:00"),
    F(None, ("derivedec",), "DERIVED_EC", lambda r: str(r.job.derived_exit_code)),
    F(None, ("eligibletime",), "ELIGIBLE_TIME", lambda r: _time_or_na(r.job.eligible_time)),
    F(None, ("exit_code",), "EXIT_CODE", lambda r: str(r.job.exit_code)),
    F(None, ("hetjobid", "packjobid"), "HET_JOB_ID",
      lambda r: str(r.values.extras.het_job_id) if r.values.extras.het_job_id else "N/A"),
    F(None, ("hetjobidset", "packjobidset"), "HET_JOB_ID_SET",
      lambda r: r.values.extras.het_job_id_set if r.values.extras.het_job_id else "N/A"),
    F(None, ("hetjoboffset", "packjoboffset"), "HET_JOB_OFFSET",
      lambda r: str(r.values.extras.het_job_offset) if r.values.extras.het_job_id else "N/A"),
    F(None, ("lastschedeval",), "LAST_SCHED_EVAL",
      lambda r: _time_or_na(r.values.extras.last_sched_eval)),
    F(None, ("maxcpus",), "MAX_CPUS", lambda r: str(r.values.num_cpus)),
    F(None, ("maxnodes",), "MAX_NODES", lambda r: str(r.values.max_nodes or r.values.num_nodes)),
    F(None, ("mcslabel",), "MCSLABEL", lambda r: r.values.extras.mcs_label),
    F(None, ("mem-per-tres",), "MEM_PER_TRES", lambda r: r.values.mem_per_tres or "N/A"),
    F(None, ("mintime",), "TIME_MIN", lambda r: secs_short(r.values.time_min * 60)),
    F(None, ("network",), "NETWORK", lambda r: None),
    F(None, ("ntpercore",), "NTASKS_PER_CORE", lambda r: _na(r.job.spec.ntasks_per_core)),
    F(None, ("ntpernode",), "NTASKS_PER_NODE", lambda r: _na(r.job.spec.ntasks_per_node)),
    F(None, ("ntpersocket",), "NTASKS_PER_SOCKET", lambda r: _na(r.job.spec.ntasks_per_socket)),
    F(None, ("ntperboard",), "NTASKS_PER_BOARD", lambda r: "0"),
    F(None, ("numtasks",), "TASKS",
      lambda r: str(NO_VAL if r.values.extras.tasks_unknown else r.values.num_tasks)),
    F(None, ("origin",), "ORIGIN", lambda r: "NA"),
    F(None, ("pendingtime",), "PENDING_TIME", _pending_time, clock="any"),
    F(None, ("prefer",), "PREFER", lambda r: None),
    F(None, ("preempttime",), "PREEMPT_TIME", lambda r: "N/A"),
    F(None, ("profile",), "PROFILE", lambda r: "NotSet"),
    F(None, ("reboot",), "REBOOT", lambda r: "0"),
    F(None, ("reqswitch",), "REQ_SWITCH", lambda r: str(r.job.spec.switches or 0)),
    F(None, ("requeue",), "REQUEUE", lambda r: str(int(r.values.requeue))),
    F(None, ("resizetime",), "RESIZE_TIME", lambda r: "N/A", cut=False),
    F(None, ("restartcnt",), "RESTART_COUNT", lambda r: str(r.values.restarts)),
    F(None, ("sperboard",), "SOCKETS_PER_BOARD", lambda r: "0"),
    F(None, ("stderr",), "STDERR", _std_err),
    F(None, ("stdin",), "STDIN", lambda r: r.values.stdin_raw),
    F(None, ("stdout",), "STDOUT", _std_out),
    F(None, ("system_comment",), "SYSTEM_COMMENT", lambda r: None),
    F(None, ("tres", "tres-alloc"), "TRES_ALLOC",
      lambda r: r.values.tres_alloc or r.values.tres_req),
    F(None, ("tres-bind",), "TRES_BIND", lambda r: "N/A"),
    F(None, ("tres-freq",), "TRES_FREQ", lambda r: "N/A"),
    F(None, ("tres-per-job",), "TRES_PER_JOB", lambda r: r.values.tres_per_job or "N/A"),
    F(None, ("tres-per-socket",), "TRES_PER_SOCKET", lambda r: r.values.tres_per_socket or "N/A"),
    F(None, ("tres-per-task",), "TRES_PER_TASK", lambda r: r.values.tres_per_task or "N/A"),
    F(None, ("wait4switch",), "WAIT4SWITCH", lambda r: secs_short(r.job.spec.switches_wait_s or 0)),
)
# fmt: on
del F

_BY_LETTER: dict[str, SqueueField] = {f.letter: f for f in SQUEUE_FIELDS if f.letter}
_BY_NAME: dict[str, SqueueField] = {n: f for f in SQUEUE_FIELDS for n in f.names}
# `-O` uses %A (the plain job id) for "jobid" and %i for "jobarrayid".


def field_by_letter(letter: str) -> SqueueField | None:
    """The field a `-o` letter selects."""
    return _BY_LETTER.get(letter)


def field_by_name(name: str) -> SqueueField | None:
    """The field a `-O` name selects (case-insensitive; `numtask...` as squeue matches)."""
    key = name.lower()
    if key.startswith("numtask"):
        key = "numtasks"
    return _BY_NAME.get(key)
