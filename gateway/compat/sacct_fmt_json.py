"""`sacct --json` as Slurm 22.05 prints it (openapi/dbv0.0.38 jobs with their steps).

The layout follows dbv0.0.38's parser tables. Two 22.05 behaviours are reproduced by
default because tools written against real Slurm see them: exit codes of processes that
exited are always `{"status": "SUCCESS", "return_code": 0}` (the dumper never reads the
status; `faithful_exit_codes=False` prints `FAILED` and the real code instead), and times
that are unset print as null.
"""

from __future__ import annotations

import signal as _signal
from collections.abc import Mapping, Sequence

from gateway.compat.clusters import cluster_of
from gateway.compat.fmt_common import (
    JobExtras,
    JsonValue,
    hostlist_compress,
    json_c_dumps,
)
from gateway.compat.job_fields import SiteDefaults
from gateway.compat.job_fmt_values import JobValues, job_values
from gateway.compat.sacct_fmt import run_steps
from gateway.compat.sacct_fmt_fields import accounted_exit_code
from gateway.compat.squeue_fmt_json import slurm_meta
from gateway.model.job import Job, Step
from gateway.model.state import JobState
from gateway.model.suspension import suspended_seconds
from gateway.model.values import INFINITE, NO_VAL

__all__ = ["STANDARD_TRES_IDS", "sacct_json", "sacct_json_doc"]

STANDARD_TRES_IDS: dict[str, int] = {
    "cpu": 1,
    "mem": 2,
    "energy": 3,
    "node": 4,
    "billing": 5,
    "fs/disk": 6,
    "vmem": 7,
    "pages": 8,
}


def _exit(status: int, faithful: bool) -> dict[str, JsonValue]:
    if status & 0x7F:
        sig = status & 0x7F
        try:
            name = _signal.strsignal(sig) or f"Unknown signal {sig}"
        except ValueError:
            name = f"Unknown signal {sig}"
        return {
            "status": "SIGNALED",
            "return_code": None,
            "signal": {"signal_id": sig, "name": name},
        }
    code = (status >> 8) & 0xFF
    if faithful or code == 0:
        return {"status": "SUCCESS", "return_code": 0}
    return {"status": "FAILED", "return_code": code}


def _time_or_null(epoch: float | None) -> int | None:
    if epoch is None:
        return 0
    value = int(epoch)
    return None if value in (NO_VAL, INFINITE) else value


def _tres_list(tres: str | None, ids: Mapping[str, int]) -> list[JsonValue]:
    out: list[JsonValue] = []
    for part in (tres or "").split(","):
        if not part:
            continue
        key, _, count = part.partition("=")
        kind, _, name = key.partition("/")
        tres_id = ids.get(key, ids.get(kind, 0))
        value: int = _count(kind, count)
        out.append({"type": kind, "name": name or None, "id": tres_id, "count": value})
    return out


def _count(kind: str, count: str) -> int:
    units = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3}
    if kind == "mem" and count and count[-1] in units:
        return int(float(count[:-1]) * units[count[-1]])
    return int(count) if count.isdigit() else 0


def _energy() -> list[JsonValue]:
    return [{"type": "energy", "name": None, "id": 3, "count": 0}]


def _step(
    v: JobValues, step: Step, ids: Mapping[str, int], faithful: bool, now: float
) -> JsonValue:
    nodes = list(step.nodes)
    start = _time_or_null(step.start_time)
    end = _time_or_null(step.end_time)
    if start and end:
        elapsed = max(end - start, 0)
    elif start:
        elapsed = int(now) - start
    else:
        elapsed = 0
    alloc = step.extra.get("tres_alloc")
    max_used: list[JsonValue] = []
    if step.max_rss_kb:
        max_used.append({"type": "mem", "name": None, "id": 2, "count": step.max_rss_kb * 1024})
    requid = step.extra.get("requid")
    return {
        "nodes": {"list": list(nodes), "count": len(nodes), "range": hostlist_compress(nodes)},
        "tres": {
            "requested": {"max": max_used, "min": [], "average": _energy(), "total": _energy()},
            "consumed": {"max": [], "min": [], "average": _energy(), "total": _energy()},
            "allocated": _tres_list(alloc, ids),
        },
        "time": {
            "elapsed": elapsed,
            "end": end,
            "start": start,
            "suspended": 0,
            "system": {"seconds": 0, "microseconds": 0},
            "total": {"seconds": 0, "microseconds": 0},
            "user": {"seconds": 0, "microseconds": 0},
        },
        "exit_code": _exit(step.exit_code, faithful),
        "tasks": {"count": step.ntasks},
        "pid": None,
        "CPU": {"requested_frequency": {"min": 0, "max": 0}, "governor": []},
        "kill_request_user": requid if requid is None else _user(v, int(requid)),
        "state": step.state.long,
        "statistics": {"CPU": {"actual_frequency": 0}, "energy": {"consumed": 0}},
        "step": {
            "job_id": step.job_id,
            "het": {"component": None},
            "id": int(step.step_id) if step.step_id.isdigit() else step.step_id,
            "name": step.name,
        },
        "task": {"distribution": "Unknown"},
    }


def _user(v: JobValues, uid: int) -> str | None:
    return v.job.user if uid == v.job.uid else str(uid)


_SCHED = {
    "SchedNotSet": "NOT_SET",
    "SchedSubmit": "STARTED_ON_SUBMIT",
    "SchedMain": "STARTED_ON_SCHEDULE",
    "SchedBackfill": "STARTED_ON_BACKFILL",
}


def _flags(v: JobValues) -> list[JsonValue]:
    out: list[JsonValue] = []
    for flag in v.extras.acct_flags:
        if flag in _SCHED:
            # dbv0.0.38 also matches CLEAR_SCHEDULING (mask 0xf) whenever a bit is set
            out = ["CLEAR_SCHEDULING", _SCHED[flag]]
    return out


def _job(
    v: JobValues, steps: Sequence[Step], ids: Mapping[str, int], faithful: bool, now: float
) -> JsonValue:
    job, spec, ex = v.job, v.job.spec, v.extras
    start = _time_or_null(job.start_time)
    end = _time_or_null(job.end_time)
    paused = suspended_seconds(job, now)  # slurmdbd: elapsed leaves the pauses out
    if start and (job.state in (JobState.RUNNING, JobState.SUSPENDED) or not end):
        elapsed = max(int(now) - start - paused, 0)
    elif start and end:
        elapsed = max(end - start - paused, 0)
    else:
        elapsed = 0
    array_task: str | None = None
    if job.is_array_meta and job.array_pending is not None:
        mask = 0
        for i in job.array_pending.indices():
            mask |= 1 << i
        array_task = f"0x{mask:X}"
    limit = job.time_limit
    requid = ex.requid
    alloc = _tres_list(v.tres_alloc, ids) if v.tres_alloc else []
    if alloc:
        alloc.insert(2, {"type": "energy", "name": None, "id": 3, "count": None})
    return {
        "account": job.account,
        "comment": {"administrator": None, "job": spec.comment, "system": None},
        "allocation_nodes": ex.num_nodes if ex.num_nodes is not None else len(job.nodes),
        "array": {
            "job_id": job.array_job_id,
            "limits": {"max": {"running": {"tasks": v.array_max_tasks}}},
            "task": array_task,
            "task_id": job.array_task_id,
        },
        "association": {
            "account": job.account,
            "cluster": ex.cluster or cluster_of(job),
            "partition": None,
            "user": job.user,
        },
        "cluster": ex.cluster or cluster_of(job),
        "constraints": spec.constraint or "",
        "container": spec.container,
        "derived_exit_code": _exit(job.derived_exit_code, faithful),
        "time": {
            "elapsed": elapsed,
            "eligible": _time_or_null(job.eligible_time),
            "end": end,
            "start": start,
            "submission": int(job.submit_time),
            "suspended": paused,
            "system": {"seconds": 0, "microseconds": 0},
            "limit": None if limit in (INFINITE, NO_VAL) else limit,
            "total": {"seconds": 0, "microseconds": 0},
            "user": {"seconds": 0, "microseconds": 0},
        },
        "exit_code": _exit(accounted_exit_code(job), faithful),
        "flags": _flags(v),
        "group": job.group,
        "het": {
            "job_id": ex.het_job_id,
            "job_offset": ex.het_job_offset if ex.het_job_id else None,
        },
        "job_id": job.job_id,
        "name": spec.name,
        "mcs": {"label": ex.mcs_label or ""},
        "nodes": v.nodes_str or "None assigned",
        "partition": job.partition,
        "priority": job.priority,
        "qos": job.qos,
        "required": {"CPUs": v.num_cpus, "memory": v.memory[0]},
        "kill_request_user": None if requid is None else _user(v, requid),
        "reservation": {"id": 0, "name": 0},
        "state": {
            "current": job.state.long,
            "reason": ex.reason_prev or job.reason.value,
        },
        "steps": [_step(v, s, ids, faithful, now) for s in steps],
        "tres": {"allocated": alloc, "requested": _tres_list(v.tres_req, ids)},
        "user": job.user,
        "wckey": {"wckey": spec.wckey or "", "flags": []},
        "working_directory": spec.workdir,
    }


def _dbd_order(jobs: Sequence[Job]) -> list[Job]:
    """slurmdbd's order, which `sacct --json` keeps (not sacct's text order): by job id,
    and the older records of a requeued job prepended to the front as they are met."""
    out: list[Job] = []
    last = None
    for job in sorted(jobs, key=lambda j: (j.job_id, -j.submit_time, -j.restart_count)):
        if job.job_id == last:
            out.insert(0, job)
        else:
            out.append(job)
        last = job.job_id
    return out


def sacct_json_doc(
    jobs: Sequence[Job],
    steps: Mapping[int, Sequence[Step]] | None = None,
    *,
    now: float,
    extras: Mapping[int, JobExtras] | None = None,
    site: SiteDefaults | None = None,
    tres_ids: Mapping[str, int] | None = None,
    faithful_exit_codes: bool = True,
) -> dict[str, JsonValue]:
    """The document `sacct --json` prints, as Python data (jobs by job id, as slurmdbd
    returns them)."""
    ids = dict(STANDARD_TRES_IDS)
    ids.update(tres_ids or {})
    rows: list[JsonValue] = []
    for job in _dbd_order(jobs):
        v = job_values(job, (extras or {}).get(job.job_id), site)
        rows.append(_job(v, run_steps(job, steps), ids, faithful_exit_codes, now))
    return {
        "meta": slurm_meta("openapi/dbv0.0.38", "Slurm OpenAPI DB v0.0.38"),
        "errors": [],
        "jobs": rows,
    }


def sacct_json(
    jobs: Sequence[Job],
    steps: Mapping[int, Sequence[Step]] | None = None,
    *,
    now: float,
    extras: Mapping[int, JobExtras] | None = None,
    site: SiteDefaults | None = None,
    tres_ids: Mapping[str, int] | None = None,
    faithful_exit_codes: bool = True,
) -> str:
    """`sacct --json`'s exact text (no trailing newline)."""
    return json_c_dumps(
        sacct_json_doc(
            jobs,
            steps,
            now=now,
            extras=extras,
            site=site,
            tres_ids=tres_ids,
            faithful_exit_codes=faithful_exit_codes,
        )
    )
