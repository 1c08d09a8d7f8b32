"""`squeue --json` as Slurm 22.05 prints it (openapi/v0.0.38 `dump_job_info`).

22.05's squeue ignores its filters with `--json` and dumps every job slurmctld knows, in
slurmctld's order, wrapped in `meta` (plugin and Slurm version) and `errors`; the text is
json-c's pretty form (two-space indent, escaped `/`) without a trailing newline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from gateway.compat.clusters import cluster_of
from gateway.compat.fmt_common import (
    JobExtras,
    JsonValue,
    hostlist_compress,
    json_c_dumps,
)
from gateway.compat.job_fields import SiteDefaults
from gateway.compat.job_fmt_values import JobValues, job_values
from gateway.model.job import Job
from gateway.model.jobspec import Sharing
from gateway.model.state import JobState
from gateway.model.values import INFINITE

__all__ = ["SLURM_META", "JobTexts", "slurm_meta", "squeue_json", "squeue_json_doc"]

SLURM_RELEASE: Final = (22, 5, 8)


def slurm_meta(
    plugin_type: str = "openapi/v0.0.38", name: str = "Slurm OpenAPI v0.0.38"
) -> dict[str, JsonValue]:
    """The `meta` object of Slurm 22.05.8's JSON output."""
    major, minor, micro = SLURM_RELEASE
    return {
        "plugin": {"type": plugin_type, "name": name},
        "Slurm": {
            "version": {"major": major, "micro": micro, "minor": minor},
            "release": f"{major}.{minor:02d}.{micro}",
        },
    }


SLURM_META: Final = slurm_meta()

_SHARED: dict[Sharing | None, str | None] = {
    None: None,
    Sharing.EXCLUSIVE: "none",
    Sharing.OVERSUBSCRIBE: "shared",
    Sharing.USER: "user",
    Sharing.MCS: "mcs",
}


def _s(value: str | None) -> str:
    return value or ""


def _t(epoch: float | None) -> int:
    return int(epoch) if epoch else 0


def _flags(v: JobValues) -> list[JsonValue]:
    if v.extras.job_flags is not None:
        return list(v.extras.job_flags)
    spec = v.job.spec
    out: list[JsonValue] = []
    if spec.kill_on_invalid_dep:
        out.append("KILL_INV_DEP")
    if spec.cpus_per_task is not None:
        out.append("JOB_CPUS_SET")
    if v.job.state is JobState.RUNNING:
        out.append("JOB_WAS_RUNNING")
    if spec.mem_per_node_mb is not None or spec.mem_per_cpu_mb is not None:
        out.append("JOB_MEM_SET")
    return out


def _per_gpu(value: int | None) -> str | None:
    return f"gres:gpu:{value}" if value is not None else None


def _billing(v: JobValues) -> float | None:
    if v.extras.billable_known:
        return v.extras.billable_tres
    if not v.job.nodes:  # billable TRES are computed when the job starts
        return None
    for part in (v.tres_alloc or v.tres_req).split(","):
        if part.startswith("billing="):
            return float(part.split("=", 1)[1])
    return float(v.num_cpus)


def _resources(v: JobValues) -> dict[str, JsonValue]:
    nodes = v.job.nodes
    per_node = max(v.num_cpus // max(len(nodes), 1), 1)
    mb, per_cpu = v.memory
    mem = mb * per_node if per_cpu else mb
    alloc: list[JsonValue] = [
        {
            "sockets": {"0": {"cores": {str(c): "allocated" for c in range(per_node)}}},
            "nodename": name,
            "cpus_used": 0,  # in use by steps; Caldera does not track steps' share
            "memory_used": 0,
            "memory_allocated": mem,
        }
        for name in nodes
    ]
    return {
        "nodes": hostlist_compress(nodes),
        "allocated_cores": v.num_cpus,
        "allocated_hosts": len(nodes),
        "allocated_nodes": alloc,
    }


def _job(v: JobValues) -> dict[str, JsonValue]:
    job, spec, ex = v.job, v.job.spec, v.extras
    mb, per_cpu = v.memory
    task_str = v.array_task_str
    freq_min, freq_max, freq_gov = ex.cpu_freq
    d: dict[str, JsonValue] = {
        "account": job.account,
        "accrue_time": _t(ex.accrue_time),
        "admin_comment": "",
        "array_job_id": job.array_job_id,
        "array_task_id": job.array_task_id,
        "array_max_tasks": v.array_max_tasks,
        "array_task_string": _s(task_str),
        "association_id": ex.assoc_id or 0,
        "batch_features": "",
        "batch_flag": v.batch_flag,
        "batch_host": _s(v.batch_host),
        "flags": _flags(v),
        "burst_buffer": _s(spec.burst),
        "burst_buffer_state": "",
        "cluster": ex.cluster or cluster_of(job),
        "cluster_features": "",
        "command": _s(v.command),
        "comment": _s(spec.comment),
        "container": _s(spec.container),
        "contiguous": spec.contiguous,
        "core_spec": None,
        "thread_spec": None,
        "cores_per_socket": spec.cores_per_socket,
        "billable_tres": _billing(v),
        # 22.05 tests cpu_freq_min (not cpus_per_task) before printing cpus_per_task, and
        # misspells the minimum's name when it prints a value
        "cpus_per_task": (ex.cpus_per_task or 1) if freq_min is not None else None,
        "cpu_frequency_minumum" if freq_min is not None else "cpu_frequency_minimum": freq_min,
        "cpu_frequency_maximum": freq_max,
        "cpu_frequency_governor": freq_gov,
        "cpus_per_tres": _s(v.extras.cpus_per_tres or _per_gpu(spec.cpus_per_gpu)),
        "deadline": spec.deadline or 0,
        "delay_boot": ex.delay_boot,
        "dependency": _s(v.dependency),
        "derived_exit_code": job.derived_exit_code,
        "eligible_time": _t(job.eligible_time),
        "end_time": _t(job.end_time),
        "excluded_nodes": _s(spec.exclude),
        "exit_code": job.exit_code,
        "features": _s(spec.constraint),
        "federation_origin": "",
        "federation_siblings_active": "",
        "federation_siblings_viable": "",
        "gres_detail": [],
        "group_id": job.gid,
        "group_name": job.group,
        "job_id": job.job_id,
    }
    if job.nodes:
        d["job_resources"] = _resources(v)
    d.update(
        {
            "job_state": job.state.long,
            "last_sched_evaluation": _t(ex.last_sched_eval),
            "licenses": _s(spec.licenses),
            "max_cpus": 0,
            "max_nodes": v.max_nodes,
            "mcs_label": _s(ex.mcs_label),
            "memory_per_tres": _s(v.mem_per_tres),
            "name": spec.name,
            "nodes": v.nodes_str,
            "nice": spec.nice or None,
            "tasks_per_core": spec.ntasks_per_core,
            "tasks_per_node": spec.ntasks_per_node or 0,
            "tasks_per_socket": spec.ntasks_per_socket,
            "tasks_per_board": 0,
            "cpus": None if ex.tasks_unknown else v.num_cpus,
            "node_count": v.num_nodes,
            "tasks": None if ex.tasks_unknown else v.num_tasks,
            "het_job_id": ex.het_job_id,
            "het_job_id_set": _s(ex.het_job_id_set),
            "het_job_offset": ex.het_job_offset,
            "partition": job.partition,
            "prefer": "",
            "memory_per_node": None if per_cpu or not mb else mb,
            "memory_per_cpu": mb if per_cpu else None,
            "minimum_cpus_per_node": v.min_cpus_node,
            "minimum_tmp_disk_per_node": spec.tmp_mb or 0,
            "preempt_time": 0,
            "pre_sus_time": ex.pre_sus_time,
            "priority": job.priority,
            "profile": list(ex.profile) if ex.profile is not None else None,
            "qos": job.qos,
            "reboot": False,
            "required_nodes": _s(spec.nodelist),
            "requeue": v.requeue,
            "resize_time": 0,
            "restart_cnt": v.restarts,
            "resv_name": _s(spec.reservation),
            "shared": _SHARED[spec.sharing],
            "show_flags": ["SHOW_ALL", "SHOW_DETAIL", "SHOW_LOCAL"],
            "sockets_per_board": 0,
            "sockets_per_node": spec.sockets_per_node,
            "start_time": _t(job.start_time),
            "state_description": _s(job.state_desc),
            "state_reason": v.reason_name,
            "standard_error": _s(v.stderr_raw),
            "standard_input": _s(v.stdin_raw),
            "standard_output": _s(v.stdout_raw),
            "submit_time": _t(job.submit_time),
            "suspend_time": _t(ex.suspend_time),
            "system_comment": "",
            "time_limit": None if job.time_limit == INFINITE else job.time_limit,
            "time_minimum": v.time_min,
            "threads_per_core": spec.threads_per_core,
            "tres_bind": _s(ex.tres_bind),
            "tres_freq": "",
            "tres_per_job": _s(v.tres_per_job),
            "tres_per_node": _s(v.tres_per_node),
            "tres_per_socket": _s(v.tres_per_socket),
            "tres_per_task": _s(v.tres_per_task),
            "tres_req_str": v.tres_req,
            "tres_alloc_str": _s(v.tres_alloc),
            "user_id": job.uid,
            "user_name": job.user,
            "wckey": _s(spec.wckey),
            "current_working_directory": spec.workdir,
        }
    )
    return d


def squeue_json_doc(
    jobs: Sequence[Job],
    *,
    extras: Mapping[int, JobExtras] | None = None,
    site: SiteDefaults | None = None,
) -> dict[str, JsonValue]:
    """The document `squeue --json` prints, as Python data (every job, in the given order)."""
    rows: list[JsonValue] = [
        _job(job_values(job, (extras or {}).get(job.job_id), site)) for job in jobs
    ]
    return {"meta": slurm_meta(), "errors": [], "jobs": rows}


class JobTexts:
    """Each job's part of the `--json` text, kept per record (a change replaces the record)
    while the site defaults stay: the gateway renders every `squeue --json`, and encoding
    10,000 jobs took ~1.7 s."""

    def __init__(self) -> None:
        self._site: SiteDefaults | None = None
        self._texts: dict[int, tuple[Job, str]] = {}

    def texts(self, jobs: Sequence[Job], site: SiteDefaults | None) -> list[str]:
        """The jobs' objects as printed inside the `jobs` list (indented two levels)."""
        if site != self._site:
            self._site, self._texts = site, {}
        kept = self._texts
        out: list[str] = []
        for job in jobs:
            hit = kept.get(job.job_id)
            if hit is None or hit[0] is not job:
                # no raw newline inside a json-c string: indenting is a replace
                text = json_c_dumps(_job(job_values(job, None, site))).replace("\n", "\n    ")
                hit = kept[job.job_id] = (job, text)
            out.append(hit[1])
        if len(kept) > 2 * len(jobs) + 1024:  # records gone: forget theirs
            shown = {j.job_id for j in jobs}
            self._texts = {k: v for k, v in kept.items() if k in shown}
        return out


def squeue_json(
    jobs: Sequence[Job],
    *,
    extras: Mapping[int, JobExtras] | None = None,
    site: SiteDefaults | None = None,
    cache: JobTexts | None = None,
) -> str:
    """`squeue --json`'s exact text (no trailing newline, as squeue prints it). `cache`
    (without `extras`): the jobs' texts kept from earlier calls."""
    if cache is None or extras is not None or not jobs:
        return json_c_dumps(squeue_json_doc(jobs, extras=extras, site=site))
    empty = json_c_dumps({"meta": slurm_meta(), "errors": [], "jobs": []})
    head = empty[: -len("[\n  ]\n}")]
    return "".join((head, "[\n    ", ",\n    ".join(cache.texts(jobs, site)), "\n  ]\n}"))
