"""From Caldera's Job records to what the policy formulas take: a job's association, its
priority inputs, and the usage its runs charge (pure; the service calls these).

Usage is charged as `_apply_new_usage` charges it: for each calculation period, the
seconds run in it times `decay_factor ** seconds` times the billable TRES (allocated CPUs,
Slurm's default without TRESBillingWeights) times the job QOS's UsageFactor, to the
user's association (the tree sums it upward); existing usage decays by
`decay_factor ** (now - last)` first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gateway.model.cluster import ClusterState
from gateway.model.job import Job
from gateway.model.state import Reason
from gateway.model.values import INFINITE
from gateway.policy.fairshare import decay_factor, decayed
from gateway.policy.model import Assoc, PolicyState
from gateway.policy.priority import JobInputs, SystemInputs

__all__ = [
    "accrue_usage",
    "assoc_index",
    "assoc_of",
    "job_cpus",
    "job_inputs",
    "job_size",
    "job_tres",
    "partition_tres",
    "system_inputs",
]

_NOT_ACCRUING = frozenset({Reason.DEPENDENCY, Reason.BEGIN_TIME, Reason.JOB_HELD_USER})


def assoc_index(state: PolicyState) -> dict[tuple[str, str, str], Assoc]:
    """User associations by (user, account, partition)."""
    return {(a.user, a.account, a.partition): a for a in state.assocs if a.user}


def assoc_of(
    job: Job, state: PolicyState, index: Mapping[tuple[str, str, str], Assoc]
) -> Assoc | None:
    """The job's association: its account (else the user's default) and partition (else
    the association without one); None when the user has none there."""
    account = job.account or (
        state.users[job.user].default_account if job.user in state.users else ""
    )
    part = job.partition.split(",")[0] if job.partition else ""
    return index.get((job.user, account, part)) or index.get((job.user, account, ""))


def job_size(job: Job) -> tuple[int, int]:
    """(min nodes, CPUs) as slurmctld's job size factor sees them: the nodes asked for, and
    the CPUs held (running) or the minimum asked for (ntasks x cpus-per-task, at least
    `--mincpus` per node)."""
    spec = job.spec
    nodes = spec.nodes_min or 1
    if job.placement:
        return max(nodes, len(job.placement)), sum(p.cpus for p in job.placement)
    if job.num_cpus:
        return nodes, job.num_cpus
    tasks = spec.ntasks or nodes * (spec.ntasks_per_node or 1)
    cpus = max(tasks, 1) * (spec.cpus_per_task or 1)
    if spec.mincpus:
        cpus = max(cpus, spec.mincpus * nodes)
    return nodes, cpus


def job_cpus(job: Job) -> int:
    """CPUs the job holds (running) or asks for (pending)."""
    return job_size(job)[1]


def system_inputs(
    clusters: Mapping[str, ClusterState], max_qos: int, max_assoc: int
) -> SystemInputs:
    """Node and CPU totals of every cluster Caldera places on."""
    nodes = [n for c in clusters.values() for n in c.nodes]
    factors = [p.priority_job_factor for c in clusters.values() for p in c.partitions]
    return SystemInputs(
        node_count=len(nodes),
        cluster_cpus=sum(n.cpus for n in nodes),
        max_partition_priority=max(factors, default=0),
        max_qos_priority=max_qos,
        max_assoc_priority=max_assoc,
    )


def partition_factors(clusters: Mapping[str, ClusterState]) -> dict[str, int]:
    """Each partition's PriorityJobFactor by name."""
    return {p.name: p.priority_job_factor for c in clusters.values() for p in c.partitions}


def partition_tres(clusters: Mapping[str, ClusterState]) -> dict[str, dict[str, float]]:
    """Each partition's TRES totals (cpu, mem in MiB, node, gres/gpu): what a job's TRES
    factor is normalised against (`_get_tres_factors`: the job's count over its
    partition's)."""
    out: dict[str, dict[str, float]] = {}
    for cluster in clusters.values():
        for node in cluster.nodes:
            for part in node.partitions:
                t = out.setdefault(part, {"cpu": 0.0, "mem": 0.0, "node": 0.0, "gres/gpu": 0.0})
                t["cpu"] += node.cpus
                t["mem"] += node.memory_mb
                t["node"] += 1
                t["gres/gpu"] += len(node.gpus)
    return out


def job_tres(
    job: Job, totals: Mapping[str, Mapping[str, float]], weights: Mapping[str, float]
) -> dict[str, float]:
    """The job's TRES factors (count / partition total) for the weighted TRES."""
    if not weights:
        return {}
    part = totals.get(job.partition.split(",", 1)[0] if job.partition else "", {})
    nodes, cpus = job_size(job)
    spec = job.spec
    mem = 0
    if spec.mem_per_node_mb:
        mem = spec.mem_per_node_mb * nodes
    elif spec.mem_per_cpu_mb:
        mem = spec.mem_per_cpu_mb * cpus
    gpus = sum(i.count for i in spec.gpus) + nodes * sum(i.count for i in spec.gpus_per_node)
    counts = {"cpu": cpus, "mem": mem, "node": nodes, "gres/gpu": gpus}
    return {k: counts[k] / part[k] for k in weights if k in counts and counts[k] and part.get(k)}


def job_inputs(
    job: Job,
    fs: float,
    qos_priority: int,
    assoc_priority: int,
    tres: Mapping[str, float] | None = None,
) -> JobInputs:
    """The job's factors' inputs; a job waiting on a dependency, a begin time or a hold does
    not accrue age (slurmctld sets its accrue time only once it is eligible)."""
    waiting = job.reason in _NOT_ACCRUING or job.hold is not None
    accrue = None if waiting else (job.eligible_time or job.submit_time)
    nodes, cpus = job_size(job)
    limit = job.time_limit if job.time_limit not in (0, INFINITE) else None
    return JobInputs(
        job_id=job.job_id,
        accrue_time=accrue,
        min_nodes=nodes,
        cpus=cpus,
        time_limit_min=limit,
        partition_max_time_min=limit or 1,
        fs_factor=fs,
        qos_priority=qos_priority,
        assoc_priority=assoc_priority,
        nice=job.spec.nice or 0,
        tres=dict(tres or {}),
    )


def accrue_usage(
    usage: Mapping[int, float],
    jobs: Iterable[Job],
    state: PolicyState,
    last: float | None,
    now: float,
    half_life_s: int,
) -> dict[int, float]:
    """Usage after decaying to `now` and charging what jobs ran since `last` (the first
    call only starts the clock)."""
    if last is None or now <= last:
        return dict(usage)
    out = {k: decayed(v, now - last, half_life_s) for k, v in usage.items()}
    factor = decay_factor(half_life_s)
    index = assoc_index(state)
    for job in jobs:
        if job.start_time is None:
            continue
        start = max(job.start_time, last)
        end = min(now, job.end_time) if job.end_time is not None else now
        delta = end - start
        if delta <= 0:
            continue
        assoc = assoc_of(job, state, index)
        if assoc is None:
            continue
        qos = state.qos.get(job.qos)
        uf = qos.usage_factor if qos is not None else 1.0
        charge = delta * (factor**delta) * job_cpus(job) * uf
        out[assoc.id] = out.get(assoc.id, 0.0) + charge
    return out
