"""Partition limits and "could this ever run here" as slurmctld judges them.

With EnforcePartLimits=NO (Slurm's default) a job beyond its partition's size is accepted
and waits (PartitionNodeLimit, PartitionConfig); a job no set of the partition's nodes
could ever hold is refused at submission, unless it is held: then it is accepted, and once
released it waits with BadConstraints. Used at submission and by the scheduler's gate.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.model.cluster import ClusterState, Node, Partition
from gateway.model.jobspec import JobSpec
from gateway.model.state import Reason
from gateway.scheduler.request import NodeRequest, constraint_satisfied, node_request, task_capacity

__all__ = ["config_detail", "could_hold", "fitting_nodes", "never_fits", "partition_limit"]


def _members(cluster: ClusterState, part: Partition) -> list[Node]:
    names = set(part.nodes)
    return [n for n in cluster.nodes if n.name in names]


# (cluster id, partition) -> (the cluster, its partition's cpus): the scheduler's gate asks
# for every pending job, and summing 16,384 nodes each time dominated a 100,000-job cycle;
# the cluster is held so that its id cannot be reused while the entry lives
_CPUS: dict[tuple[int, str], tuple[ClusterState, int]] = {}


def _partition_cpus(cluster: ClusterState, part: Partition) -> int:
    key = (id(cluster), part.name)
    hit = _CPUS.get(key)
    if hit is not None and hit[0] is cluster:
        return hit[1]
    if len(_CPUS) >= 256:
        _CPUS.clear()
    total = sum(n.cpus for n in _members(cluster, part))
    _CPUS[key] = (cluster, total)
    return total


def partition_limit(spec: JobSpec, cluster: ClusterState, part: Partition) -> Reason | None:
    """PartitionNodeLimit when more nodes are asked than the partition has (or allows),
    PartitionConfig when more CPUs are asked than all its nodes have; None otherwise."""
    size = len(part.nodes)
    if part.max_nodes:
        size = min(size, part.max_nodes)
    if spec.nodes_min is not None and spec.nodes_min > size:
        return Reason.PARTITION_NODE_LIMIT
    if spec.min_cpus > _partition_cpus(cluster, part):
        return Reason.PARTITION_CONFIG
    return None


def fitting_nodes(req: NodeRequest, members: Sequence[Node], def_mem_per_cpu_mb: int) -> int:
    """How many of `members` could each hold one node's share of the request when idle."""
    return len(_fitting(req, members, def_mem_per_cpu_mb))


def could_hold(req: NodeRequest, members: Sequence[Node], def_mem_per_cpu_mb: int) -> bool:
    """Whether `members`, idle, could hold the request: on nodes of its own shape, or a
    job-wide `--gpus` over several (`multi_gpu`)."""
    if _could_hold(req, members, def_mem_per_cpu_mb) and _gpus_held(
        req, members, def_mem_per_cpu_mb
    ):
        return True
    alt = req.multi_gpu
    if alt is None or not _could_hold(alt, members, def_mem_per_cpu_mb):
        return False
    return _gpus_held(alt, members, def_mem_per_cpu_mb)


def _gpus_held(req: NodeRequest, members: Sequence[Node], def_mem_per_cpu_mb: int) -> bool:
    """A job-wide `--gpus` (`gpus_total`): its nodes, at most `max_nodes`, have them all."""
    if not req.gpus_total:
        return True
    fit = _fitting(req, members, def_mem_per_cpu_mb)
    counts = sorted((n.gpu_count(req.gpu_type) for n in fit), reverse=True)
    return sum(counts[: req.max_nodes]) >= req.gpus_total


def _could_hold(req: NodeRequest, members: Sequence[Node], def_mem_per_cpu_mb: int) -> bool:
    """Whether `members`, idle, could hold the request: enough nodes for its share and, for
    a node range or tasks spread over nodes, its tasks on its MAX biggest nodes (`-N1-2 -n5`
    on 2-CPU nodes: never; `-n7 -x node01` on four: never)."""
    fit = _fitting(req, members, def_mem_per_cpu_mb)
    if len(fit) < req.nodes:
        return False
    if not (req.wide or req.spread):
        return True
    caps = sorted(
        task_capacity(req, n.cpus, n.memory_mb, def_mem_per_cpu_mb, n.gpu_count(req.gpu_type))
        for n in fit
    )
    if req.fixed_per_node:
        return sum(c >= req.fixed_per_node for c in caps) >= req.nodes
    return sum(caps[-req.max_nodes :]) >= req.tasks


def _fitting(req: NodeRequest, members: Sequence[Node], def_mem_per_cpu_mb: int) -> list[Node]:
    out: list[Node] = []
    for n in members:
        if n.cpus < req.cpus or n.gpu_count(req.gpu_type) < req.gpus:
            continue
        if n.tmp_disk_mb < req.tmp_mb:
            continue
        if req.memory_mb is not None and (
            req.memory_for(req.cpus, def_mem_per_cpu_mb, n.memory_mb) > n.memory_mb
        ):
            continue
        if constraint_satisfied(req.constraint, n.features):
            out.append(n)
    return out


def never_fits(spec: JobSpec, clusters: Sequence[ClusterState], partition: str, mem: int) -> bool:
    """True when no partition named in `partition` (comma-separated) could ever hold the
    job, even with every node idle (slurmctld's BadConstraints)."""
    from gateway.compat.hostlist import expand

    nodelist = tuple(expand(spec.nodelist)) if spec.nodelist else ()
    req = node_request(spec, nodelist)
    for cluster in clusters:
        for pname in partition.split(","):
            part = cluster.partition(pname)
            if part is None or any(name not in part.nodes for name in nodelist):
                continue
            if could_hold(req, _members(cluster, part), mem):
                return False
    return True


def config_detail(spec: JobSpec, members: Sequence[Node]) -> str | None:
    """The line slurmctld adds to "Requested node configuration is not available" when no
    node has the CPUs (or, next, the memory, then the TmpDisk) a job asks of each node."""
    cpt = spec.cpus_per_task or 1
    per_node = max(cpt * (spec.ntasks_per_node or 1), spec.mincpus or 0)
    if not any(n.cpus >= per_node for n in members):
        return "CPU count per node can not be satisfied"
    mem = spec.mem_per_node_mb
    if mem and not any(n.memory_mb >= mem for n in members):
        return "Memory specification can not be satisfied"
    if spec.tmp_mb and not any(n.tmp_disk_mb >= spec.tmp_mb for n in members):
        return "Temporary disk specification can not be satisfied"
    return None
