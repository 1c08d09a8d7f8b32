"""A submission as slurmrestd's job description (v0.0.36-v0.0.38 `job_properties`).

22.05's REST job description cannot say everything sbatch can, and some keys are
broken; such requests raise `RestUnsupported` and go through the commands instead:
- no key for --nodelist, --exclude, --contiguous, --switches, --tmp, --ntasks-per-gpu,
  --overcommit, --export-file, --export=NONE;
- `argv` (script arguments) crashes 22.05's slurmrestd (`free(): double free`);
- `requeue: false` is ignored (the job stays requeueable);
- `signal` refuses the `B:` (batch shell only) form; `get_user_environment` is refused;
- `begin_time` wants a time string, not the integer the schema says.
"""

from __future__ import annotations

import time
from typing import Any

from gateway.model.jobspec import JobSpec, Sharing
from gateway.model.values import INFINITE, GresItem, signal_num_to_name
from slurm_plugin.client import SubmitRequest

__all__ = ["RestUnsupported", "rest_job_properties"]


class RestUnsupported(Exception):
    """The request uses options slurmrestd 22.05 cannot take; `fields` names them."""

    def __init__(self, fields: list[str]) -> None:
        super().__init__("slurmrestd 22.05 cannot express: " + ", ".join(fields))
        self.fields = fields


def _gpu_text(items: tuple[GresItem, ...]) -> str:
    return ",".join(f"{i.type}:{i.count}" if i.type else str(i.count) for i in items)


def _iso(epoch: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch))


def _unsupported(spec: JobSpec, request: SubmitRequest) -> list[str]:
    checks = {
        "--nodelist": spec.nodelist,
        "--exclude": spec.exclude,
        "--contiguous": spec.contiguous or None,
        "--switches": spec.switches,
        "--tmp": spec.tmp_mb,
        "--ntasks-per-gpu": spec.ntasks_per_gpu,
        "--overcommit": spec.overcommit or None,
        "--export-file": spec.export_file,
        "--get-user-env": spec.get_user_env,
        "--no-requeue": True if spec.requeue is False else None,
        "--signal=B:": True if spec.signal is not None and spec.signal.batch_only else None,
        "--signal=R:": True if spec.signal is not None and spec.signal.reservation else None,
        "script arguments": request.script_args or None,
        "--export=NONE": True if request.export_none else None,
        "heterogeneous job": spec.het or None,
        "--uid/--gid": spec.uid if spec.uid is not None else spec.gid,
        "other options": spec.extra or None,
    }
    return [name for name, value in checks.items() if value is not None]


def rest_job_properties(request: SubmitRequest) -> dict[str, Any]:
    """The `job` object of `POST /slurm/vX/job/submit`; raises RestUnsupported."""
    spec = request.spec
    bad = _unsupported(spec, request)
    if bad:
        raise RestUnsupported(bad)
    job: dict[str, Any] = {
        "name": spec.name,
        "current_working_directory": request.workdir,
        "environment": dict(request.environment),
    }

    def put(key: str, value: Any) -> None:
        if value is not None:
            job[key] = value

    put("partition", ",".join(spec.partitions) or None)
    put("account", spec.account)
    put("qos", spec.qos)
    put("reservation", spec.reservation)
    put("wckey", spec.wckey)
    put("comment", spec.comment)
    if spec.nodes_min is not None:
        nmax = spec.nodes_max
        job["nodes"] = f"{spec.nodes_min}-{nmax}" if nmax else str(spec.nodes_min)
    put("tasks", spec.ntasks)
    put("tasks_per_node", spec.ntasks_per_node)
    put("tasks_per_socket", spec.ntasks_per_socket)
    put("tasks_per_core", spec.ntasks_per_core)
    put("cpus_per_task", spec.cpus_per_task)
    put("cpus_per_gpu", str(spec.cpus_per_gpu) if spec.cpus_per_gpu is not None else None)
    put("minimum_cpus_per_node", spec.mincpus)
    put("sockets_per_node", spec.sockets_per_node)
    put("cores_per_socket", spec.cores_per_socket)
    put("threads_per_core", spec.threads_per_core)
    put("memory_per_node", spec.mem_per_node_mb)
    put("memory_per_cpu", spec.mem_per_cpu_mb)
    put("memory_per_gpu", spec.mem_per_gpu_mb)
    if spec.gres:
        job["gres"] = ",".join(i.render() for i in spec.gres)
    if spec.gpus:
        job["gpus"] = _gpu_text(spec.gpus)
    if spec.gpus_per_node:
        job["gpus_per_node"] = _gpu_text(spec.gpus_per_node)
    if spec.gpus_per_socket:
        job["gpus_per_socket"] = _gpu_text(spec.gpus_per_socket)
    if spec.gpus_per_task:
        job["gpus_per_task"] = _gpu_text(spec.gpus_per_task)
    put("licenses", spec.licenses)
    put("constraints", spec.constraint)
    if spec.sharing is Sharing.EXCLUSIVE:
        job["exclusive"] = "exclusive"
    elif spec.sharing is Sharing.USER:
        job["exclusive"] = "user"
    elif spec.sharing is Sharing.MCS:
        job["exclusive"] = "mcs"
    elif spec.sharing is Sharing.OVERSUBSCRIBE:
        job["oversubscribe"] = True
    put("cpu_binding_hint", spec.hint)
    put("distribution", spec.distribution)
    if spec.time_limit is not None:
        job["time_limit"] = INFINITE if spec.time_limit == INFINITE else spec.time_limit
    put("time_minimum", spec.time_min)
    if spec.begin is not None:
        job["begin_time"] = _iso(spec.begin)
    if spec.deadline is not None:
        job["deadline"] = _iso(spec.deadline)
    put("kill_on_invalid_dependency", spec.kill_on_invalid_dep)
    put("nice", spec.nice)
    put("priority", str(spec.priority) if spec.priority is not None else None)
    if spec.requeue:
        job["requeue"] = True
    if spec.signal is not None:
        job["signal"] = f"{signal_num_to_name(spec.signal.signal)}@{spec.signal.time}"
    put("open_mode", spec.open_mode)
    if spec.mail_type:
        job["mail_type"] = ",".join(sorted(spec.mail_type))
    put("mail_user", spec.mail_user)
    put("standard_output", spec.stdout)
    put("standard_error", spec.stderr)
    put("standard_input", spec.stdin)
    put("container", spec.container)
    put("burst_buffer", spec.burst)
    if request.array_task is not None:
        job["array"] = str(request.array_task)
    put("dependency", request.dependency)
    return job
