"""`caldera why JOBID`: what a pending job waits for, in numbers.

squeue's %R keeps Slurm's one word (scripts parse it); this says what lies behind it: for
each cluster and partition the job may run in, how many nodes have room for one node's
share now against how many it needs, what the best of the others lacks (which resource,
by how much), the running jobs whose ends would make room and when (their time limits:
"2 more nodes free at 14:05 when job 812 ends"), the dependencies still unmet and the
state of each target, the begin time, the hold. The fit test is the scheduler's own
(`ResourceFit`), on the same free-resource accounting, so the numbers agree with what the
next cycle decides. The time of room comes from time limits (jobs may end sooner) and
ignores jobs ahead of it; the backfill plan's expected start is shown when there is one.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from gateway.model.cluster import UNAVAILABLE, ClusterState, Node
from gateway.model.job import Hold, Job
from gateway.model.state import JobState, Reason
from gateway.model.values import INFINITE
from gateway.scheduler.builtin import ResourceFit
from gateway.scheduler.dependencies import DepResult, evaluate
from gateway.scheduler.request import NodeRequest, constraint_satisfied, node_request
from gateway.scheduler.snapshot import DepTarget, NodeFree, Snapshot

__all__ = ["WhyInput", "explain"]

_MIB = 2**20
_FIT = ResourceFit()


@dataclass(frozen=True, slots=True)
class WhyInput:
    """What the explanation reads (the gateway's current view)."""

    now: float
    clusters: Mapping[str, ClusterState]  # drained nodes shown drained
    free: Mapping[str, NodeFree]
    running: tuple[Job, ...]  # active jobs
    pending: Iterable[Job]  # schedulable pending jobs (for "ahead of it")
    dep_targets: Mapping[int, tuple[DepTarget, ...]]
    same_user_name: tuple[int, ...]  # unfinished jobs of the user with this name (singleton)
    self_placing: frozenset[str]  # clusters that place their own jobs
    def_mem_per_cpu_mb: int = 0
    time_scale: float = 1.0  # real seconds per job second


def _clock(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(at))


def _span(seconds: float) -> str:
    s = max(0, int(seconds))
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min"
    return f"{s // 3600} h {s % 3600 // 60} min"


def _wants(req: NodeRequest, def_mem: int, time_limit: int) -> str:
    mem = req.memory_for(req.cpus, def_mem, 0)
    parts = [f"{req.cpus} cpus"]
    if req.memory_mb is None:
        parts.append("the whole node's memory")
    elif mem:
        parts.append(f"{mem} MiB")
    if req.gpus:
        gpu = f"{req.gpus} GPU{'s' if req.gpus > 1 else ''}"
        if req.gpu_type:
            gpu += f" of type {req.gpu_type}"
        if req.gpu_memory_mb:
            gpu += f" with >= {req.gpu_memory_mb / 1024:g} GiB each"
        parts.append(gpu)
    if req.exclusive:
        parts.append("the node to itself")
    nodes = f"{req.nodes} node{'s' if req.nodes > 1 else ''}"
    limit = "none" if time_limit <= 0 or time_limit >= INFINITE else f"{time_limit} min"
    return f"wants {nodes}, each with {', '.join(parts)}; time limit {limit}"


def _gpus_usable(req: NodeRequest, node: Node, free: NodeFree) -> int:
    """Free GPUs of the kind asked for (memory at least the request's, when asked)."""
    if req.gpu_memory_mb and node.gpus:
        big = {g.index for g in node.gpus if g.memory_total >= req.gpu_memory_mb * _MIB}
        return len(big & free.gpus)
    return len(free.gpus)


def _capable(req: NodeRequest, node: Node, def_mem: int) -> str | None:
    """Why this node could never take one share (None: it could, when empty)."""
    if node.state in UNAVAILABLE:
        return f"{node.state.long}" + (f" ({node.reason})" if node.reason else "")
    if not constraint_satisfied(req.constraint, node.features):
        return f"lacks features {req.constraint}"
    if node.cpus < req.cpus:
        return f"has {node.cpus} cpus"
    if req.memory_for(req.cpus, def_mem, node.memory_mb) > node.memory_mb:
        return f"has {node.memory_mb} MiB"
    if req.gpus:
        have = node.gpu_count(req.gpu_type)
        if req.gpu_memory_mb and node.gpus:
            have = sum(1 for g in node.gpus if g.memory_total >= req.gpu_memory_mb * _MIB)
        if have < req.gpus:
            return f"has {have} such GPUs"
    return None


def _short(req: NodeRequest, node: Node, free: NodeFree, def_mem: int) -> list[str]:
    """What one node lacks now, resource by resource."""
    out = []
    if free.exclusive_jobs:
        out.append("a job there has the node to itself")
    if req.exclusive and not free.idle:
        out.append(f"{free.jobs} job(s) run there")
    if req.cpus > free.cpus:
        out.append(f"{max(free.cpus, 0)} cpus free ({req.cpus - free.cpus} short)")
    mem = req.memory_for(req.cpus, def_mem, node.memory_mb)
    if mem > free.memory_mb:
        out.append(f"{max(free.memory_mb, 0)} MiB free ({mem - free.memory_mb} short)")
    if req.gpus:
        usable = _gpus_usable(req, node, free)
        if usable < req.gpus:
            out.append(f"{usable} GPUs free ({req.gpus - usable} short)")
    return out


def _ends(job: Job, scale: float) -> float | None:
    if job.start_time is None or job.time_limit <= 0 or job.time_limit >= INFINITE:
        return None
    return job.start_time + job.time_limit * 60 * scale


def _released(free: NodeFree, job: Job) -> NodeFree:
    for p in job.placement:
        if p.node == free.node.name:
            exclusive = job.spec.sharing is not None and job.spec.sharing.value == "exclusive"
            return replace(
                free,
                cpus=free.cpus + p.cpus,
                memory_mb=free.memory_mb + p.memory_mb,
                gpus=free.gpus | set(p.gpus),
                exclusive_jobs=free.exclusive_jobs - int(exclusive),
                jobs=free.jobs - 1,
            )
    return free


def _partition_lines(
    job: Job, req: NodeRequest, cname: str, pname: str, inp: WhyInput
) -> list[str]:
    cluster = inp.clusters[cname]
    part = cluster.partition(pname)
    where = f"{cname}/{pname}"
    if part is None:
        return []
    if not part.up:
        return [f"{where}: the partition is down"]
    if cname in inp.self_placing:
        return [f"{where}: this cluster places its jobs itself; its own queue decides when"]
    snap = Snapshot(
        now=inp.now,
        pending=(),
        running=(),
        clusters=inp.clusters,
        free=inp.free,
        def_mem_per_cpu_mb=inp.def_mem_per_cpu_mb,
    )
    preq = replace(req, partitions=(pname,))
    members = set(part.nodes)
    nodes = [n for n in cluster.nodes if n.name in members]
    if part.max_nodes is not None and req.nodes > part.max_nodes:
        return [f"{where}: the job wants {req.nodes} nodes, the partition allows {part.max_nodes}"]
    limit = job.time_limit
    if 0 < part.max_time < limit < INFINITE:
        return [f"{where}: time limit {limit} min is over the partition's {part.max_time} min"]
    never = {n.name: why for n in nodes if (why := _capable(preq, n, inp.def_mem_per_cpu_mb))}
    able = [n for n in nodes if n.name not in never]
    if len(able) < req.nodes:
        kinds: dict[str, int] = {}
        for why in never.values():
            kinds[why] = kinds.get(why, 0) + 1
        causes = "; ".join(
            f"{c} node(s) {w}" for w, c in sorted(kinds.items(), key=lambda x: -x[1])
        )
        return [
            f"{where}: only {len(able)} of {len(nodes)} nodes could ever take a share, "
            f"{req.nodes} needed ({causes})"
        ]
    fitting = [n for n in able if n.name in inp.free and _FIT.fits(preq, inp.free[n.name], snap)]
    head = f"{where}: {len(fitting)} of {len(able)} nodes have room now, {req.nodes} needed"
    if len(fitting) >= req.nodes:
        return [head + " (it can start at the next scheduling cycle)"]
    lines = [head]
    others = [n for n in able if n.name in inp.free and n not in fitting]
    if others:
        best = min(
            others,
            key=lambda n: len(_short(preq, n, inp.free[n.name], inp.def_mem_per_cpu_mb)),
        )
        short = _short(preq, best, inp.free[best.name], inp.def_mem_per_cpu_mb)
        lines.append(f"  best node {best.name}: {', '.join(short) or 'busy'}")
    # when running jobs' time limits make room (ignoring jobs ahead of this one)
    local = {n.name: inp.free[n.name] for n in able if n.name in inp.free}
    ending = sorted(
        ((end, j) for j in inp.running if (end := _ends(j, inp.time_scale)) is not None),
        key=lambda x: x[0],
    )
    count = len(fitting)
    for end, other in ending:
        touched = [p.node for p in other.placement if p.node in local]
        if not touched:
            continue
        for name in touched:
            local[name] = _released(local[name], other)
        count = sum(1 for f in local.values() if _FIT.fits(preq, f, snap))
        if count >= req.nodes:
            lines.append(
                f"  {count - len(fitting)} more node(s) have room at {_clock(end)} (in "
                f"{_span(end - inp.now)}) when job {other.job_id} ends (its time limit), "
                "unless jobs ahead of it take them"
            )
            break
    else:
        if ending:
            lines.append("  the running jobs' ends alone do not make room for it")
    return lines


def _dependency_lines(job: Job, inp: WhyInput) -> list[str]:
    dep = job.spec.dependency
    if dep is None or not dep.items:
        return []
    snap = Snapshot(
        now=inp.now,
        pending=(),
        running=(),
        clusters={},
        free={},
        dep_targets=inp.dep_targets,
        by_user_name={(job.uid, job.spec.name): inp.same_user_name},
    )
    out = [f"dependency {dep.render()}"]
    for item in dep.items:
        one = replace(dep, items=(item,))
        result = evaluate(job, one, snap)
        targets = inp.dep_targets.get(item.job_id, ())
        states = ", ".join(sorted({t.state.long for t in targets})) or "no record"
        what = (
            "met"
            if result is DepResult.SATISFIED
            else ("can never be met" if result is DepResult.FAILED else "waiting")
        )
        label = item.render() if item.job_id else "singleton"
        if item.job_id:
            out.append(f"  {label}: {what} (job {item.job_id}: {states})")
        else:
            out.append(f"  {label}: {what} ({len(inp.same_user_name)} job(s) with this name)")
    if len(dep.items) > 1:
        out.append("  (any one suffices)" if dep.any_of else "  (all must hold)")
    return out


def explain(job: Job, inp: WhyInput) -> list[str]:
    """The lines `caldera why` prints for `job`."""
    state = job.state.long
    lines = [f"Job {job.display_id} ({job.spec.name}) {state} Reason={job.reason.value}"]
    if job.state is not JobState.PENDING:
        if job.nodes:
            lines.append(f"  runs on {','.join(job.nodes)} in {job.cluster}/{job.partition}")
        return lines
    if job.state_desc:
        lines.append(f"  {job.state_desc}")
    if job.hold is Hold.USER:
        lines.append(f"  held by its user: `scontrol release {job.job_id}` lets it go on")
    elif job.hold is Hold.ADMIN:
        lines.append("  held by an operator: only an operator can release it")
    if job.spec.begin and job.spec.begin > inp.now:
        lines.append(
            f"  not eligible before {_clock(job.spec.begin)} (in {_span(job.spec.begin - inp.now)})"
        )
    lines.extend("  " + line for line in _dependency_lines(job, inp))
    if job.backend_id:
        lines.append(f"  queued by cluster {job.cluster} itself (its id {job.backend_id})")
        return lines
    req = node_request(job.spec)
    lines.append("  " + _wants(req, inp.def_mem_per_cpu_mb, job.time_limit))
    if job.sched_start is not None:  # the last cycle's backfill plan (squeue --start)
        where = f" on {job.sched_nodes}" if job.sched_nodes else ""
        lines.append(
            f"  backfill plan: expected to start at {_clock(job.sched_start)} "
            f"(in {_span(job.sched_start - inp.now)}){where}"
        )
    names = [p for p in job.partition.split(",") if p]
    for cname in inp.clusters:
        for pname in names:
            lines.extend("  " + line for line in _partition_lines(job, req, cname, pname, inp))
    if job.reason is Reason.PRIORITY or job.reason is Reason.RESOURCES:
        mine = set(names)
        ahead = sum(
            1
            for other in inp.pending
            if other.job_id != job.job_id
            and other.hold is None
            and (other.priority, -other.submit_time) > (job.priority, -job.submit_time)
            and mine & set(other.partition.split(","))
        )
        if ahead:
            lines.append(f"  {ahead} pending job(s) with a higher priority share its partitions")
    return lines
