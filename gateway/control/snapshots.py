"""What a scheduling cycle sees: the gateway's live jobs and clusters as one Snapshot.

Built from JobTable's indexes, so its cost follows the pending and running jobs, not every
job the gateway remembers. The only IO is `lookup`, for dependency targets that have
already left memory (finished beyond MinJobAge).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from gateway.backend import Capabilities
from gateway.control.jobtable import JobTable
from gateway.model.cluster import ClusterState
from gateway.model.job import Job
from gateway.scheduler.snapshot import DepTarget, NodeFree, Snapshot

__all__ = ["build_snapshot", "dep_target", "free_resources"]


def free_resources(
    jobs: JobTable, clusters: Mapping[str, ClusterState], self_placing: frozenset[str]
) -> dict[str, NodeFree]:
    """What is free on every node now (cpus, memory, GPU indices). Clusters that place
    their own jobs (`self_placing`) keep their own books."""
    free: dict[str, NodeFree] = {}
    for cluster in clusters.values():
        for node in cluster.nodes:
            # GPUs a node only declares (Slurm's Gres=gpu:4, no device seen) count by index
            gpus = frozenset(g.index for g in node.gpus) or frozenset(range(node.gpu_count()))
            free[node.name] = NodeFree(node, node.cpus, node.memory_mb, gpus)
    for job in jobs.active.values():
        if job.cluster in self_placing:
            continue
        exclusive = job.spec.sharing is not None and job.spec.sharing.value == "exclusive"
        for p in job.placement:
            cur = free.get(p.node)
            if cur is None:
                continue
            free[p.node] = replace(
                cur,
                cpus=cur.cpus - p.cpus,
                memory_mb=cur.memory_mb - p.memory_mb,
                gpus=cur.gpus - set(p.gpus),
                exclusive_jobs=cur.exclusive_jobs + int(exclusive),
                jobs=cur.jobs + 1,
            )
    return free


def _dep_targets(
    jobs: JobTable, pending: Iterable[Job], lookup: Callable[[int], list[Job]]
) -> dict[int, tuple[DepTarget, ...]]:
    wanted = {
        item.job_id
        for job in pending
        if job.spec.dependency
        for item in job.spec.dependency.items
        if item.job_id
    }
    out: dict[int, tuple[DepTarget, ...]] = {}
    for target_id in wanted:
        members = jobs.job_or_array(target_id) or lookup(target_id)
        out[target_id] = tuple(dep_target(j) for j in members)
    return out


def _native_deps(
    jobs: JobTable,
    pending: Iterable[Job],
    clusters: Mapping[str, ClusterState],
    caps: Mapping[str, Capabilities],
) -> frozenset[int]:
    """Jobs whose only possible cluster enforces their dependencies itself, so that they
    are handed over now (Slurm holds them with Reason=Dependency)."""
    out: set[int] = set()
    for job in pending:
        dep = job.spec.dependency
        if dep is None or not dep.items:
            continue
        names = set(job.partition.split(","))
        homes = [
            name
            for name, cluster in clusters.items()
            if any(p.name in names for p in cluster.partitions)
        ]
        if len(homes) != 1:
            continue
        home = caps.get(homes[0])
        native = home.native_dependencies if home is not None else None
        if native is None:
            continue
        ids = {i.job_id for i in dep.items if i.job_id}
        targets = list({j.job_id: j for i in ids for j in jobs.job_or_array(i)}.values())
        if native.native_dependency_ok(job, targets):
            out.add(job.job_id)
    return frozenset(out)


def build_snapshot(
    jobs: JobTable,
    clusters: Mapping[str, ClusterState],
    caps: Mapping[str, Capabilities],
    self_placing: frozenset[str],
    now: float,
    def_mem_per_cpu_mb: int,
    lookup: Callable[[int], list[Job]],
    extra: Iterable[Job] = (),
) -> Snapshot:
    """The cycle's view. Jobs a backend already queues (Slurm's own pending jobs) are not
    placed again, and held jobs wait unseen (their reason was set when they were held);
    `extra` adds jobs not yet stored (sbatch --test-only)."""
    pending = list(jobs.pending.values())
    pending.extend(extra)
    running = tuple(jobs.active.values())
    running_tasks: dict[int, int] = {}
    for j in running:
        if j.array_job_id and j.array_task_id is not None:
            running_tasks[j.array_job_id] = running_tasks.get(j.array_job_id, 0) + 1
    by_user_name = {
        (j.uid, j.spec.name): jobs.same_user_name(j.uid, j.spec.name)
        for j in pending
        if j.spec.dependency is not None  # only `singleton` reads it
    }
    return Snapshot(
        now=now,
        pending=tuple(pending),
        running=running,
        clusters=clusters,
        free=free_resources(jobs, clusters, self_placing),
        dep_targets=_dep_targets(jobs, pending, lookup),
        by_user_name=by_user_name,
        running_tasks=running_tasks,
        def_mem_per_cpu_mb=def_mem_per_cpu_mb,
        native_deps=_native_deps(jobs, pending, clusters, caps),
    )


def dep_target(j: Job) -> DepTarget:
    """What a dependency on `j` needs to know of it (a finished array holds no tasks)."""
    return DepTarget(
        job_id=j.job_id,
        state=j.state,
        exit_code=j.exit_code,
        start_time=j.start_time,
        user=j.uid,
        name=j.spec.name,
        array_job_id=j.array_job_id,
        array_task_id=j.array_task_id,
        pending_tasks=j.array_pending.count if j.array_pending and not j.state.is_finished else 0,
    )
