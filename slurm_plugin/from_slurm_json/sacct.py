"""`sacct --json` (dbv0.0.38 `jobs` with `steps`) -> `Job`s, `Step`s and `JobExtras`, with the
exit codes from the text form where 22.05's JSON is wrong."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gateway.compat.arrays import parse_array
from gateway.compat.fmt_common import (
    JobExtras,
    hostlist_expand,
)
from gateway.model.job import Job, Step, wait_status
from gateway.model.jobspec import JobSpec
from gateway.model.state import state_from_slurm
from gateway.model.values import INFINITE, NO_VAL, ArraySpec, IndexRange
from slurm_plugin.from_slurm_json.common import (
    Doc,
    SlurmAccounting,
    UidOf,
    _default_gid,
    _default_uid,
    _int,
    _load,
    _reason,
    _str,
    _time,
)


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
