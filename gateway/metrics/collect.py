"""Counting the job table for /metrics: one pass over every job, then sums over the few
distinct label combinations.

A job is reduced to the tuple of what the families are labelled by (state, partition,
cluster, user, account, reason, hold) and `Counter` counts the tuples in C; with 100,000
jobs there are only as many distinct tuples as users x partitions x states, and every
family below is built from those. Resources are summed over the active jobs only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from operator import attrgetter

from gateway.metrics.expo import valid_text
from gateway.model.cluster import ClusterState
from gateway.model.job import Hold, Job
from gateway.model.state import JobState

__all__ = [
    "Alloc",
    "JobCounts",
    "JobKey",
    "allocations",
    "count_jobs",
    "count_keys",
    "gpu_memory_of",
    "job_alloc",
    "job_key",
]

_MIB = 2**20

# the enums by their names: an Enum's __hash__ is a Python call, a tuple of strings' is not
# (with 100,000 jobs that was 60 % of the page's time); a JobState's name is its long name
JobKey = tuple[str, str, str, str, str, str, Hold | None]
job_key: Callable[[Job], JobKey] = attrgetter(
    "state._name_", "partition", "cluster", "user", "account", "reason._value_", "hold"
)


@dataclass(slots=True)
class JobCounts:
    """The job table, counted; states by their long names (`PENDING`)."""

    total: int = 0
    by_state: dict[str, int] = field(default_factory=dict)
    held: int = 0
    # (cluster, partition) -> state -> jobs; a job queued in several partitions counts in
    # each, as it waits in each
    partitions: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)
    partition_held: dict[tuple[str, str], int] = field(default_factory=dict)
    users: dict[str, dict[str, int]] = field(default_factory=dict)
    user_held: dict[str, int] = field(default_factory=dict)
    accounts: dict[str, dict[str, int]] = field(default_factory=dict)
    account_held: dict[str, int] = field(default_factory=dict)
    # (cluster, partition as squeue prints it, user, account, state) -> jobs
    detail: dict[tuple[str, str, str, str, str], int] = field(default_factory=dict)
    # (cluster, partition as squeue prints it, reason) -> pending jobs
    pending: dict[tuple[str, str, str], int] = field(default_factory=dict)


def _add(table: dict[str, int], key: str, n: int) -> None:
    table[key] = table.get(key, 0) + n


_PENDING = JobState.PENDING.long


def count_jobs(jobs: Iterable[Job]) -> JobCounts:
    """Count every job once (an array's pending tasks are one record, one squeue line)."""
    return count_keys(Counter(map(job_key, jobs)))


def count_keys(raw: Mapping[JobKey, int]) -> JobCounts:
    """The families' counts from the number of jobs per `job_key` (JobTable keeps them as
    jobs change, so a page costs the distinct keys, not the jobs)."""
    out = JobCounts()
    clean: dict[str, str] = {}  # two names equal once made UTF-8 count as one series
    for (state, partition_, cluster_, user_, account_, reason, hold), n in raw.items():
        partition, cluster, user, account = (
            clean.get(t) or clean.setdefault(t, valid_text(t))
            for t in (partition_, cluster_, user_, account_)
        )
        out.total += n
        _add(out.by_state, state, n)
        held = n if hold is not None else 0
        out.held += held
        names = partition.split(",") if "," in partition else (partition,)
        for name in names:
            _add(out.partitions.setdefault((cluster, name), {}), state, n)
            if held:
                key = (cluster, name)
                out.partition_held[key] = out.partition_held.get(key, 0) + held
        _add(out.users.setdefault(user, {}), state, n)
        _add(out.accounts.setdefault(account, {}), state, n)
        if held:
            _add(out.user_held, user, held)
            _add(out.account_held, account, held)
        dkey = (cluster, partition, user, account, state)
        out.detail[dkey] = out.detail.get(dkey, 0) + n
        if state == _PENDING:
            pkey = (cluster, partition, reason)
            out.pending[pkey] = out.pending.get(pkey, 0) + n
    return out


@dataclass(slots=True)
class Alloc:
    """Resources held by jobs: cpus, memory (bytes), GPUs, GPU memory (bytes, where the
    GPUs' memory is known), nodes."""

    cpus: int = 0
    memory: int = 0
    gpus: int = 0
    gpu_memory: int = 0
    nodes: int = 0

    def add(self, other: Alloc) -> None:
        """Add another job's (or group's) resources."""
        self.cpus += other.cpus
        self.memory += other.memory
        self.gpus += other.gpus
        self.gpu_memory += other.gpu_memory
        self.nodes += other.nodes


def _spec_gpus(job: Job, nodes: int) -> int:
    spec = job.spec
    per_job = sum(g.count for g in spec.gpus if g.name == "gpu")
    per_node = sum(g.count for g in (*spec.gres, *spec.gpus_per_node) if g.name == "gpu")
    return per_job or per_node * nodes


def job_alloc(job: Job, gpu_memory: Mapping[tuple[str, int], int]) -> Alloc:
    """What one active job holds: from its placement when the gateway placed it, from its
    request when its cluster placed it (Slurm: the gateway knows the nodes, not the
    shares)."""
    if job.placement:
        gpus = 0
        gmem = 0
        cpus = 0
        mem = 0
        for p in job.placement:
            cpus += p.cpus
            mem += p.memory_mb
            gpus += len(p.gpus)
            for index in p.gpus:
                gmem += gpu_memory.get((p.node, index), 0)
        return Alloc(cpus, mem * _MIB, gpus, gmem, len(job.placement))
    nodes = len(job.nodes) or job.spec.nodes_min or 1
    spec = job.spec
    if spec.mem_per_node_mb:
        mem = spec.mem_per_node_mb * nodes
    elif spec.mem_per_cpu_mb:
        mem = spec.mem_per_cpu_mb * job.num_cpus
    else:
        mem = 0
    return Alloc(job.num_cpus, mem * _MIB, _spec_gpus(job, nodes), 0, nodes)


def gpu_memory_of(clusters: Mapping[str, ClusterState]) -> dict[tuple[str, int], int]:
    """(node, GPU index) -> that GPU's memory in bytes, for the GPUs whose memory is known."""
    return {
        (node.name, g.index): g.memory_total
        for cluster in clusters.values()
        for node in cluster.nodes
        for g in node.gpus
        if g.memory_total
    }


def allocations(
    active: Iterable[Job], clusters: Mapping[str, ClusterState]
) -> tuple[Alloc, dict[tuple[str, str], Alloc], dict[str, Alloc]]:
    """Resources held by the active jobs: in all, per (cluster, partition), per cluster."""
    gmem = gpu_memory_of(clusters)
    total = Alloc()
    parts: dict[tuple[str, str], Alloc] = {}
    per_cluster: dict[str, Alloc] = {}
    for job in active:
        a = job_alloc(job, gmem)
        total.add(a)
        key = (job.cluster, job.partition)
        group = parts.get(key)
        if group is None:
            group = parts[key] = Alloc()
        group.add(a)
        c = per_cluster.get(job.cluster)
        if c is None:
            c = per_cluster[job.cluster] = Alloc()
        c.add(a)
    return total, parts, per_cluster
