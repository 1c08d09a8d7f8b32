"""What translation needs to know about one job attempt, and what each rank asks for.

`GangRequest` is the input of the pure translation (a JobSpec plus the job id, user, script,
environment and what the gateway decided); `RankShare` is the resources one pod requests.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from gateway.model.backend import Launch
from gateway.model.job import RankPlacement
from gateway.model.jobspec import JobSpec
from gateway.model.values import INFINITE
from gateway.scheduler.request import NodeRequest, node_request

__all__ = [
    "RDMA_FEATURES",
    "GangRequest",
    "RankShare",
    "TranslationError",
    "limit_seconds",
    "rank_shares",
    "rdma_per_rank",
]


class TranslationError(ValueError):
    """The job cannot be expressed on this cluster (what and why)."""


_RDMA_GRES = frozenset({"ib", "rdma", "hca", "infiniband", "roce"})
RDMA_FEATURES = frozenset({"ib", "infiniband", "rdma", "roce"})


def _frozen(mapping: Mapping[str, str] | None = None) -> Mapping[str, str]:
    return MappingProxyType(dict(mapping or {}))


def limit_seconds(minutes: int | None, time_scale: float = 1.0) -> int | None:
    """A time limit in real seconds, None when unlimited; `time_scale` real seconds per
    job second (K8sOptions.time_scale). 0 is a limit already over (`scontrol update
    TimeLimit=0`; sbatch's `-t 0` is INFINITE), as the local runner reads it."""
    if minutes is None or minutes == INFINITE:
        return None
    return max(round(minutes * 60 * time_scale), 1 if minutes else 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class GangRequest:
    """One attempt of one job, as translation sees it."""

    job_id: int
    spec: JobSpec
    user: str
    uid: int
    gid: int
    script: str
    group: str = ""
    environment: Mapping[str, str] = field(default_factory=_frozen)
    partition: str = ""
    cluster: str = "k8s"
    account: str = ""
    qos: str = "normal"
    submit_host: str = "localhost"
    time_limit: int | None = None  # effective, minutes; None or INFINITE: none
    attempt: int = 0
    array_job_id: int = 0
    array_task_id: int | None = None
    placement: tuple[RankPlacement, ...] = ()

    @classmethod
    def from_launch(cls, launch: Launch) -> GangRequest:
        """The request of a gateway Launch (the job's restart count is the attempt)."""
        job = launch.job
        env = dict(launch.environment)
        env.update(launch.env_extra)
        limit = job.time_limit if job.time_limit else job.spec.time_limit
        return cls(
            job_id=job.job_id,
            spec=job.spec,
            user=job.user,
            uid=job.uid,
            gid=job.gid,
            group=job.group,
            script=launch.script,
            environment=_frozen(env),
            partition=launch.partition or job.partition,
            cluster=launch.cluster,
            account=job.account,
            qos=job.qos,
            submit_host=job.submit_host,
            time_limit=limit,
            attempt=job.restart_count,
            array_job_id=job.array_job_id,
            array_task_id=job.array_task_id,
            placement=tuple(launch.placement),
        )

    @property
    def node_request(self) -> NodeRequest:
        """The scheduler's per-node request of this job."""
        return node_request(self.spec)

    def deadline_s(self, time_scale: float = 1.0) -> int | None:
        """The time limit in seconds, None when unlimited (limit_seconds)."""
        return limit_seconds(self.time_limit, time_scale)


@dataclass(frozen=True, slots=True)
class RankShare:
    """What one rank (pod) requests."""

    tasks: int
    cpus: int
    memory_mb: int  # 0: no memory request
    gpus: int
    rdma: int


def _feature_tokens(expr: str | None) -> set[str]:
    if not expr:
        return set()
    return {t.lower() for t in re.split(r"[^A-Za-z0-9_.-]+", expr) if t}


def rdma_per_rank(spec: JobSpec, gpus: int) -> int:
    """RDMA devices per rank: `--gres=ib:N` (also rdma/hca/roce) asks N; `-C ib` (or
    infiniband/rdma/roce) asks one per GPU (at least one): GPUDirect pairs a NIC with each."""
    counted = sum(g.count for g in spec.gres if g.name.lower() in _RDMA_GRES)
    if counted:
        return counted
    if _feature_tokens(spec.constraint) & RDMA_FEATURES:
        return max(gpus, 1)
    return 0


def rank_shares(req: GangRequest, def_mem_per_cpu_mb: int = 0) -> tuple[RankShare, ...]:
    """Every rank's request: the gateway's placement when it gave one per rank, else the
    job's per-node request (as Slurm derives it)."""
    nreq = req.node_request
    gpus = nreq.gpus
    if nreq.gpus_total:  # -N N --gpus=G placed by another scheduler: G / N a rank
        gpus = -(-nreq.gpus_total // nreq.nodes)
    rdma = rdma_per_rank(req.spec, gpus)
    several = nreq.spread or nreq.multi_gpu is not None
    if req.placement and (several or len(req.placement) == nreq.nodes):
        return tuple(  # (GPUs that vary by rank: as many as the rank was given)
            RankShare(
                p.tasks,
                max(p.cpus, 1),
                max(p.memory_mb, 0),
                len(p.gpus) if nreq.gpus_vary else gpus,
                rdma,
            )
            for p in req.placement
        )
    shares: list[RankShare] = []
    # a node range placed by another scheduler: its MIN ranks (a gang starts whole or not)
    per_node = nreq.tasks_per_node[: nreq.nodes] if nreq.fixed_per_node else nreq.tasks_per_node
    for tasks in per_node:
        # a spread request not placed by the gateway (Volcano places) is one rank of all
        # its tasks: `cpus` is then one task's
        cpus = nreq.cpus * tasks if nreq.spread else nreq.cpus
        # --mem=0 asks for the whole node: known only once placed, so no request here
        memory = 0 if nreq.memory_mb is None else nreq.memory_for(cpus, def_mem_per_cpu_mb, 0)
        shares.append(RankShare(tasks, max(cpus, 1), max(memory, 0), gpus, rdma))
    return tuple(shares)
