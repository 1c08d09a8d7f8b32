"""The built-in plugins: priority order, holds, begin time, dependencies, array throttle,
partition limits, node fit (cpus, memory, GPUs, features, node lists) and bin packing.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from gateway.model.cluster import UNAVAILABLE
from gateway.model.job import Hold, Job
from gateway.model.state import Reason
from gateway.model.values import INFINITE
from gateway.policy.limits import LimitGate
from gateway.policy.preempt_rules import job_tier, partition_tiers
from gateway.scheduler.dependencies import DepResult, evaluate
from gateway.scheduler.licenses import LicenseGate
from gateway.scheduler.part_limits import never_fits, partition_limit
from gateway.scheduler.plugins import OK, Code, Status
from gateway.scheduler.request import NodeRequest, constraint_satisfied
from gateway.scheduler.snapshot import NodeFree, Snapshot

__all__ = ["DEFAULT_PLUGINS", "FACTORIES"]

# the unavailable states by identity (members are singletons): an Enum's hash is a Python
# call, and a reservation search asks about ~900 nodes
_UNAVAILABLE_IDS = frozenset(map(id, UNAVAILABLE))


class PriorityOrder:
    """Higher partition PriorityTier first (when any partition sets one), then higher
    priority, then earlier submission, then lower id (slurmctld's sort_job_queue2)."""

    name = "priority"

    def __init__(self) -> None:
        self._snap: Snapshot | None = None
        self._tiers: dict[str, int] = {}

    def key(self, job: Job, snap: Snapshot) -> tuple[float, ...]:
        """Sort key."""
        if snap is not self._snap:  # once per cycle
            self._snap = snap
            self._tiers = partition_tiers(snap.clusters)
        if self._tiers:
            return (-job_tier(self._tiers, job), -job.priority, job.submit_time, job.job_id)
        return (-job.priority, job.submit_time, job.job_id)


class HoldGate:
    """Held jobs wait (JobHeldUser / JobHeldAdmin)."""

    name = "hold"

    def check(self, job: Job, snap: Snapshot) -> Status:
        """OK unless held."""
        if job.hold is Hold.USER:
            return Status(Code.WAIT, Reason.JOB_HELD_USER)
        if job.hold is Hold.ADMIN:
            return Status(Code.WAIT, Reason.JOB_HELD_ADMIN)
        return OK


class BeginTimeGate:
    """`--begin`: wait until then (BeginTime)."""

    name = "begin"

    def check(self, job: Job, snap: Snapshot) -> Status:
        """OK once the begin time has passed."""
        if job.spec.begin and job.spec.begin > snap.now:
            return Status(Code.WAIT, Reason.BEGIN_TIME)
        return OK


class DependencyGate:
    """`--dependency`: Dependency while waiting, DependencyNeverSatisfied when it cannot hold."""

    name = "dependency"

    def check(self, job: Job, snap: Snapshot) -> Status:
        """OK when satisfied."""
        dep = job.spec.dependency
        if dep is None or not dep.items or job.job_id in snap.native_deps:
            return OK
        result = evaluate(job, dep, snap)
        if result is DepResult.SATISFIED:
            return OK
        if result is DepResult.FAILED:
            return Status(Code.NEVER, Reason.DEPENDENCY_NEVER_SATISFIED)
        return Status(Code.WAIT, Reason.DEPENDENCY)


class ArrayThrottleGate:
    """`--array=...%N`: at most N tasks of the array run at once (JobArrayTaskLimit)."""

    name = "array-throttle"

    def check(self, job: Job, snap: Snapshot) -> Status:
        """OK while fewer than the throttle run."""
        arr = job.spec.array
        if arr is None or not arr.throttle:
            return OK
        if snap.running_tasks.get(job.array_job_id, 0) >= arr.throttle:
            return Status(Code.WAIT, Reason.JOB_ARRAY_TASK_LIMIT)
        return OK


class PartitionGate:
    """The partition exists, is up, its MaxTime admits the job (PartitionTimeLimit), the
    job fits its size (PartitionNodeLimit, PartitionConfig), and a job submitted held
    could ever run there (BadConstraints: it skipped the submit-time check)."""

    name = "partition"

    def __init__(self) -> None:
        # verdicts of this cycle's snapshot by what they read: 100,000 pending jobs share
        # a few hundred shapes, and judging each one was a third of a default cycle
        self._snap: Snapshot | None = None
        self._memo: dict[tuple[object, ...], Status] = {}

    def check(self, job: Job, snap: Snapshot) -> Status:
        """OK when some cluster's partition of the job's list admits the job; else the
        reason of the first partition named (as slurmctld reports for a -p a,b job)."""
        spec = job.spec
        if spec.hold:  # never_fits reads the whole request
            return self._judge(job, snap)
        if self._snap is not snap:
            self._snap, self._memo = snap, {}
        key = (
            job.partition,
            job.routed_to,
            spec.time_limit,
            spec.nodes_min,
            spec.ntasks,
            spec.cpus_per_task,
        )
        found = self._memo.get(key)
        if found is None:
            found = self._memo[key] = self._judge(job, snap)
        return found

    def _judge(self, job: Job, snap: Snapshot) -> Status:
        refusals = [self._refusal(job, name, snap) for name in job.partition.split(",") if name]
        if refusals and all(r is not None for r in refusals):
            return refusals[0] or OK
        if job.spec.hold and never_fits(
            job.spec, tuple(snap.clusters.values()), job.partition, snap.def_mem_per_cpu_mb
        ):
            return Status(Code.WAIT, Reason.BAD_CONSTRAINTS)
        return OK

    @staticmethod
    def _refusal(job: Job, name: str, snap: Snapshot) -> Status | None:
        """Why partition `name` does not admit the job (None: it does). A partition that
        several clusters have admits the job when one of them does, or when the one the
        router chose for it does: the others' sizes are not the job's limits."""
        limit = job.spec.time_limit
        routed = job.routed_to if job.routed_to in snap.clusters else None
        first: Status | None = None
        seen = False
        for cluster_name, cluster in snap.clusters.items():
            part = cluster.partition(name)
            if part is None or (routed is not None and cluster_name != routed):
                continue
            seen = True
            why: Status | None = None
            if not part.up:
                why = Status(Code.WAIT, Reason.PARTITION_DOWN)
            elif (
                limit is not None
                and part.max_time != INFINITE
                and (limit == INFINITE or limit > part.max_time)
            ):
                why = Status(Code.WAIT, Reason.PARTITION_TIME_LIMIT)
            elif (size := partition_limit(job.spec, cluster, part)) is not None:
                why = Status(Code.WAIT, size)
            if why is None:
                return None
            if first is None:
                first = why
        return first if seen else Status(Code.WAIT, Reason.PARTITION_DOWN)


def node_partitions_disjoint(asked: tuple[str, ...], of_node: tuple[str, ...]) -> bool:
    """Whether a node is in none of the partitions asked."""
    return not any(p in of_node for p in asked)


class ResourceFit:
    """A node fits when it is in the partition and up, and has the cpus, memory and GPUs."""

    name = "fit"

    def verdict_key(self, req: NodeRequest) -> Hashable:
        """The fields `fits` reads (keep in step with it: NodeTests shares verdicts by it)."""
        return (
            req.cpus,
            req.exclusive,
            req.partitions,
            req.nodelist,
            req.exclude,
            req.constraint,
            req.memory_mb,
            req.mem_per_cpu_mb,
            req.gpus,
            req.gpu_type,
            req.gpu_memory_mb,
            req.tmp_mb,
        )

    def fits(self, req: NodeRequest, free: NodeFree, snap: Snapshot) -> bool:
        """Room for one node's share of the gang."""
        # the cheap and most selective tests first (a backfill search asks ~900 times)
        if req.cpus > free.cpus or free.exclusive_jobs or (req.exclusive and not free.idle):
            return False
        node = free.node
        if id(node.state) in _UNAVAILABLE_IDS:
            return False
        parts = req.partitions
        if parts and (
            parts[0] not in node.partitions  # one partition: the common request
            if len(parts) == 1
            else node_partitions_disjoint(parts, node.partitions)
        ):
            return False
        if node.name in req.exclude:
            return False
        if req.constraint and not constraint_satisfied(req.constraint, node.features):
            return False
        if node.tmp_disk_mb < req.tmp_mb:
            return False
        memory = req.memory_for(req.cpus, snap.def_mem_per_cpu_mb, node.memory_mb)
        if memory > free.memory_mb:
            return False
        if req.gpus:
            if req.gpu_type and node.gpu_count(req.gpu_type) < req.gpus:
                return False
            if len(free.gpus) < req.gpus:
                return False
            if req.gpu_memory_mb and node.gpus:
                big = [g for g in node.gpus if g.memory_total >= req.gpu_memory_mb * 2**20]
                if len([g for g in big if g.index in free.gpus]) < req.gpus:
                    return False
        return True


class BinPack:
    """Prefer nodes already in use, to keep whole nodes free for big jobs."""

    name = "binpack"

    def score(self, req: NodeRequest, free: NodeFree, snap: Snapshot) -> float:
        """Fewer free cpus scores higher."""
        total = max(free.node.cpus, 1)
        return 1.0 - free.cpus / total


FACTORIES: dict[str, Callable[[], object]] = {
    "priority": PriorityOrder,
    "hold": HoldGate,
    "begin": BeginTimeGate,
    "dependency": DependencyGate,
    "array-throttle": ArrayThrottleGate,
    "partition": PartitionGate,
    "limits": LimitGate,  # QOS and association limits (gateway/policy/limits.py)
    "licenses": LicenseGate,  # slurm.conf Licenses (gateway/scheduler/licenses.py)
    "fit": ResourceFit,
    "binpack": BinPack,
}
DEFAULT_PLUGINS = (
    "priority",
    "hold",
    "begin",
    "dependency",
    "array-throttle",
    "partition",
    "limits",
    "licenses",
    "fit",
    "binpack",
)
