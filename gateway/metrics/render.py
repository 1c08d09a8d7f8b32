"""The /metrics page: job, partition, user, account, cluster, node, scheduler, submission,
API and agent families, from the job table and the clusters as they are now plus what the
gateway observed (observe.py).

Names: Slurm's openmetrics plugin's (slurmctld's /metrics/jobs, /metrics/partitions,
/metrics/nodes, /metrics/jobs-users-accts, /metrics/scheduler: `slurm_jobs_pending`,
`slurm_partition_jobs_running`, `slurm_user_jobs_pending{username=}`, ...) where a family
means what Slurm's means, with a `cluster` label added where Caldera has several clusters;
Kueue's (`admission_attempt_duration_seconds`, `admission_wait_time_seconds`,
`pending_workloads` as `pending_jobs`) with a `caldera_` prefix where Slurm has none; and
`caldera_` for what is Caldera's own. Slurm's scheduler gauges are in microseconds, as
sdiag prints them; every `caldera_` duration is in seconds.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gateway.metrics.collect import Alloc, JobCounts, allocations
from gateway.metrics.expo import Page
from gateway.metrics.observe import GatewayMetrics
from gateway.metrics.render_nodes import NODE_STATES, Capacity, cluster_families, node_families
from gateway.metrics.render_observed import observed_families
from gateway.model.cluster import ClusterState, NodeState
from gateway.model.job import Job
from gateway.model.state import JobState
from gateway.scheduler.snapshot import NodeFree

__all__ = ["SLURM_STATE_NAMES", "MetricsInput", "render"]

_MIB = 2**20

# JobState -> the suffix of Slurm's per-state job families (openmetrics.c)
SLURM_STATE_NAMES: dict[JobState, tuple[str, str]] = {
    JobState.BOOT_FAIL: ("bootfail", "BootFail"),
    JobState.CANCELLED: ("cancelled", "Cancelled"),
    JobState.COMPLETED: ("completed", "Completed"),
    JobState.COMPLETING: ("completing", "Completing"),
    JobState.CONFIGURING: ("configuring", "Configuring"),
    JobState.DEADLINE: ("deadline", "Deadline"),
    JobState.FAILED: ("failed", "Failed"),
    JobState.NODE_FAIL: ("node_failed", "Node Failed"),
    JobState.OUT_OF_MEMORY: ("outofmemory", "Out of Memory"),
    JobState.PENDING: ("pending", "Pending"),
    JobState.PREEMPTED: ("preempted", "Preempted"),
    JobState.REQUEUED: ("requeued", "Requeued"),
    JobState.RESIZING: ("resizing", "Resizing"),
    JobState.REVOKED: ("revoked", "Revoked"),
    JobState.RUNNING: ("running", "Running"),
    JobState.SIGNALING: ("signaling", "Signaling"),
    JobState.STAGE_OUT: ("stageout", "StageOut"),
    JobState.SUSPENDED: ("suspended", "Suspended"),
    JobState.TIMEOUT: ("timeout", "Timeout"),
}


@dataclass(frozen=True, slots=True)
class MetricsInput:
    """Everything the page is made from (the gateway's, or a test's)."""

    counts: JobCounts  # every job squeue shows, counted (collect.py)
    active: Iterable[Job]  # the jobs holding resources
    clusters: Mapping[str, ClusterState]  # drained nodes shown drained
    free: Mapping[str, NodeFree]  # node -> what the gateway's own placements leave free
    node_states: Mapping[str, NodeState]  # as sinfo shows them
    observed: GatewayMetrics


def _per_state(
    page: Page,
    prefix: str,
    label: str,
    what: str,
    rows: Mapping[str, Mapping[str, int]],
    held: Mapping[str, int],
) -> None:
    """Slurm's per-state families for users or accounts (one label)."""
    keys = sorted(rows)
    page.gauge(
        f"{prefix}_jobs",
        f"Total number of jobs of the {what}",
        (label,),
        (((k,), sum(rows[k].values())) for k in keys),
    )
    for state, (suffix, text) in SLURM_STATE_NAMES.items():
        # pending and running for every user (or account); the rest only where not 0:
        # 500 users x 19 states of zeros would be half the page
        every = state in (JobState.PENDING, JobState.RUNNING)
        page.gauge(
            f"{prefix}_jobs_{suffix}",
            f"Number of jobs in {text} state of the {what}",
            (label,),
            (((k,), n) for k in keys if (n := rows[k].get(state.long, 0)) or every),
        )
    page.gauge(
        f"{prefix}_jobs_hold",
        f"Number of held jobs of the {what}",
        (label,),
        (((k,), held.get(k, 0)) for k in keys),
    )


def _jobs(page: Page, counts: JobCounts, total: Alloc) -> None:
    page.gauge("slurm_jobs", "Total number of jobs", (), [((), counts.total)])
    for state, (suffix, text) in SLURM_STATE_NAMES.items():
        value = counts.by_state.get(state.long, 0)
        page.gauge(f"slurm_jobs_{suffix}", f"Number of jobs in {text} state", (), [((), value)])
    page.gauge("slurm_jobs_hold", "Number of jobs in Hold state", (), [((), counts.held)])
    page.gauge(
        "slurm_jobs_cpus_alloc", "Total number of Cpus allocated by jobs", (), [((), total.cpus)]
    )
    page.gauge(
        "slurm_jobs_memory_alloc", "Total memory bytes allocated by jobs", (), [((), total.memory)]
    )
    page.gauge(
        "slurm_jobs_gpus_alloc", "Total number of GPUs allocated by jobs", (), [((), total.gpus)]
    )
    page.gauge(
        "slurm_jobs_nodes_alloc", "Total number of nodes allocated by jobs", (), [((), total.nodes)]
    )
    page.gauge(
        "caldera_jobs",
        "Jobs by cluster, partition (as squeue prints it), user, account and state",
        ("cluster", "partition", "user", "account", "state"),
        sorted(counts.detail.items()),
    )
    page.gauge(
        "caldera_pending_jobs",
        "Pending jobs by cluster, partition and reason (squeue's %R)",
        ("cluster", "partition", "reason"),
        sorted(counts.pending.items()),
    )


def _partitions(
    page: Page, inp: MetricsInput, counts: JobCounts, alloc_parts: Mapping[tuple[str, str], Alloc]
) -> None:
    caps: dict[tuple[str, str], Capacity] = {}
    node_counts: dict[tuple[str, str], dict[NodeState, int]] = {}
    for cname, cluster in inp.clusters.items():
        by_name = {n.name: n for n in cluster.nodes}
        for part in cluster.partitions:
            cap = caps[(cname, part.name)] = Capacity()
            states = node_counts[(cname, part.name)] = {}
            for node_name in part.nodes:
                node = by_name.get(node_name)
                if node is None:
                    continue
                free = inp.free.get(node_name)
                cap.nodes += 1
                cap.cpus += node.cpus
                cap.memory += node.memory_mb * _MIB
                cap.gpus += node.gpu_count()
                cap.gpu_memory += sum(g.memory_total for g in node.gpus)
                if free is not None:
                    cap.cpus_alloc += node.cpus - free.cpus
                    cap.memory_alloc += (node.memory_mb - free.memory_mb) * _MIB
                nstate = inp.node_states.get(node_name, node.state)
                states[nstate] = states.get(nstate, 0) + 1
    keys = sorted(set(caps) | set(counts.partitions) | set(alloc_parts))
    labels = ("cluster", "partition")
    page.gauge("slurm_partitions", "Total number of partitions", (), [((), len(keys))])
    rows = counts.partitions
    page.gauge(
        "slurm_partition_jobs",
        "Number of jobs in this partition",
        labels,
        ((k, sum(rows.get(k, {}).values())) for k in keys),
    )
    for state, (suffix, text) in SLURM_STATE_NAMES.items():
        page.gauge(
            f"slurm_partition_jobs_{suffix}",
            f"Number of jobs in {text} state",
            labels,
            ((k, rows.get(k, {}).get(state.long, 0)) for k in keys),
        )
    page.gauge(
        "slurm_partition_jobs_hold",
        "Number of jobs in Hold state",
        labels,
        ((k, counts.partition_held.get(k, 0)) for k in keys),
    )
    none = Alloc()
    for name, doc, attr in (
        ("slurm_partition_jobs_cpus_alloc", "Total number of Cpus allocated by jobs", "cpus"),
        ("slurm_partition_jobs_memory_alloc", "Total memory bytes allocated by jobs", "memory"),
        ("slurm_partition_jobs_gpus_alloc", "Total number of GPUs allocated by jobs", "gpus"),
        (
            "caldera_partition_jobs_gpu_memory_alloc_bytes",
            "Memory of the GPUs allocated by jobs, where the GPUs' memory is known",
            "gpu_memory",
        ),
    ):
        page.gauge(name, doc, labels, ((k, getattr(alloc_parts.get(k, none), attr)) for k in keys))
    empty = Capacity()
    for name, doc, attr in (
        ("slurm_partition_cpus", "Partition total cpus", "cpus"),
        ("slurm_partition_gpus", "Partition total gpus", "gpus"),
        ("slurm_partition_nodes", "Partition total nodes", "nodes"),
        ("slurm_partition_nodes_mem_tot", "Total amount of memory of all nodes", "memory"),
        ("slurm_partition_nodes_cpus_alloc", "Number of allocated cpus", "cpus_alloc"),
        (
            "slurm_partition_nodes_mem_alloc",
            "Amount of allocated memory of all nodes",
            "memory_alloc",
        ),
        (
            "caldera_partition_gpu_memory_bytes",
            "Memory of the partition's GPUs, where known",
            "gpu_memory",
        ),
    ):
        page.gauge(name, doc, labels, ((k, getattr(caps.get(k, empty), attr)) for k in keys))
    page.gauge(
        "slurm_partition_nodes_cpus_idle",
        "Number of idle CPUs on all nodes",
        labels,
        ((k, (c := caps.get(k, empty)).cpus - c.cpus_alloc) for k in keys),
    )
    for suffix, text, members in NODE_STATES:
        page.gauge(
            f"slurm_partition_nodes_{suffix}",
            f"Nodes in {text} state",
            labels,
            ((k, sum(node_counts.get(k, {}).get(s, 0) for s in members)) for k in keys),
        )


def render(inp: MetricsInput, now_mono: float | None = None) -> str:
    """The page. `now_mono`: the agents' clock now (time.monotonic by default)."""
    started = time.perf_counter()
    page = Page()
    counts = inp.counts
    total, parts, per_cluster = allocations(inp.active, inp.clusters)
    _jobs(page, counts, total)
    _partitions(page, inp, counts, parts)
    _per_state(page, "slurm_user", "username", "user", counts.users, counts.user_held)
    _per_state(page, "slurm_account", "account", "account", counts.accounts, counts.account_held)
    cluster_families(page, inp, per_cluster)
    node_families(page, inp)
    observed_families(page, inp.observed, time.monotonic() if now_mono is None else now_mono)
    text = page.text()
    inp.observed.render_s = time.perf_counter() - started
    return text
