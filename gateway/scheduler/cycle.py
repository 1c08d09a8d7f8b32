"""One scheduling cycle: snapshot in, decisions out, as ordered actions.

1. enqueue  - every pending job through the gates; collect the eligible ones
2. allocate - eligible jobs in queue order; the registry's cluster selector names the
              (cluster, partition) targets a job may use, best first, and the gang is placed
              within one target's nodes through a Statement that commits every node's share
              or none
3. backfill - once the top job is blocked it gets a reservation (start and nodes, from
              running jobs' time limits); later jobs may start only without delaying the
              binding reservations (EASY: the top job's; backfill.py), and each blocked job
              tested gets an expected start (squeue --start)
The cycle never mutates the snapshot and performs no IO; the gateway applies the result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from operator import attrgetter

from gateway.compat.hostlist import compress
from gateway.model.cluster import UNAVAILABLE, ClusterState, NodeState
from gateway.model.job import Job, RankPlacement
from gateway.model.state import Reason
from gateway.scheduler.allocation import Statement, node_order, place_spread, required_first
from gateway.scheduler.backfill import Planned, Planner
from gateway.scheduler.bf_running import cluster_nodes
from gateway.scheduler.gc_pause import gc_paused
from gateway.scheduler.plugins import OK, Code, NodeTests, QueueOrder, Registry, score_key
from gateway.scheduler.preempt import Preemption
from gateway.scheduler.records import rank
from gateway.scheduler.request import NodeRequest, on_partitions, spec_request
from gateway.scheduler.selection import Target
from gateway.scheduler.snapshot import NodeFree, Snapshot

__all__ = ["CycleResult", "Decision", "run_cycle"]


@dataclass(frozen=True, slots=True)
class Decision:
    """Start `job` (for an array: its task `task`) on these nodes of `partition` of
    `cluster`: the cluster and partition are decided by the cycle (cluster selection), the
    nodes are within them."""

    job: Job
    placement: tuple[RankPlacement, ...]
    cluster: str
    task: int | None = None
    partition: str = field(kw_only=True)


@dataclass
class CycleResult:
    """What the gateway should do after a cycle."""

    starts: list[Decision] = field(default_factory=list)
    reasons: dict[int, Reason] = field(default_factory=dict)  # job id -> new pending reason
    never: dict[int, Reason] = field(default_factory=dict)  # jobs that can never run
    descs: dict[int, str] = field(default_factory=dict)  # job id -> slurmctld's state_desc
    planned: dict[int, Planned] = field(default_factory=dict)  # job id -> expected start
    # whether `planned` holds every blocked job's estimate (False: only the binding
    # reservations; the others keep their last estimate until the next round, bf_interval)
    estimated: bool = True
    # job id -> the running jobs it preempts: it starts once their runs have ended
    preempt: dict[int, tuple[int, ...]] = field(default_factory=dict)
    now: float = 0.0  # the cycle's clock (the time a job it first found eligible became so)


def _candidates(
    req: NodeRequest,
    free: Mapping[str, NodeFree],
    reg: Registry,
    snap: Snapshot,
    within: frozenset[str] | None = None,
    checked: bool = False,
    tests: NodeTests | None = None,
) -> list[NodeFree]:
    """The nodes (of `within`, when given: the selected cluster's) that fit, best first;
    `checked`: every node of `free` is known to be of `within` and to pass the filters (a
    reservation search hands over only such nodes), so they are not asked again; `tests`:
    the cycle's remembered verdicts (a fresh set when not given)."""
    if checked:
        fits = list(free.values())
    else:
        tests = NodeTests(reg.filters, snap) if tests is None else tests
        fits = tests.select(req, free.values(), within)
    if reg.scores:
        fits.sort(key=score_key(reg.scores, req, snap))
    else:  # every score is 0: the order is the names'
        fits.sort(key=_name)
    return fits


_name = attrgetter("node.name")  # a sort key in C: candidates are sorted by the hundred


def _place(
    job: Job,
    req: NodeRequest,
    free: dict[str, NodeFree],
    reg: Registry,
    snap: Snapshot,
    within: frozenset[str] | None = None,
    checked: bool = False,
    tests: NodeTests | None = None,
) -> tuple[RankPlacement, ...] | None:
    """The gang's placement now, or None; a job-wide `--gpus` that no one node holds goes
    over several (`multi_gpu`; not on nodes a reservation search checked for the first)."""
    placed = _place_one(job, req, free, reg, snap, within, checked, tests)
    if placed is None and req.multi_gpu is not None and not checked:
        placed = _place_one(job, req.multi_gpu, free, reg, snap, within, False, tests)
    return placed


def _place_one(
    job: Job,
    req: NodeRequest,
    free: dict[str, NodeFree],
    reg: Registry,
    snap: Snapshot,
    within: frozenset[str] | None = None,
    checked: bool = False,
    tests: NodeTests | None = None,
) -> tuple[RankPlacement, ...] | None:
    cands = _candidates(req, free, reg, snap, within, checked, tests)
    if len(cands) < req.nodes:
        return None
    if req.nodelist:  # -w: those nodes first, every one of them, then the best others
        ordered = required_first(req.nodelist, cands)
        if ordered is None:
            return None
        cands = ordered
    if req.spread:
        return place_spread(req, cands, free, snap)
    chosen: Sequence[NodeFree] | None = None
    for plugin in [] if req.nodelist else reg.placement:
        chosen = plugin.choose(req, cands, snap)
        if chosen is not None:
            break
    if chosen is None:
        chosen = cands[: req.nodes]
    if len(chosen) < req.nodes:
        return None
    # ranks in node order, as slurmctld lays a job out over its node bitmap: rank 0 and the
    # batch script on the lowest node, whichever node scored best
    chosen = sorted(chosen[: req.nodes], key=lambda f: node_order(f.node.name))
    stmt = Statement(free)
    out: list[RankPlacement] = []
    widest = max(req.tasks_per_node)
    for f, tasks in zip(chosen, req.tasks_per_node, strict=False):
        node = f.node
        # a node with fewer tasks takes fewer CPUs (-N 2 -n 3: 2,1, as Slurm allocates)
        fewer = max(req.cpus - (widest - tasks) * req.cpus_per_task, 1)
        cpus = node.cpus if req.exclusive else fewer
        memory = req.memory_for(cpus, snap.def_mem_per_cpu_mb, node.memory_mb)
        gpus = stmt.allocate(node.name, cpus, memory, req.gpus, req.exclusive)
        out.append(rank(node, tasks, cpus, memory, gpus))  # shared when equal (records.py)
    stmt.commit()
    return tuple(out)


# cluster names -> (the descriptions the set was made from, the set): a cycle asks for every
# job it examines, and rebuilding 16,384 names each time cost more than the rest of a test
_NODE_SETS: dict[tuple[str, ...], tuple[tuple[ClusterState, ...], frozenset[str]]] = {}


def _nodes_of(targets: Sequence[Target], snap: Snapshot) -> frozenset[str]:
    """The node names of the targets' clusters (their partitions are the request's);
    kept while the clusters' descriptions are the same objects (they are immutable)."""
    if len(targets) == 1:  # one target (every placement try): kept per description
        return cluster_nodes(snap, targets[0].cluster)
    names = tuple(sorted({t.cluster for t in targets if t.cluster in snap.clusters}))
    states = tuple(snap.clusters[c] for c in names)
    hit = _NODE_SETS.get(names)
    if hit is not None and all(a is b for a, b in zip(hit[0], states, strict=True)):
        return hit[1]
    found = frozenset(n.name for c in states for n in c.nodes)
    if len(_NODE_SETS) >= 64:
        _NODE_SETS.clear()
    _NODE_SETS[names] = (states, found)
    return found


def _place_on_targets(
    job: Job,
    req: NodeRequest,
    targets: Sequence[Target],
    free: dict[str, NodeFree],
    reg: Registry,
    snap: Snapshot,
    checked: bool = False,
    tests: NodeTests | None = None,
) -> tuple[Target, tuple[RankPlacement, ...]] | None:
    """The first target (in the selector's order) the gang fits on now, with its placement
    (`checked`, `tests`: as `_candidates` says)."""
    for target in targets:
        one = on_partitions(req, (target.partition,))
        placement = _place(job, one, free, reg, snap, _nodes_of((target,), snap), checked, tests)
        if placement is not None:
            return target, placement
    return None


def fits_now(
    job: Job, targets: Sequence[Target], free: Mapping[str, NodeFree], reg: Registry, snap: Snapshot
) -> bool:
    """Whether enough nodes of one of the targets could take the job's share now (`free`
    unchanged): the router's "starts now" on a cluster the gateway places on."""
    req = spec_request(job.spec)
    tests = NodeTests(reg.filters, snap)
    for target in targets:
        one = on_partitions(req, (target.partition,))
        nodes = 1 if one.spread else one.nodes
        within = _nodes_of((target,), snap)
        if len(_candidates(one, free, reg, snap, within, False, tests)) >= nodes:
            return True
        alt = one.multi_gpu  # the GPUs over several nodes
        if alt is not None and _place_one(job, alt, dict(free), reg, snap, within, False, tests):
            return True
    return False


def place_now(
    job: Job, targets: Sequence[Target], free: dict[str, NodeFree], reg: Registry, snap: Snapshot
) -> bool:
    """Take the job's placement out of `free` if it fits now (so that the next job routed in
    the same pass does not count on the same room)."""
    req = spec_request(job.spec)
    return _place_on_targets(job, req, targets, free, reg, snap) is not None


def placement_now(
    job: Job, targets: Sequence[Target], free: Mapping[str, NodeFree], reg: Registry, snap: Snapshot
) -> tuple[Target, tuple[RankPlacement, ...]] | None:
    """Where the job would go now on the first target it fits (`free` unchanged)."""
    return _place_on_targets(job, spec_request(job.spec), targets, dict(free), reg, snap)


def run_cycle(
    snap: Snapshot,
    reg: Registry,
    preempt: Preemption | None = None,
    *,
    estimates: bool | None = None,
) -> CycleResult:
    """Decide which pending jobs start now, and why the others wait (with `preempt`: a
    job that cannot start may name running jobs to preempt, scheduler/preempt.py).
    `estimates`: whether blocked jobs get an expected start (None: when bf_interval says
    a round is due, which this cycle then counts as the last)."""
    with gc_paused():
        return _run(snap, reg, preempt, estimates)


def _run(
    snap: Snapshot, reg: Registry, preempt: Preemption | None, estimates: bool | None
) -> CycleResult:
    params = reg.backfill
    if estimates is None:
        estimates = params.estimates_due(reg.estimated_at, snap.now)
        if estimates:
            reg.estimated_at = snap.now
    if not estimates:
        params = replace(params, estimates=0)
    result = CycleResult(estimated=estimates, now=snap.now)
    free = dict(snap.free)
    order = reg.queue_order
    queue = sorted(snap.pending, key=partial(_key, order, snap)) if order else list(snap.pending)
    eligible: list[Job] = []
    checks = tuple(gate.check for gate in reg.gates)  # bound once, not per job and gate
    for job in queue:
        status = None
        for check in checks:
            st = check(job, snap)
            if st is not OK and not st.ok:  # most verdicts are the shared OK
                status = st
                break
        if status is None:
            eligible.append(job)
        elif status.code is Code.NEVER:
            result.never[job.job_id] = status.reason
        else:
            result.reasons[job.job_id] = status.reason
    running_tasks = dict(snap.running_tasks)
    tests = NodeTests(reg.filters, snap)  # this cycle's verdicts, shared with the planner
    planner = Planner(
        snap,
        reg,
        params,
        lambda j, r, t, f, checked: _place_on_targets(j, r, t, f, reg, snap, checked, tests),
        tests,
    )
    blocked = False
    for at, job in enumerate(eligible):
        if blocked and planner.exhausted():
            _behind(eligible[at:], running_tasks, result)
            break
        starts = 0
        while True:
            task = _next_task(job, starts)
            if task is False:
                break
            arr = job.spec.array
            if arr and arr.throttle and running_tasks.get(job.array_job_id, 0) >= arr.throttle:
                result.reasons.setdefault(job.job_id, Reason.JOB_ARRAY_TASK_LIMIT)
                break
            if starts and (held := _gated(job, snap, reg)) is not None:
                # each further task of an array takes what the gates count (licences,
                # limits) again: two tasks never start on the same licence
                result.reasons[job.job_id] = held
                break
            if blocked and not planner.may_test():  # bf_max_job_test: not even looked at
                result.reasons[job.job_id] = Reason.PRIORITY
                break
            targets = reg.selector.targets(job, snap)
            if not targets:  # nowhere for now (not routed yet): keeps its reason, blocks none
                result.reasons[job.job_id] = job.reason
                break
            # the request as it stands on any of its targets (for the reasons it waits)
            req = on_partitions(
                spec_request(job.spec), tuple(dict.fromkeys(t.partition for t in targets))
            )
            within = _nodes_of(targets, snap)
            chosen = planner.start_now(job, req, targets, free)
            placement = None if chosen is None else chosen[1]
            unavailable = (
                _needs_unavailable(job, req, snap, reg, within)
                if placement is None and planner.any_down
                else None
            )
            if unavailable is not None:
                result.reasons[job.job_id] = Reason.REQ_NODE_NOT_AVAIL
                result.descs[job.job_id] = f"ReqNodeNotAvail, UnavailableNodes:{unavailable}"
                break
            if chosen is None and preempt is not None:
                place = partial(_place_on_targets, job, req, targets, reg=reg, snap=snap)
                claimed = preempt.attempt(job, free, place)
                room = None if claimed is None else preempt.room(job.job_id, claimed[0], free)
                chosen = None if room is None else place(room)  # SUSPEND: victims stopped
                if claimed is not None and chosen is None:  # waits (Resources) for its victims
                    result.preempt[job.job_id] = claimed[0]
                    result.reasons[job.job_id] = Reason.RESOURCES
                    planner.hold(claimed[1], free)
                    break
                if chosen is not None:  # on its stopped victims' room: none may take it
                    planner.hold(chosen[1], free)
            if chosen is None:
                result.reasons[job.job_id] = Reason.PRIORITY if blocked else Reason.RESOURCES
                blocked = True
                planner.block(job, req, targets, free)
                break
            target, placement = chosen
            result.starts.append(
                Decision(
                    job,
                    placement,
                    target.cluster,
                    None if task is None else int(task),
                    partition=target.partition,
                )
            )
            starts += 1
            if job.array_job_id:
                running_tasks[job.array_job_id] = running_tasks.get(job.array_job_id, 0) + 1
            if task is None:
                break
    result.planned = planner.plan
    planner.close()
    return result


def _key(order: QueueOrder, snap: Snapshot, job: Job) -> tuple[float, ...]:
    return order.key(job, snap)


def _behind(rest: Sequence[Job], running_tasks: Mapping[int, int], result: CycleResult) -> None:
    """The eligible jobs left once a job is blocked and bf_max_job_test is spent: none is
    looked at, so each waits for Priority (an array's throttled first task for its
    throttle, as the full loop says); the same verdicts, without the per-job machinery."""
    reasons = result.reasons
    for job in rest:
        if job.array_pending is not None and _next_task(job, 0) is False:
            continue  # no task left to start: the full loop records nothing either
        arr = job.spec.array
        if arr and arr.throttle and running_tasks.get(job.array_job_id, 0) >= arr.throttle:
            reasons.setdefault(job.job_id, Reason.JOB_ARRAY_TASK_LIMIT)
        else:
            reasons[job.job_id] = Reason.PRIORITY


def _gated(job: Job, snap: Snapshot, reg: Registry) -> Reason | None:
    """The reason the first gate that refuses gives, None when every gate lets it go."""
    for gate in reg.gates:
        st = gate.check(job, snap)
        if not st.ok:
            return st.reason
    return None


def _needs_unavailable(
    job: Job, req: NodeRequest, snap: Snapshot, reg: Registry, within: frozenset[str]
) -> str | None:
    """When the job cannot start on the nodes that are up even once every job has ended,
    though it could with the drained or down ones (slurmctld's ESLURM_NODE_NOT_AVAIL,
    Reason=ReqNodeNotAvail, which does not block the jobs behind it): the unavailable nodes
    of its partition (of its -w list, when given), as slurmctld names them. Else None."""
    down = [f.node for f in snap.free.values() if f.node.state in UNAVAILABLE]
    if not down:
        return None
    empty = {
        name: NodeFree(
            f.node, f.node.cpus, f.node.memory_mb, frozenset(g.index for g in f.node.gpus)
        )
        for name, f in snap.free.items()
    }
    if len(_candidates(req, empty, reg, snap, within)) >= req.nodes:
        return None
    healed = {
        name: replace(e, node=replace(e.node, state=NodeState.IDLE)) for name, e in empty.items()
    }
    if len(_candidates(req, healed, reg, snap, within)) < req.nodes:
        return None
    parts = set(req.partitions or job.partition.split(","))
    names = [
        n.name
        for n in down
        if n.name in within
        and parts & set(n.partitions)
        and (not req.nodelist or n.name in req.nodelist)
    ]
    return compress(names)


def _next_task(job: Job, already: int) -> int | bool | None:
    """The next array task index to start (None for a plain job, False when none left)."""
    if job.array_pending is None:
        return None if already == 0 else False
    indices = job.array_pending.indices()
    for _ in range(already):
        next(indices, None)
    return next(indices, False)
