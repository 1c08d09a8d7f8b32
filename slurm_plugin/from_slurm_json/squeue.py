"""`squeue --json` (openapi/v0.0.38 `jobs`) -> `Job`s with `JobExtras`."""

from __future__ import annotations

from gateway.compat.dependency import parse_dependency
from gateway.compat.fmt_common import (
    JobExtras,
    hostlist_expand,
)
from gateway.model.job import Job
from gateway.model.jobspec import JobSpec
from gateway.model.state import state_from_slurm
from gateway.model.values import INFINITE
from slurm_plugin.from_slurm_json.common import (
    _SHARED,
    Doc,
    SlurmJobs,
    _array_spec,
    _hold,
    _int,
    _load,
    _opt_int,
    _per_gpu,
    _reason,
    _str,
    _time,
    _tres_items,
)


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
