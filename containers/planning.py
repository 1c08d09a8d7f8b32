"""Planning one run of a job on this machine: the JobPlan its supervisor executes.

Pure resolution, no process started: the job's environment (Slurm's, over the user's login
environment), its output files, time and memory limits, supplementary groups, and, for a job
with an image, the container to run it in (labelled with its job, run and backend so that the
backend can find and end it without its supervisor: containers.docker_runner).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from containers.docker_runner import job_labels, parse_mounts
from containers.gpu_request import job_gpus_of
from containers.launching import SHIMS_DIR_VAR, SRUN_DIR_VAR, shims_dir
from containers.proc import login_environment
from containers.spool import ContainerPlan, JobPlan
from containers.srun_claim import JOB_GPUS_VAR, JobGpus
from containers.srun_io import KILL_WAIT_VAR
from containers.srun_layout import TOPOLOGY_VAR
from containers.step_rules import PERIODIC_TIMEOUT_S
from gateway.compat.filename import NO_TASK, PatternContext, default_output, expand_for_open
from gateway.compat.hostlist import expand
from gateway.compat.job_env import batch_environment, submit_rlimits, submit_umask
from gateway.model.backend import BackendError, Launch
from gateway.model.values import INFINITE

__all__ = ["STEP_DIR_VAR", "NodeSettings", "plan_job"]

STEP_DIR_VAR = "CALDERA_STEP_DIR"  # where srun records steps (set in every job's environment)


@dataclass(frozen=True, slots=True)
class NodeSettings:
    """What the backend knows of this machine that goes into every plan."""

    cluster: str
    namespace: str  # the backend's process-tracking namespace (containers.proctrack)
    bin_dir: Path  # put first on the job's PATH (srun's shim)
    time_scale: float
    kill_wait_s: float
    poll_interval_s: float
    topology: Mapping[str, tuple[str, str]]  # node -> (SLURM_TOPOLOGY_ADDR, its pattern)
    def_mem_per_cpu_mb: int | None
    slurm_conf: str | None
    docker_host: str | None


def plan_job(launch: Launch, jobdir: Path, node: NodeSettings) -> JobPlan:
    """The plan of `launch` (run `launch.job.restart_count`) in the spool directory `jobdir`."""
    job, spec = launch.job, launch.job.spec
    if os.geteuid() != 0 and job.uid != os.geteuid():
        raise BackendError(
            f"job {job.job_id}: cannot run as uid {job.uid} "
            f"(the local backend runs as uid {os.geteuid()})"
        )
    if not launch.placement:
        raise BackendError(f"job {job.job_id}: no placement")
    # the batch script runs on the first node of the allocation (slurmctld's BatchHost),
    # whichever of this machine's virtual nodes that is
    here = launch.placement[0]
    batch_host = here.node
    login = login_environment(job.user)
    env = batch_environment(
        launch,
        launch.environment,
        node_name=batch_host,
        node_id=0,
        cluster_name=node.cluster,
        login_env=login,
        topology=node.topology.get(batch_host),
        def_mem_per_cpu_mb=node.def_mem_per_cpu_mb,
        slurm_conf=node.slurm_conf,
    )
    env[STEP_DIR_VAR] = str(jobdir / "steps")
    if node.topology:  # each node's address, for srun's tasks there
        nodes = expand(env["SLURM_JOB_NODELIST"])
        env[TOPOLOGY_VAR] = " ".join(node.topology.get(n, (n, ""))[0] for n in nodes)
    if any(p.gpus for p in launch.placement):
        env[JOB_GPUS_VAR] = _job_gpus(launch).render()
    env[KILL_WAIT_VAR] = str(node.kill_wait_s)
    if len({p.node for p in launch.placement}) > 1:
        # the job's nodes are virtual nodes of this one machine: OpenMPI's shared-memory
        # transport cannot span two of its daemons there (ranks crash in btl/vader), so
        # mpirun across them talks TCP unless the job chose its own transports
        env.setdefault("OMPI_MCA_btl", "self,tcp")
    env[SRUN_DIR_VAR] = str(node.bin_dir)  # a login shell's /etc/profile.d hook reads it
    shims = shims_dir(env.get("PATH", ""))
    if shims is not None:
        env[SHIMS_DIR_VAR] = shims
    env["PATH"] = f"{node.bin_dir}:{env.get('PATH', login.get('PATH', '/usr/bin:/bin'))}"
    ctx = PatternContext(
        job_id=job.job_id,
        job_name=spec.name,
        user=job.user,
        workdir=spec.workdir,
        array_job_id=job.array_job_id,
        array_task_id=job.array_task_id if job.array_task_id is not None else NO_TASK,
        node_name=batch_host,
        node_id=0,
        task_id=0,
    )
    stdout = expand_for_open(spec.stdout or default_output(job.array_task_id is not None), ctx)
    stderr = expand_for_open(spec.stderr, ctx) if spec.stderr else None
    stdin = expand_for_open(spec.stdin, ctx) if spec.stdin else "/dev/null"
    minutes = job.time_limit or (spec.time_limit or 0)
    limit_s = None if minutes in (0, INFINITE) else minutes * 60 * node.time_scale
    if spec.time_limit == 0:  # only `scontrol update TimeLimit=0` sets it: already over
        limit_s = 0.0
    signal = None
    if spec.signal is not None and not spec.signal.reservation:
        signal = (
            spec.signal.signal,
            spec.signal.time * node.time_scale,
            spec.signal.batch_only,
        )
    container = None
    if spec.container_image:
        host = node.docker_host or _docker_host_from_env()
        if not host:
            raise BackendError(
                f"job {job.job_id} asks for image {spec.container_image!r} "
                "but no Docker API is configured (CALDERA_DOCKER_HOST or "
                "DOCKER_HOST)"
            )
        container = ContainerPlan(
            image=spec.container_image,
            docker_host=host,
            mounts=parse_mounts(spec.container_mounts),
            workdir=spec.container_workdir,
            name=spec.container_name,
            labels=job_labels(node.namespace, job.job_id, job.restart_count),
        )
    return JobPlan(
        job_id=job.job_id,
        name=spec.name,
        node=batch_host,
        user=job.user,
        uid=job.uid,
        gid=job.gid,
        groups=_groups(job.user, job.gid),
        workdir=spec.workdir,
        script=str(jobdir / "slurm_script"),
        args=tuple(spec.script_args),
        env=env,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        open_append=spec.open_mode == "append",
        time_limit_s=limit_s,
        kill_wait_s=node.kill_wait_s,
        signal=signal,
        memory_limit_mb=_memory_limit(launch, here.memory_mb, here.cpus, len(here.gpus)),
        cpus=here.cpus,
        ntasks=here.tasks or 1,
        umask=submit_umask(launch.environment),
        rlimits=submit_rlimits(launch.environment),
        poll_interval_s=node.poll_interval_s,
        container=container,
        batch=job.batch,
        check_period_s=PERIODIC_TIMEOUT_S * node.time_scale,
    )


def _job_gpus(launch: Launch) -> JobGpus:
    """The job's GPU request and the GPUs it holds on each node, for its steps."""
    return job_gpus_of(launch.job.spec, {p.node: p.gpus for p in launch.placement})


def _docker_host_from_env() -> str | None:
    return os.environ.get("CALDERA_DOCKER_HOST") or os.environ.get("DOCKER_HOST") or None


def _groups(user: str, gid: int) -> tuple[int, ...]:
    try:
        return tuple(sorted(set(os.getgrouplist(user, gid))))
    except (KeyError, OSError):
        return (gid,)


def _memory_limit(launch: Launch, placed_mb: int, cpus: int, gpus: int) -> int:
    """The job's memory on this node: what was placed, else what the request implies."""
    spec = launch.job.spec
    if placed_mb > 0:
        return placed_mb
    if spec.mem_per_node_mb:
        return spec.mem_per_node_mb
    if spec.mem_per_cpu_mb:
        return spec.mem_per_cpu_mb * max(cpus, 1)
    if spec.mem_per_gpu_mb and gpus:
        return spec.mem_per_gpu_mb * gpus
    return 0
