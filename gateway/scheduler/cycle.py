"""One scheduling cycle: snapshot in, decisions out, as ordered actions.

1. enqueue  - every pending job through the gates; collect the eligible ones
2. allocate - eligible jobs in queue order; a gang is placed through a Statement that
              commits every node's share or none
3. backfill - once the top job is blocked, later jobs may start only if they end before
              the top job could start (EASY backfilling, from the jobs' time limits)
The cycle never mutates the snapshot and performs no IO; the gateway applies the result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from gateway.compat.hostlist import compress
from gateway.model.cluster import NodeState
from gateway.model.job import Job, RankPlacement
from gateway.model.state import Reason
from gateway.model.values import INFINITE
from gateway.scheduler.plugins import Code, Registry
from gateway.scheduler.request import NodeRequest, node_request
from gateway.scheduler.snapshot import NodeFree, Snapshot

__all__ = ["CycleResult", "Decision", "Statement", "run_cycle"]


@dataclass(frozen=True, slots=True)
class Decision:
    """Start `job` (for an array: its task `task`) on these nodes."""

    job: Job
    placement: tuple[RankPlacement, ...]
    cluster: str
    task: int | None = None


@dataclass
class CycleResult:
    """What the gateway should do after a cycle."""

    starts: list[Decision] = field(default_factory=list)
    reasons: dict[int, Reason] = field(default_factory=dict)  # job id -> new pending reason
    never: dict[int, Reason] = field(default_factory=dict)  # jobs that can never run
    descs: dict[int, str] = field(default_factory=dict)  # job id -> slurmctld's state_desc


class Statement:
    """Tentative allocations on a working copy of free resources; commit or discard whole."""

    def __init__(self, free: dict[str, NodeFree]) -> None:
        self._free = free
        self._pending: list[tuple[str, NodeFree]] = []

    def allocate(
        self, name: str, cpus: int, memory: int, gpus: int, exclusive: bool
    ) -> tuple[int, ...]:
        """Take resources on a node (tentatively); returns the GPU indices taken."""
        cur = self._free[name]
        taken = tuple(sorted(cur.gpus)[:gpus])
        self._pending.append((name, cur))
        self._free[name] = replace(
            cur,
            cpus=0 if exclusive else cur.cpus - cpus,
            memory_mb=0 if exclusive else cur.memory_mb - memory,
            gpus=frozenset() if exclusive else cur.gpus - set(taken),
            exclusive_jobs=cur.exclusive_jobs + int(exclusive),
            jobs=cur.jobs + 1,
        )
        return taken

    def commit(self) -> None:
        """Keep the allocations."""
        self._pending.clear()

    def discard(self) -> None:
        """Undo every allocation since the last commit."""
        for name, before in reversed(self._pending):
            self._free[name] = before
        self._pending.clear()


def _candidates(
    req: NodeRequest, free: dict[str, NodeFree], reg: Registry, snap: Snapshot
) -> list[NodeFree]:
    fits = [f for f in free.values() if all(p.fits(req, f, snap) for p in reg.filters)]
    fits.sort(key=lambda f: (-sum(s.score(req, f, snap) for s in reg.scores), f.node.name))
    return fits


def _place(
    job: Job, req: NodeRequest, free: dict[str, NodeFree], reg: Registry, snap: Snapshot
) -> tuple[RankPlacement, ...] | None:
    cands = _candidates(req, free, reg, snap)
    if len(cands) < req.nodes:
        return None
    chosen: Sequence[NodeFree] | None = None
    for plugin in reg.placement:
        chosen = plugin.choose(req, cands, snap)
        if chosen is not None:
            break
    if chosen is None:
        chosen = cands[: req.nodes]
    if len(chosen) < req.nodes:
        return None
    stmt = Statement(free)
    out: list[RankPlacement] = []
    for f, tasks in zip(chosen, req.tasks_per_node, strict=False):
        node = f.node
        cpus = node.cpus if req.exclusive else req.cpus
        memory = req.memory_for(cpus, snap.def_mem_per_cpu_mb, node.memory_mb)
        gpus = stmt.allocate(node.name, cpus, memory, req.gpus, req.exclusive)
        out.append(RankPlacement(node.name, tasks, cpus, memory, gpus))
    stmt.commit()
    return tuple(out)


def _cluster_of(node: str, snap: Snapshot) -> str:
    for name, cluster in snap.clusters.items():
        if any(n.name == node for n in cluster.nodes):
            return name
    return "local"


def _end_estimates(snap: Snapshot) -> list[tuple[float, Job]]:
    out = []
    for job in snap.running:
        if job.time_limit in (0, INFINITE) or job.start_time is None:
            continue
        out.append((job.start_time + job.time_limit * 60, job))
    out.sort(key=lambda t: t[0])
    return out


def _shadow_time(req: NodeRequest, snap: Snapshot, reg: Registry) -> float | None:
    """When the blocked top job could start if running jobs end at their limits."""
    free = {k: v for k, v in snap.free.items()}
    for end, job in _end_estimates(snap):
        for name in job.nodes:
            if name in free:
                cur = free[name]
                free[name] = replace(
                    cur,
                    cpus=min(cur.node.cpus, cur.cpus + job.num_cpus // max(len(job.nodes), 1)),
                    memory_mb=cur.node.memory_mb,
                    gpus=frozenset(g.index for g in cur.node.gpus) or cur.gpus,
                    exclusive_jobs=0,
                    jobs=max(cur.jobs - 1, 0),
                )
        if len(_candidates(req, free, reg, snap)) >= req.nodes:
            return end
    return None


def run_cycle(snap: Snapshot, reg: Registry) -> CycleResult:
    """Decide which pending jobs start now, and why the others wait."""
    result = CycleResult()
    free = dict(snap.free)
    order = reg.queue_order
    queue = sorted(snap.pending, key=lambda j: order.key(j, snap)) if order else list(snap.pending)
    eligible: list[Job] = []
    for job in queue:
        status = None
        for gate in reg.gates:
            st = gate.check(job, snap)
            if not st.ok:
                status = st
                break
        if status is None:
            eligible.append(job)
        elif status.code is Code.NEVER:
            result.never[job.job_id] = status.reason
        else:
            result.reasons[job.job_id] = status.reason
    running_tasks = dict(snap.running_tasks)
    shadow: float | None = None
    blocked = False
    for job in eligible:
        starts = 0
        while True:
            task = _next_task(job, starts)
            if task is False:
                break
            arr = job.spec.array
            if arr and arr.throttle and running_tasks.get(job.array_job_id, 0) >= arr.throttle:
                result.reasons.setdefault(job.job_id, Reason.JOB_ARRAY_TASK_LIMIT)
                break
            req = node_request(job.spec, _nodelist(job))
            limit = job.time_limit if job.time_limit not in (0, INFINITE) else None
            if blocked and (shadow is None or limit is None or snap.now + limit * 60 > shadow):
                result.reasons[job.job_id] = Reason.PRIORITY
                break
            placement = _place(job, req, free, reg, snap)
            unavailable = _needs_unavailable(job, req, snap, reg) if placement is None else None
            if unavailable is not None:
                result.reasons[job.job_id] = Reason.REQ_NODE_NOT_AVAIL
                result.descs[job.job_id] = f"ReqNodeNotAvail, UnavailableNodes:{unavailable}"
                break
            if placement is None:
                if not blocked:
                    blocked = True
                    result.reasons[job.job_id] = Reason.RESOURCES
                    shadow = _shadow_time(req, snap, reg)
                else:
                    result.reasons[job.job_id] = Reason.PRIORITY
                break
            cluster = _cluster_of(placement[0].node, snap)
            result.starts.append(
                Decision(job, placement, cluster, None if task is None else int(task))
            )
            starts += 1
            if job.array_job_id:
                running_tasks[job.array_job_id] = running_tasks.get(job.array_job_id, 0) + 1
            if task is None:
                break
    return result


_UNAVAILABLE = frozenset({NodeState.DOWN, NodeState.DRAINED, NodeState.DRAINING})


def _needs_unavailable(job: Job, req: NodeRequest, snap: Snapshot, reg: Registry) -> str | None:
    """When the job cannot start on the nodes that are up even once every job has ended,
    though it could with the drained or down ones (slurmctld's ESLURM_NODE_NOT_AVAIL,
    Reason=ReqNodeNotAvail, which does not block the jobs behind it): the unavailable nodes
    of its partition (of its -w list, when given), as slurmctld names them. Else None."""
    down = [f.node for f in snap.free.values() if f.node.state in _UNAVAILABLE]
    if not down:
        return None
    empty = {
        name: NodeFree(
            f.node, f.node.cpus, f.node.memory_mb, frozenset(g.index for g in f.node.gpus)
        )
        for name, f in snap.free.items()
    }
    if len(_candidates(req, empty, reg, snap)) >= req.nodes:
        return None
    healed = {
        name: replace(e, node=replace(e.node, state=NodeState.IDLE)) for name, e in empty.items()
    }
    if len(_candidates(req, healed, reg, snap)) < req.nodes:
        return None
    parts = set(job.partition.split(","))
    names = [
        n.name
        for n in down
        if parts & set(n.partitions) and (not req.nodelist or n.name in req.nodelist)
    ]
    return compress(names)


def _nodelist(job: Job) -> tuple[str, ...]:
    if not job.spec.nodelist:
        return ()
    from gateway.compat.hostlist import expand

    return tuple(expand(job.spec.nodelist))


def _next_task(job: Job, already: int) -> int | bool | None:
    """The next array task index to start (None for a plain job, False when none left)."""
    if job.array_pending is None:
        return None if already == 0 else False
    indices = job.array_pending.indices()
    for _ in range(already):
        next(indices, None)
    return next(indices, False)
