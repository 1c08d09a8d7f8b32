"""The SLURM_* environment of a gang on Kubernetes: job-wide values and per-rank values.

A rank is one pod, and one pod is one "node" of the allocation in Slurm's terms. The
job-wide environment is exactly what Slurm 22.05 gives the batch script
(`gateway.compat.job_env.batch_environment`), computed for an allocation whose nodes are
the pods' host names (`caldera-42-0`, `caldera-42-1`, ...), so SLURM_JOB_NODELIST,
SLURM_TASKS_PER_NODE, SLURM_JOB_CPUS_PER_NODE and the rest describe the gang. Each rank
then gets its own SLURM_NODEID, SLURMD_NODENAME/HOSTNAME and the ids of the first task
placed on it (SLURM_PROCID/SLURM_LOCALID/SLURM_GTIDS): rank 0 runs the batch step as task 0,
as in Slurm; srun/mpirun started from it give the other tasks their own ids.

GPU indices are the pod's own: inside a pod the device plugin numbers its GPUs from 0
(CUDA_VISIBLE_DEVICES=0,1,...), so the gateway's node-level indices would be wrong there;
the job's steps share each pod's 0..k-1 as a local job's steps share a node's
(CALDERA_JOB_GPUS, containers/srun_claim.py). Pure functions, no IO.
"""

from __future__ import annotations

from collections.abc import Sequence

from containers.gpu_request import job_gpus_of
from containers.srun_claim import JOB_GPUS_VAR
from gateway.compat.job_env import batch_environment
from gateway.model.backend import Launch
from gateway.model.job import Job, RankPlacement
from k8s_bridge.names import GangNames
from k8s_bridge.request import GangRequest, RankShare

__all__ = [
    "HOSTFILE_PATH",
    "JOB_DIR",
    "RANK_KEYS",
    "SCRIPT_PATH",
    "gang_launch",
    "hostfile",
    "job_environment",
    "rank_environment",
]

JOB_DIR = "/caldera/job"
SCRIPT_PATH = f"{JOB_DIR}/script"
HOSTFILE_PATH = f"{JOB_DIR}/hostfile"

# What differs between ranks: set on each pod, never in the shared environment.
RANK_KEYS = (
    "SLURM_NODEID",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_GTIDS",
    "SLURM_CPUS_ON_NODE",
    "SLURMD_NODENAME",
    "SLURM_TOPOLOGY_ADDR",
    "HOSTNAME",
    "CALDERA_RANK",
)


def gang_launch(req: GangRequest, names: GangNames, shares: Sequence[RankShare]) -> Launch:
    """The job as Slurm's batch environment sees it: one node per rank, named after the
    rank's pod."""
    job = Job(
        job_id=req.job_id,
        spec=req.spec,
        user=req.user,
        uid=req.uid,
        group=req.group or req.user,
        gid=req.gid,
        submit_time=0.0,
        submit_host=req.submit_host,
        partition=req.partition,
        account=req.account,
        qos=req.qos,
        restart_count=req.attempt,
        array_job_id=req.array_job_id,
        array_task_id=req.array_task_id,
        cluster=req.cluster,
    )
    placement = tuple(
        RankPlacement(names.pod(rank), s.tasks, s.cpus, s.memory_mb)
        for rank, s in enumerate(shares)
    )
    return Launch(
        job=job,
        script=req.script,
        environment=req.environment,
        placement=placement,
        partition=req.partition,
        cluster=req.cluster,
    )


def hostfile(names: GangNames, shares: Sequence[RankShare]) -> str:
    """An mpirun hostfile: one line per rank, `host slots=<tasks>` (Open MPI and MPICH).
    One rank has no Service: its own host name (in the pod's /etc/hosts) is the host."""
    if len(shares) == 1:
        return f"{names.pod(0)} slots={shares[0].tasks}\n"
    return "".join(f"{names.host(rank)} slots={s.tasks}\n" for rank, s in enumerate(shares))


def job_environment(
    req: GangRequest,
    names: GangNames,
    shares: Sequence[RankShare],
    namespace: str,
    def_mem_per_cpu_mb: int = 0,
) -> dict[str, str]:
    """The user's environment and the job-wide SLURM_* values every rank shares."""
    env = batch_environment(
        gang_launch(req, names, shares),
        req.environment,
        node_name=names.pod(0),
        cluster_name=req.cluster,
        submit_dir=req.spec.workdir,
        def_mem_per_cpu_mb=def_mem_per_cpu_mb or None,
    )
    for key in RANK_KEYS:
        env.pop(key, None)
    gpus = shares[0].gpus if shares else 0
    if gpus:
        env["SLURM_GPUS_ON_NODE"] = str(gpus)
    if any(s.gpus for s in shares):  # what the job's sruns share between their steps
        held = {names.pod(rank): tuple(range(s.gpus)) for rank, s in enumerate(shares)}
        env[JOB_GPUS_VAR] = job_gpus_of(req.spec, held).render()
    env.update(
        {
            "CALDERA_HOSTFILE": HOSTFILE_PATH,
            "CALDERA_RANKS": str(len(shares)),
            # mpirun finds the gang without arguments (Open MPI 4 and 5, MPICH/Intel Hydra)
            "OMPI_MCA_orte_default_hostfile": HOSTFILE_PATH,
            "PRTE_MCA_prte_default_hostfile": HOSTFILE_PATH,
            "HYDRA_HOST_FILE": HOSTFILE_PATH,
        }
    )
    if len(shares) > 1:  # one rank has no Service
        env["CALDERA_SERVICE"] = f"{names.service}.{namespace}.svc"
    return env


def rank_environment(names: GangNames, shares: Sequence[RankShare], rank: int) -> dict[str, str]:
    """The variables that differ between ranks (set directly on each pod)."""
    first = sum(s.tasks for s in shares[:rank])
    tasks = shares[rank].tasks
    host = names.pod(rank)
    return {
        "SLURM_NODEID": str(rank),
        "SLURM_PROCID": str(first),
        "SLURM_LOCALID": "0",
        "SLURM_GTIDS": ",".join(str(t) for t in range(first, first + tasks)),
        "SLURM_CPUS_ON_NODE": str(shares[rank].cpus),
        "SLURMD_NODENAME": host,
        "SLURM_TOPOLOGY_ADDR": host,
        "HOSTNAME": host,
        "CALDERA_RANK": str(rank),
    }
