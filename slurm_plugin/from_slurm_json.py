"""Translate a real Slurm 22.05 cluster's `--json` output into Caldera's model objects.

- `squeue --json` (openapi/v0.0.38 `jobs`) -> `Job`s with `JobExtras`;
- `sacct --json` (dbv0.0.38 `jobs` with `steps`) -> `Job`s, `Step`s and `JobExtras`;
- `sinfo --json` (openapi/v0.0.38 `nodes`) plus slurmrestd's `/slurm/v0.0.38/partitions`
  (22.05's sinfo has no partitions in its JSON) -> a `ClusterState` with `NodeExtras` and
  `PartitionExtras`.

Known gaps of 22.05's JSON that the callers fill in: `sacct --json` reports wrong exit codes
(use `exit_codes_from_sacct` on `sacct -P -o JobIDRaw,ExitCode,DerivedExitCode`) and has no
uid/gid/submit line; squeue's JSON has no AllocNode:Sid, mail settings nor cpus_per_task
(always null, a 22.05 bug), so cpus_per_task is derived from cpus/tasks.
"""

from __future__ import annotations

import grp
import json
import pwd
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.compat.arrays import ArraySpec, IndexRange, parse_array
from gateway.compat.dependency import parse_dependency
from gateway.compat.duration import INFINITE, NO_VAL
from gateway.compat.fmt_common import (
    JobExtras,
    NodeExtras,
    PartitionExtras,
    hostlist_expand,
)
from gateway.compat.gres import GresItem, parse_gres
from gateway.model.cluster import ClusterState, Node, NodeState, Partition
from gateway.model.job import Hold, Job, Step, wait_status
from gateway.model.jobspec import JobSpec, Sharing
from gateway.model.state import Reason, state_from_slurm

__all__ = [
    "SlurmAccounting",
    "SlurmCluster",
    "SlurmJobs",
    "cluster_from_sinfo_json",
    "exit_codes_from_sacct",
    "jobs_from_sacct_json",
    "jobs_from_squeue_json",
]

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


def _squeue_job(j: Doc) -> tuple[Job, JobExtras]:
    job_id = _int(j.get("job_id"))
    state = state_from_slurm(str(j.get("job_state") or "PENDING"))
    reason_text = str(j.get("state_reason") or "None")
    reason, desc = _reason(reason_text)
    state_desc = _str(j.get("state_description")) or desc
    tasks = j.get("tasks")
    cpus = _int(j.get("cpus"))
    time_limit = j.get("time_limit")
    array_job_id = _int(j.get("array_job_id"))
    task_id = j.get("array_task_id")
    throttle = _int(j.get("array_max_tasks"))
    pending = _array_spec(_str(j.get("array_task_string")), throttle) if task_id is None else None
    dep_text = _str(j.get("dependency"))
    nice = j.get("nice")
    n_tasks = _int(tasks) if isinstance(tasks, int) else None
    flags = {str(f) for f in j.get("flags") or ()}
    tpn = _int(j.get("tasks_per_node"))
    if "JOB_CPUS_SET" in flags:  # -c given: pn_min_cpus is cpus_per_task x tasks per node
        cpt = max(_int(j.get("minimum_cpus_per_node"), 1) // max(tpn, 1), 1)
    else:
        cpt = cpus // n_tasks if n_tasks and cpus and cpus % n_tasks == 0 else 1
    spec = JobSpec(
        name=str(j.get("name") or ""),
        workdir=str(j.get("current_working_directory") or ""),
        partitions=tuple(p for p in str(j.get("partition") or "").split(",") if p),
        account=_str(j.get("account")),
        qos=_str(j.get("qos")),
        reservation=_str(j.get("resv_name")),
        wckey=_str(j.get("wckey")),
        comment=_str(j.get("comment")),
        nodes_max=_int(j.get("max_nodes")) or None,
        ntasks=n_tasks,
        ntasks_per_node=tpn or None,
        ntasks_per_socket=j.get("tasks_per_socket"),
        ntasks_per_core=j.get("tasks_per_core"),
        cpus_per_gpu=_per_gpu(_str(j.get("cpus_per_tres"))),
        mem_per_gpu_mb=_per_gpu(_str(j.get("memory_per_tres"))),
        cpus_per_task=cpt if cpt > 1 else None,
        sockets_per_node=j.get("sockets_per_node"),
        cores_per_socket=j.get("cores_per_socket"),
        threads_per_core=j.get("threads_per_core"),
        # both null: pn_min_memory is 0 ("MinMemoryNode=0"), not the site default
        mem_per_node_mb=j.get("memory_per_node")
        if j.get("memory_per_node") is not None or j.get("memory_per_cpu") is not None
        else 0,
        mem_per_cpu_mb=j.get("memory_per_cpu"),
        tmp_mb=_int(j.get("minimum_tmp_disk_per_node")) or None,
        gres=_tres_items(_str(j.get("tres_per_node"))),
        gpus=_tres_items(_str(j.get("tres_per_job"))),
        gpus_per_task=_tres_items(_str(j.get("tres_per_task"))),
        gpus_per_socket=_tres_items(_str(j.get("tres_per_socket"))),
        licenses=_str(j.get("licenses")),
        constraint=_str(j.get("features")),
        nodelist=_str(j.get("required_nodes")),
        exclude=_str(j.get("excluded_nodes")),
        sharing=_SHARED.get(str(j.get("shared"))),
        contiguous=bool(j.get("contiguous")),
        time_limit=int(time_limit) if isinstance(time_limit, int) else None,
        time_min=_int(j.get("time_minimum")) or None,
        deadline=_int(j.get("deadline")) or None,
        array=pending,
        dependency=parse_dependency(dep_text) if dep_text else None,
        nice=int(nice) if isinstance(nice, int) else None,
        requeue=bool(j.get("requeue")),
        stdout=_str(j.get("standard_output")),
        stderr=_str(j.get("standard_error")),
        stdin=_str(j.get("standard_input")),
        container=_str(j.get("container")),
        burst=_str(j.get("burst_buffer")),
    )
    priority = j.get("priority")
    job = Job(
        job_id=job_id,
        spec=spec,
        user=str(j.get("user_name") or ""),
        uid=_int(j.get("user_id")),
        group=str(j.get("group_name") or ""),
        gid=_int(j.get("group_id")),
        submit_time=float(_int(j.get("submit_time"))),
        command=str(j.get("command") or ""),
        state=state,
        reason=reason,
        priority=_int(priority),
        hold=_hold(reason),
        array_job_id=array_job_id,
        array_task_id=int(task_id) if isinstance(task_id, int) else None,
        array_pending=pending,
        partition=str(j.get("partition") or ""),
        account=str(j.get("account") or ""),
        qos=str(j.get("qos") or ""),
        time_limit=int(time_limit) if isinstance(time_limit, int) else INFINITE,
        cluster=str(j.get("cluster") or "local"),
        nodes=hostlist_expand(_str(j.get("nodes"))),
        num_cpus=cpus,
        eligible_time=_time(j.get("eligible_time")),
        start_time=_time(j.get("start_time")),
        end_time=_time(j.get("end_time")),
        exit_code=_int(j.get("exit_code")),
        derived_exit_code=_int(j.get("derived_exit_code")),
        restart_count=_int(j.get("restart_cnt")),
        state_desc=state_desc,
    )
    extras = JobExtras(
        num_nodes=_int(j.get("node_count")),
        max_nodes=_int(j.get("max_nodes")),
        min_cpus_node=_int(j.get("minimum_cpus_per_node")),
        batch_flag=bool(j.get("batch_flag")),
        batch_host=str(j.get("batch_host") or ""),
        accrue_time=_time(j.get("accrue_time")),
        last_sched_eval=_time(j.get("last_sched_evaluation")),
        suspend_time=_time(j.get("suspend_time")),
        pre_sus_time=_int(j.get("pre_sus_time")),
        tres_req=str(j.get("tres_req_str") or ""),
        tres_alloc=str(j.get("tres_alloc_str") or ""),
        dependency=dep_text or "",
        mcs_label=_str(j.get("mcs_label")),
        cpus_per_task=cpt,
        assoc_id=_int(j.get("association_id")),
        cluster=_str(j.get("cluster")),
        stdout_raw=str(j.get("standard_output") or ""),
        stderr_raw=str(j.get("standard_error") or ""),
        stdin_raw=str(j.get("standard_input") or ""),
        array_task_str=str(j.get("array_task_string") or "") if task_id is None else None,
        array_max_tasks=throttle,
        job_flags=tuple(str(f) for f in j.get("flags") or ()),
        # 22.05 names the minimum `cpu_frequency_minumum` when it is set
        cpu_freq=(
            _opt_int(j.get("cpu_frequency_minumum", j.get("cpu_frequency_minimum"))),
            _opt_int(j.get("cpu_frequency_maximum")),
            _opt_int(j.get("cpu_frequency_governor")),
        ),
        delay_boot=_int(j.get("delay_boot")),
        profile=tuple(str(p) for p in j["profile"]) if isinstance(j.get("profile"), list) else None,
        billable_tres=float(j["billable_tres"])
        if isinstance(j.get("billable_tres"), int | float)
        else None,
        billable_known="billable_tres" in j,
        tasks_unknown=tasks is None,
        reason_text=reason_text if desc is not None else None,
        tres_per_node=str(j.get("tres_per_node") or ""),
        tres_per_job=str(j.get("tres_per_job") or ""),
        tres_per_task=str(j.get("tres_per_task") or ""),
        tres_per_socket=str(j.get("tres_per_socket") or ""),
        tres_bind=_str(j.get("tres_bind")),
        cpus_per_tres=_str(j.get("cpus_per_tres")),
        het_job_id=_int(j.get("het_job_id")),
        het_job_offset=_int(j.get("het_job_offset")),
        het_job_id_set=_str(j.get("het_job_id_set")),
    )
    return job, extras


def jobs_from_squeue_json(doc: Doc | str) -> SlurmJobs:
    """`squeue --json` (all jobs slurmctld knows, in its order) as Jobs and extras."""
    data = _load(doc)
    jobs: list[Job] = []
    extras: dict[int, JobExtras] = {}
    for j in data.get("jobs", []):
        job, ex = _squeue_job(j)
        jobs.append(job)
        extras[job.job_id] = ex
    return SlurmJobs(tuple(jobs), extras)


# --- sacct -------------------------------------------------------------------------------


def exit_codes_from_sacct(text: str) -> dict[str, tuple[int, int]]:
    """Wait statuses from `sacct -P -n -o JobIDRaw,ExitCode[,DerivedExitCode]` text:
    `{"595": (768, 0), "595.batch": (768, 0)}` (exit code, derived exit code)."""
    out: dict[str, tuple[int, int]] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 2 or not parts[0] or not parts[0][0].isdigit():
            continue

        def status(pair: str) -> int:
            code, _, sig = pair.partition(":")
            return wait_status(int(code or 0), int(sig or 0))

        derived = status(parts[2]) if len(parts) > 2 and parts[2] else 0
        out[parts[0]] = (status(parts[1]), derived)
    return out


def _hexmask(text: str | None) -> list[int]:
    if not text:
        return []
    if text.lower().startswith("0x"):
        value = int(text, 16)
        return [i for i in range(value.bit_length()) if value >> i & 1]
    parsed = parse_array(text.split("%", 1)[0], max_array_size=4_000_001)
    return list(parsed.indices()) if parsed else []


def _db_exit(value: Any) -> int:
    if not isinstance(value, Mapping):
        return 0
    sig = value.get("signal")
    if isinstance(sig, Mapping) and sig.get("signal_id") is not None:
        return wait_status(0, int(sig["signal_id"]))
    return wait_status(_int(value.get("return_code")), 0)


def _tres_str(items: Any) -> str:
    out: list[str] = []
    for t in items or []:
        count = t.get("count")
        if count is None:
            continue
        name = f"{t['type']}/{t['name']}" if t.get("name") else str(t["type"])
        out.append(f"{name}={count}")
    return ",".join(out)


def _sacct_job(
    j: Doc, uid_of: UidOf, gid_of: UidOf, codes: Mapping[str, tuple[int, int]]
) -> tuple[Job, JobExtras, tuple[Step, ...]]:
    job_id = _int(j.get("job_id"))
    t = j.get("time") or {}
    state = state_from_slurm(str((j.get("state") or {}).get("current") or "PENDING"))
    reason, desc = _reason(str((j.get("state") or {}).get("reason") or "None"))
    array = j.get("array") or {}
    array_job_id = _int(array.get("job_id"))
    task_id = array.get("task_id")
    throttle = _int(((array.get("limits") or {}).get("max") or {}).get("running", {}).get("tasks"))
    members = _hexmask(_str(array.get("task")))
    pending = ArraySpec(_ranges(members), throttle) if members and task_id is None else None
    nodes_text = _str(j.get("nodes"))
    allocated = nodes_text not in (None, "None assigned")
    limit = t.get("limit")
    # null is INFINITE or, for a job never allocated, NO_VAL ("Partition_Limit")
    time_limit = limit if isinstance(limit, int) else INFINITE if allocated else NO_VAL
    # dbv0.0.38 prints NO_VAL and INFINITE times as null: a missing start is NO_VAL
    # ("None" in sacct), a missing eligible time INFINITE ("Unknown").
    start = float(NO_VAL) if t.get("start", 0) is None else _time(t.get("start"))
    required = j.get("required") or {}
    mem = _int(required.get("memory"))
    req_cpus = _int(required.get("CPUs"))
    tres_mem = next(
        (
            _int(t.get("count"))
            for t in (j.get("tres") or {}).get("requested") or ()
            if t.get("type") == "mem"
        ),
        0,
    )
    per_cpu = bool(mem) and req_cpus > 1 and tres_mem == mem * req_cpus
    exit_code, derived = codes.get(
        str(job_id), (_db_exit(j.get("exit_code")), _db_exit(j.get("derived_exit_code")))
    )
    user = str(j.get("user") or "")
    group = str(j.get("group") or "")
    kill_user = _str(j.get("kill_request_user"))
    spec = JobSpec(
        name=str(j.get("name") or ""),
        workdir=str(j.get("working_directory") or ""),
        partitions=tuple(p for p in str(j.get("partition") or "").split(",") if p),
        account=_str(j.get("account")),
        qos=_str(j.get("qos")),
        constraint=_str(j.get("constraints")),
        mem_per_node_mb=None if per_cpu else mem or None,
        mem_per_cpu_mb=mem if per_cpu else None,
        time_limit=time_limit,
        array=pending,
    )
    job = Job(
        job_id=job_id,
        spec=spec,
        user=user,
        uid=uid_of(user) if user else 0,
        group=group,
        gid=gid_of(group) if group else 0,
        submit_time=float(_int(t.get("submission"))),
        state=state,
        reason=reason,
        state_desc=desc,
        priority=_int(j.get("priority")),
        array_job_id=array_job_id,
        array_task_id=int(task_id) if isinstance(task_id, int) else None,
        array_pending=pending,
        partition=str(j.get("partition") or ""),
        account=str(j.get("account") or ""),
        qos=str(j.get("qos") or ""),
        time_limit=time_limit,
        cluster=str(j.get("cluster") or ""),
        nodes=hostlist_expand(nodes_text) if allocated else (),
        num_cpus=_int(required.get("CPUs")),
        eligible_time=float(INFINITE) if t.get("eligible", 0) is None else _time(t.get("eligible")),
        start_time=start,
        end_time=_time(t.get("end")),
        exit_code=exit_code,
        derived_exit_code=derived,
    )
    tres = j.get("tres") or {}
    extras = JobExtras(
        num_nodes=_int(j.get("allocation_nodes")),
        tres_req=_tres_str(tres.get("requested")),
        tres_alloc=_tres_str(tres.get("allocated")),
        requid=uid_of(kill_user) if kill_user else None,
        reason_prev=str((j.get("state") or {}).get("reason") or "None"),
        acct_flags=_acct_flags(j.get("flags") or ()),
        cluster=_str(j.get("cluster")),
        mcs_label=_str((j.get("mcs") or {}).get("label")),
        array_max_tasks=throttle,
    )
    steps = tuple(_sacct_step(job_id, s, uid_of, codes) for s in j.get("steps") or ())
    return job, extras, steps


_SCHED_FLAGS = (
    ("NOT_SET", "SchedNotSet"),
    ("STARTED_ON_SUBMIT", "SchedSubmit"),
    ("STARTED_ON_SCHEDULE", "SchedMain"),
    ("STARTED_ON_BACKFILL", "SchedBackfill"),
)


def _acct_flags(flags: Sequence[Any]) -> tuple[str, ...]:
    """sacct's Flags text from dbv0.0.38's names. The JSON cannot say "StartRecieved"
    (SLURMDB_JOB_FLAG_START_R has no name there); slurmdbd sets it for every job it has
    a start record of, which is every job sacct lists, so it is always added."""
    names = {str(f) for f in flags}
    out = [text for name, text in _SCHED_FLAGS if name in names][:1]
    return (*out, "StartRecieved")


def _ranges(members: Sequence[int]) -> tuple[IndexRange, ...]:
    runs: list[IndexRange] = []
    for n in sorted(set(members)):
        if runs and runs[-1].last + 1 == n:
            runs[-1] = IndexRange(runs[-1].first, n, 1)
        else:
            runs.append(IndexRange(n, n, 1))
    return tuple(runs)


def _sacct_step(job_id: int, s: Doc, uid_of: UidOf, codes: Mapping[str, tuple[int, int]]) -> Step:
    info = s.get("step") or {}
    raw_id = info.get("id")
    step_id = "" if raw_id is None else str(raw_id)
    t = s.get("time") or {}
    nodes = s.get("nodes") or {}
    tres = s.get("tres") or {}
    alloc = _tres_str(tres.get("allocated"))
    cpus = 0
    for part in alloc.split(","):
        if part.startswith("cpu="):
            cpus = int(part[4:])
    exit_code = codes.get(f"{job_id}.{step_id}", (_db_exit(s.get("exit_code")), 0))[0]
    kill_user = _str(s.get("kill_request_user"))
    extra = {"tres_alloc": alloc}
    max_rss = 0
    for usage in (tres.get("requested") or {}).get("max") or ():
        if usage.get("type") == "mem" and isinstance(usage.get("count"), int):
            max_rss = int(usage["count"]) // 1024
    if kill_user:
        extra["requid"] = str(uid_of(kill_user))
    return Step(
        job_id=job_id,
        step_id=step_id,
        name=str(info.get("name") or ""),
        state=state_from_slurm(str(s.get("state") or "PENDING")),
        start_time=_time(t.get("start")),
        end_time=_time(t.get("end")),
        exit_code=exit_code,
        nodes=hostlist_expand(_str(nodes.get("range"))),
        ntasks=_int((s.get("tasks") or {}).get("count"), 1),
        cpus=cpus,
        max_rss_kb=max_rss,
        extra=extra,
    )


def jobs_from_sacct_json(
    doc: Doc | str,
    *,
    exit_codes: Mapping[str, tuple[int, int]] | None = None,
    uid_of: UidOf | None = None,
    gid_of: UidOf | None = None,
) -> SlurmAccounting:
    """`sacct --json` as job records, steps and extras. `exit_codes` (from
    `exit_codes_from_sacct`) replace 22.05's wrong JSON exit codes; `uid_of`/`gid_of` map
    the names the JSON gives to ids (default: the local passwd and group databases)."""
    data = _load(doc)
    jobs: list[Job] = []
    steps: dict[int, tuple[Step, ...]] = {}
    extras: dict[int, JobExtras] = {}
    tres_ids: dict[str, int] = {}
    for j in data.get("jobs", []):
        job, ex, st = _sacct_job(
            j, uid_of or _default_uid, gid_of or _default_gid, exit_codes or {}
        )
        jobs.append(job)
        extras[job.job_id] = ex
        steps[job.job_id] = st
        tres = j.get("tres") or {}
        for item in [*(tres.get("allocated") or ()), *(tres.get("requested") or ())]:
            key = f"{item['type']}/{item['name']}" if item.get("name") else str(item["type"])
            tres_ids.setdefault(key, _int(item.get("id")))
    return SlurmAccounting(tuple(jobs), steps, extras, tres_ids)


# --- sinfo -------------------------------------------------------------------------------

_NODE_BASE = {
    "idle": NodeState.IDLE,
    "mixed": NodeState.MIXED,
    "allocated": NodeState.ALLOCATED,
    "down": NodeState.DOWN,
    "unknown": NodeState.UNKNOWN,
}


def _node_state(base: str, flags: Sequence[str]) -> NodeState:
    if "DRAIN" in flags:
        busy = base in ("allocated", "mixed") or "COMPLETING" in flags
        return NodeState.DRAINING if busy else NodeState.DRAINED
    return _NODE_BASE.get(base, NodeState.UNKNOWN)


def _gres(text: str | None) -> tuple[tuple[str, str | None, int], ...]:
    out: list[tuple[str, str | None, int]] = []
    for item in _tres_items(text.split("(")[0] if text else None):
        out.append((item.name, item.type, item.count))
    return tuple(out)


def _node(n: Doc) -> tuple[Node, NodeExtras]:
    base = str(n.get("state") or "unknown").lower()
    flags = tuple(str(f) for f in n.get("state_flags") or ())
    cores = _int(n.get("cores"))
    cpu_load = n.get("cpu_load")
    free_mem = n.get("free_memory")
    node = Node(
        name=str(n.get("name") or ""),
        cpus=_int(n.get("cpus")),
        memory_mb=_int(n.get("real_memory")),
        state=_node_state(base, flags),
        partitions=tuple(n.get("partitions") or ()),
        features=tuple(f for f in str(n.get("features") or "").split(",") if f),
        gres=_gres(_str(n.get("gres"))),
        sockets=_int(n.get("sockets"), 1),
        cores_per_socket=cores,
        threads_per_core=_int(n.get("threads"), 1),
        tmp_disk_mb=_int(n.get("temporary_disk")),
        reason=_str(n.get("reason")),
    )
    extras = NodeExtras(
        state_flags=flags,
        base_state=base.upper(),
        alloc_cpus=_int(n.get("alloc_cpus")),
        alloc_memory=_int(n.get("alloc_memory")),
        cpu_load=None if cpu_load in (None, NO_VAL) else _int(cpu_load),
        free_memory=None if free_mem in (None, -2) else _int(free_mem),
        weight=_int(n.get("weight"), 1),
        address=_str(n.get("address")),
        hostname=_str(n.get("hostname")),
        port=_int(n.get("port")),
        version=_str(n.get("slurmd_version")),
        os=_str(n.get("operating_system")),
        arch=_str(n.get("architecture")),
        boards=_int(n.get("boards"), 1),
        boot_time=_time(n.get("boot_time")),
        slurmd_start_time=_time(n.get("slurmd_start_time")),
        last_busy=_time(n.get("last_busy")),
        reason_time=_time(n.get("reason_changed_at")),
        reason_user=_str(n.get("reason_set_by_user")),
        active_features=tuple(f for f in str(n.get("active_features") or "").split(",") if f),
        gres_used=_str(n.get("gres_used")),
        tres=_str(n.get("tres")),
        tres_used=_str(n.get("tres_used")),
        owner=_str(n.get("owner")),
        mcs_label=_str(n.get("mcs_label")),
        comment=_str(n.get("comment")),
        extra=_str(n.get("extra")),
    )
    return node, extras


def _limit(value: Any) -> int | None:
    """slurmrestd prints INFINITE as -1 (int32) and unset as null."""
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    return INFINITE if value in (-1, INFINITE) else value


def _partition(p: Doc) -> tuple[Partition, PartitionExtras]:
    flags = {str(f) for f in p.get("flags") or ()}
    max_time = _limit(p.get("max_time_limit"))
    default_time = _limit(p.get("default_time_limit"))
    max_nodes = _limit(p.get("maximum_nodes_per_job"))
    state = str(p.get("state") or "UP").upper()
    part = Partition(
        name=str(p.get("name") or ""),
        nodes=hostlist_expand(_str(p.get("nodes"))),
        default="default" in flags,
        up=state == "UP",
        max_time=max_time if max_time is not None else INFINITE,
        default_time=default_time,
        max_nodes=None if max_nodes in (None, INFINITE) else max_nodes,
    )
    max_cpus = _limit(p.get("maximum_cpus_per_node"))
    extras = PartitionExtras(
        min_nodes=_int(p.get("min nodes per job")),
        priority_tier=_int(p.get("priority_tier"), 1),
        priority_job_factor=_int(p.get("priority_job_factor"), 1),
        allow_groups=_str(p.get("allowed_groups")),
        allow_accounts=_str(p.get("allowed_accounts")),
        allow_qos=_str(p.get("allowed_qos")),
        allow_alloc_nodes=_str(p.get("allowed_allocation_nodes")),
        root_only="root_only" in flags,
        hidden="hidden" in flags,
        exclusive_user="exclusive_user" in flags,
        lln="least_loaded_nodes_scheduling" in flags,
        req_resv="reservation_required" in flags,
        state=state,
        total_cpus=_int(p.get("total_cpus")),
        total_nodes=_int(p.get("total_nodes")),
        tres=_str(p.get("tres")),
        max_cpus_per_node=max_cpus if max_cpus is not None else INFINITE,
        def_mem_per_cpu=_limit(p.get("default_memory_per_cpu")),
        def_mem_per_node=_limit(p.get("default_memory_per_node")),
        max_mem_per_node=_limit(p.get("maximum_memory_per_node")),
        grace_time=_int(p.get("preemption_grace_time")),
        over_time_limit=_limit(p.get("over_time_limit")),
        qos=_str(p.get("qos")),
    )
    return part, extras


def cluster_from_sinfo_json(
    nodes_doc: Doc | str, partitions_doc: Doc | str | None = None, *, name: str = "cluster"
) -> SlurmCluster:
    """`sinfo --json` (nodes) and slurmrestd's partitions document as a ClusterState.

    Partitions keep slurmctld's order (as sinfo's `#P` sort uses). Without a partitions
    document, partitions are inferred from the nodes' lists (no limits known)."""
    ndata = _load(nodes_doc)
    nodes: list[Node] = []
    node_extras: dict[str, NodeExtras] = {}
    for n in ndata.get("nodes", []):
        node, ex = _node(n)
        nodes.append(node)
        node_extras[node.name] = ex
    parts: list[Partition] = []
    part_extras: dict[str, PartitionExtras] = {}
    if partitions_doc is not None:
        for p in _load(partitions_doc).get("partitions", []):
            part, pex = _partition(p)
            parts.append(part)
            part_extras[part.name] = pex
    else:
        names = list(dict.fromkeys(p for node in nodes for p in node.partitions))
        for pname in names:
            members = tuple(node.name for node in nodes if pname in node.partitions)
            parts.append(Partition(name=pname, nodes=members))
    cluster = ClusterState(name=name, nodes=tuple(nodes), partitions=tuple(parts))
    return SlurmCluster(cluster, node_extras, part_extras)
