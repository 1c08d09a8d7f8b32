"""The local site: its nodes and partitions as a ClusterState, and the submit-time checks
and answers slurmctld makes against a site (partition names, whether any node could ever
fit a job, GresTypes, `sbatch --test-only`).
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.compat.duration import time_str_to_mins
from gateway.compat.slurm_errors import SlurmErrno
from gateway.compat.verify import SubmitError
from gateway.control.config import GatewayConfig
from gateway.model.cluster import ClusterState, Gpu, Node, Partition
from gateway.model.job import Job
from gateway.model.jobspec import JobSpec
from gateway.model.values import NO_VAL
from gateway.scheduler.cycle import Decision
from gateway.scheduler.part_limits import config_detail, fitting_nodes
from gateway.scheduler.request import constraint_satisfied, node_request
from gateway.scheduler.selection import default_target

__all__ = [
    "check_request",
    "gres_types_of",
    "local_cluster",
    "pick_partitions",
    "test_only_message",
]


def _minutes(text: str | None) -> int | None:
    if text is None:
        return None
    value = time_str_to_mins(text)
    if value == NO_VAL:
        raise ValueError(f"invalid time {text!r} in the partition configuration")
    return value


def local_cluster(config: GatewayConfig) -> ClusterState:
    """The local backend's nodes and partitions from the configuration."""
    names = tuple(n.name for n in config.nodes)
    partitions = tuple(
        Partition(
            name=p.name,
            nodes=p.nodes or names,
            default=p.default,
            max_time=_minutes(p.max_time) or 0,
            default_time=_minutes(p.default_time),
        )
        for p in config.partitions
    )
    if partitions and not any(p.default for p in partitions):
        first = partitions[0]
        partitions = (
            Partition(
                name=first.name,
                nodes=first.nodes,
                default=True,
                max_time=first.max_time,
                default_time=first.default_time,
            ),
            *partitions[1:],
        )
    nodes = tuple(
        Node(
            name=n.name,
            cpus=n.cpus,
            memory_mb=n.memory_mb,
            partitions=tuple(p.name for p in partitions if n.name in p.nodes),
            features=n.features,
            gres=(("gpu", None, n.gpus),) if n.gpus else (),
            gpus=tuple(Gpu(index=i) for i in range(n.gpus)),
        )
        for n in config.nodes
    )
    return ClusterState(name=config.cluster_name, nodes=nodes, partitions=partitions)


def pick_partitions(spec: JobSpec, clusters: dict[str, ClusterState]) -> tuple[str, ...]:
    """The partitions a job may use; raises Slurm's "Invalid partition name" otherwise."""
    known = {p.name for c in clusters.values() for p in c.partitions}
    if spec.partitions:
        for name in spec.partitions:
            if name not in known:  # slurmctld's err_msg names the first unknown one
                raise SubmitError(
                    SlurmErrno.INVALID_PARTITION_NAME, f"invalid partition specified: {name}"
                )
        return spec.partitions
    home = default_target(clusters)
    if home is None:
        raise SubmitError(SlurmErrno.DEFAULT_PARTITION_NOT_SET)
    return (home.partition,)


def check_request(
    spec: JobSpec,
    partitions: tuple[str, ...],
    clusters: dict[str, ClusterState],
    def_mem_per_cpu_mb: int,
    *,
    fit: bool = True,
) -> None:
    """Reject a request no node of its partitions could ever hold, as slurmctld does;
    without `fit` (a held job, or one beyond its partition's size) only names are checked."""
    from gateway.compat.hostlist import expand

    nodelist = tuple(expand(spec.nodelist)) if spec.nodelist else ()
    req = node_request(spec, nodelist)
    seen: list[Node] = []
    for cluster in clusters.values():
        for pname in partitions:
            part = cluster.partition(pname)
            if part is None:
                continue
            members = [n for n in cluster.nodes if n.name in part.nodes]
            seen.extend(members)
            if nodelist and any(name not in part.nodes for name in nodelist):
                continue
            if fit and fitting_nodes(req, members, def_mem_per_cpu_mb) >= req.nodes:
                return
            if spec.constraint and not any(
                constraint_satisfied(spec.constraint, n.features) for n in members
            ):
                raise SubmitError(SlurmErrno.INVALID_FEATURE)
    if nodelist:
        known = {n.name for c in clusters.values() for n in c.nodes}
        if any(name not in known for name in nodelist):
            raise SubmitError(SlurmErrno.INVALID_NODE_NAME)
    if fit:
        raise SubmitError(SlurmErrno.REQUESTED_NODE_CONFIG_UNAVAILABLE, config_detail(spec, seen))


def gres_types_of(clusters: Iterable[ClusterState]) -> tuple[str, ...]:
    """Slurm's GresTypes: the generic resources some node of these clusters has."""
    clusters = tuple(clusters)
    names = {name for c in clusters for n in c.nodes for name, _, _ in n.gres}
    names |= {"gpu"} if any(n.gpus for c in clusters for n in c.nodes) else set()
    return tuple(sorted(names))


def test_only_message(job: Job, first: Decision | None, now: float) -> str:
    """`sbatch --test-only`'s answer for the cycle's decision on the job (None: no start)."""
    from gateway.compat.job_fields import slurm_time

    nodes = ",".join(p.node for p in first.placement) if first else ""
    cpus = sum(p.cpus for p in first.placement) if first else 0
    partition = first.partition if first else job.partition.split(",")[0]
    return (
        f"sbatch: Job {job.job_id} to start at {slurm_time(int(now))} using {cpus} "
        f"processors on nodes {nodes} in partition {partition}\n"
    )
