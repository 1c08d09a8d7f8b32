"""Which clusters may ever run a job, and for the others the one-line reason why not.

A static "could it ever run there" check over the job, the clusters' descriptions and the
routing table, not "is there room now" (that is prediction, gateway/federation/routing.py).
Checks, cheapest first, the first failing one is the reason: `-M/--clusters`, the routing
rules, the burst policy, the container image allow-list, the filesystem map (working
directory and the -o/-e/-i directories), then on the cluster's description the partition,
the licences and whether some set of its nodes (empty) could hold the job: node count,
CPUs, memory, GPUs and other gres by type and count, features (-C), -w node names.
Reasons are worded for `scontrol show job` and start with the cluster's name.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from fnmatch import fnmatchcase

from gateway.federation.config import RoutingConfig
from gateway.federation.routing import Burst
from gateway.model.cluster import ClusterState, Node, Partition
from gateway.model.job import Job
from gateway.model.jobspec import JobSpec
from gateway.scheduler.request import (
    NodeRequest,
    constraint_satisfied,
    node_request,
    task_capacity,
)

__all__ = [
    "burst_of",
    "eligibility",
    "eligible",
    "home_of",
]


def burst_of(spec: JobSpec) -> Burst:
    """The job's `--burst` policy (ALLOWED when not given; verify.py checked the word)."""
    return Burst(spec.burst) if spec.burst else Burst.ALLOWED


def _is_all(names: Sequence[str]) -> bool:
    """`-M all` (any case, and alone: in a list, Slurm reads `all` as a cluster's name)."""
    return len(names) == 1 and names[0].casefold() == "all"


def _resolve(names: Sequence[str], known: Iterable[str]) -> list[str | None]:
    """Each `-M` name as the configured cluster it means (Slurm compares cluster names
    without case), None for an unknown one."""
    by_fold = {k.casefold(): k for k in known}
    return [by_fold.get(n.casefold()) for n in names]


def _named(spec: JobSpec, known: Sequence[str]) -> tuple[str, ...] | None:
    """The configured clusters `-M` names, in its order; None for no `-M` or `-M all`."""
    if not spec.clusters or _is_all(spec.clusters):
        return None
    return tuple(dict.fromkeys(c for c in _resolve(spec.clusters, known) if c is not None))


def home_of(spec: JobSpec, cfg: RoutingConfig) -> str:
    """The job's home: the site's home cluster, unless `-M` leaves it out (then the first
    cluster it names)."""
    named = _named(spec, cfg.clusters)
    if not named or cfg.home in named:
        return cfg.home
    return named[0]


def eligible(verdicts: Mapping[str, str | None]) -> tuple[str, ...]:
    """The clusters of an `eligibility` answer that may run the job, in its order."""
    return tuple(c for c, why in verdicts.items() if why is None)


def eligibility(
    job: Job,
    clusters: Mapping[str, ClusterState],
    cfg: RoutingConfig,
    def_mem_per_cpu_mb: int = 0,
) -> dict[str, str | None]:
    """For every configured cluster (home first): None when it may run the job, else the
    reason it was skipped ("burst: no node has gres gpu:a100")."""
    spec = job.spec
    req = node_request(spec)
    parts = spec.partitions or tuple(p for p in job.partition.split(",") if p)
    allowed, why_not = _routed(job, parts, cfg)
    out: dict[str, str | None] = {}
    for name in cfg.clusters:
        reason = why_not(name) if name not in allowed else None
        if reason is None:
            reason = _files(spec, name, cfg)
        if reason is None:
            state = clusters.get(name)
            if state is None:
                reason = "not described yet (never reached)"
            else:
                reason = _fits(spec, req, state, def_mem_per_cpu_mb)
        out[name] = None if reason is None else f"{name}: {reason}"
    return out


def _routed(
    job: Job, parts: Sequence[str], cfg: RoutingConfig
) -> tuple[set[str], Callable[[str], str]]:
    """The clusters `-M`, the routing rules and the burst policy allow, and a function
    giving the reason for any other."""
    spec = job.spec
    named = _named(spec, cfg.clusters)
    home = home_of(spec, cfg)
    if named is not None:
        allowed = set(named)
    elif spec.clusters:  # -M all
        allowed = set(cfg.clusters)
    else:
        allowed = set()
        for part in parts or (None,):
            allowed.update(cfg.clusters_for(part, job.qos))
    never = burst_of(spec) is Burst.NEVER
    if never:
        allowed &= {home}

    def why_not(name: str) -> str:
        if named is not None and name not in named:
            return f"not in -M {','.join(spec.clusters)}"
        if never and name != home:
            return f"--burst=never (home is {home})"
        return _rule_reason(name, parts, job.qos, cfg)

    return allowed, why_not


def _rule_reason(name: str, parts: Sequence[str], qos: str, cfg: RoutingConfig) -> str:
    for part in parts or (None,):
        rule = cfg.rule_for(part, qos)
        if rule is not None:
            what = f"partition {part}" if rule.partitions is not None else f"QOS {qos}"
            return f"routing sends {what} to {','.join(rule.clusters)} ({rule.where})"
    return f"not a burst target ([routing.cluster.{name}] burst = false)"


def _files(spec: JobSpec, name: str, cfg: RoutingConfig) -> str | None:
    """The image allow-list and the filesystem map."""
    settings = cfg.cluster(name)
    images = settings.images
    image = spec.container_image
    if images is not None and image and not any(fnmatchcase(image, p) for p in images):
        return f"image {image} not allowed"
    if settings.fs is None:
        return None
    if cfg.translate_dir(spec.workdir, name) is None:
        return f"working directory {spec.workdir} not reachable (no fs map)"
    for what, path in (("output", spec.stdout), ("error", spec.stderr), ("input", spec.stdin)):
        if not path or path == "/dev/null" or not path.startswith("/"):
            continue
        folder = path.rsplit("/", 1)[0] or "/"
        if cfg.translate_dir(folder, name) is None:
            return f"{what} directory {folder} not reachable (no fs map)"
    return None


# --- could the cluster's nodes ever hold the job ------------------------------------


def _fits(spec: JobSpec, req: NodeRequest, state: ClusterState, def_mem: int) -> str | None:
    if spec.partitions:
        parts = [p for p in (state.partition(n) for n in spec.partitions) if p is not None]
        if not parts:
            return f"no partition {','.join(spec.partitions)}"
    else:
        default = state.default_partition
        if default is None:
            return "no partitions"
        parts = [default]
    reason = _licenses(spec.licenses, state)
    if reason is not None:
        return reason
    first: str | None = None
    for part in parts:
        reason = _partition_fit(spec, req, state, part, def_mem)
        if reason is None and req.gpus_total:
            reason = _gpus_fit(req, state, part)
        alt = req.multi_gpu  # the GPUs over several nodes
        if (
            reason is not None
            and alt is not None
            and not _partition_fit(spec, alt, state, part, def_mem)
        ):
            reason = _gpus_fit(alt, state, part)
        if reason is None:
            return None
        first = first or reason
    return first


def _gpus_fit(req: NodeRequest, state: ClusterState, part: Partition) -> str | None:
    """Whether the partition's nodes, at most `max_nodes` of them, have `gpus_total` GPUs."""
    counts = sorted(
        (
            _gres_count(n, "gpu", req.gpu_type)
            for n, c in _view(state, part).groups
            for _ in range(min(c, req.max_nodes))
        ),
        reverse=True,
    )
    if sum(counts[: req.max_nodes]) >= req.gpus_total:
        return None
    return f"{req.gpus_total} GPUs need more than its nodes have in partition {part.name}"


_LICENSE = re.compile(r"([^:*]+)(?:[:*](\d+))?")


def _licenses(text: str | None, state: ClusterState) -> str | None:
    """`-L a:2,b` (all) or `a|b` (any): the cluster must have that many in total (a cluster
    that counts its own licences, as Slurm does, is not second-guessed)."""
    if not text or state.licenses is None:  # None: the cluster counts them itself
        return None
    have = dict(state.licenses)
    any_of = "|" in text
    missing: list[str] = []
    for item in re.split(r"[,|]", text):
        m = _LICENSE.fullmatch(item.strip())
        if m is None:
            continue  # sbatch checked the syntax
        count = int(m.group(2) or 1)
        if have.get(m.group(1), 0) >= count:
            if any_of:
                return None
        else:
            missing.append(item.strip())
    if not missing:
        return None
    return f"no license {'|'.join(missing) if any_of else missing[0]}"


def _gres_need(spec: JobSpec, req: NodeRequest) -> list[tuple[str, str | None, int]]:
    """Per-node generic resources: the GPUs of the request plus every other `--gres`."""
    need = [("gpu", req.gpu_type, req.gpus)] if req.gpus else []
    need.extend((g.name, g.type, g.count) for g in spec.gres if g.name != "gpu" and g.count)
    return need


def _gres_count(node: Node, name: str, gtype: str | None) -> int:
    if name == "gpu":
        return node.gpu_count(gtype)
    return sum(c for n, t, c in node.gres if n == name and (gtype is None or t == gtype))


def _gres_text(name: str, gtype: str | None, count: int | None = None) -> str:
    text = f"{name}:{gtype}" if gtype else name
    return f"{count} {text}" if count is not None else text


_Group = tuple[Node, int]  # one node shape (a representative) and how many nodes have it


class _PartitionView:
    """A partition's nodes grouped by shape, so that checking a job costs the number of
    distinct node shapes, not of nodes (clusters have thousands of nodes, few shapes)."""

    __slots__ = ("groups", "names")

    def __init__(self, state: ClusterState, part: Partition) -> None:
        wanted = set(part.nodes)
        members = [n for n in state.nodes if n.name in wanted]
        self.names = frozenset(n.name for n in members)
        first: dict[tuple[object, ...], Node] = {}
        counts: dict[tuple[object, ...], int] = {}
        for n in members:
            key = (n.cpus, n.memory_mb, n.features, n.gres, len(n.gpus))
            first.setdefault(key, n)
            counts[key] = counts.get(key, 0) + 1
        self.groups: tuple[_Group, ...] = tuple((first[k], c) for k, c in counts.items())


# Views of the last cluster descriptions seen, keyed by id (the entry holds the
# description, so the id is not reused while cached): a cycle asks about the same few.
_VIEWS: dict[int, tuple[ClusterState, dict[str, _PartitionView]]] = {}
_MAX_VIEWS = 32


def _view(state: ClusterState, part: Partition) -> _PartitionView:
    entry = _VIEWS.get(id(state))
    if entry is None or entry[0] is not state:
        if len(_VIEWS) >= _MAX_VIEWS:
            _VIEWS.clear()  # descriptions are replaced each cycle: the old ones are done
        entry = _VIEWS[id(state)] = (state, {})
    view = entry[1].get(part.name)
    if view is None:
        view = entry[1][part.name] = _PartitionView(state, part)
    return view


def _count(groups: Sequence[_Group]) -> int:
    return sum(c for _, c in groups)


def _partition_fit(
    spec: JobSpec, req: NodeRequest, state: ClusterState, part: Partition, def_mem: int
) -> str | None:
    """None when the partition's nodes, all empty, could hold the job; else the first
    requirement that rules it out."""
    where = f" in partition {part.name}"
    view = _view(state, part)
    if spec.nodelist:
        from gateway.compat.hostlist import expand

        absent = [h for h in expand(spec.nodelist) if h not in view.names]
        if absent:
            return f"no node {absent[0]}{where}"
    mem_default = part.def_mem_per_cpu_mb if part.def_mem_per_cpu_mb is not None else def_mem
    candidates: Sequence[_Group] = view.groups
    for name, gtype, count in _gres_need(spec, req):
        typed = [g for g in candidates if _gres_count(g[0], name, gtype) > 0]
        if not typed:
            return f"no node has gres {_gres_text(name, gtype)}{where}"
        candidates = [g for g in typed if _gres_count(g[0], name, gtype) >= count]
        if not candidates:
            return f"no node has {_gres_text(name, gtype, count)}{where}"
    if spec.constraint:
        candidates = [g for g in candidates if constraint_satisfied(spec.constraint, g[0].features)]
        if not candidates:
            return f"no node has features {spec.constraint}{where}"
    if req.spread:  # -n without -N: tasks spread over as many nodes as they need
        return _spread_fit(req, candidates, mem_default, where)
    big = [g for g in candidates if g[0].cpus >= req.cpus]
    if not big:
        return f"no node has {req.cpus} CPUs{where}"
    fit = [g for g in big if _memory(req, g[0], mem_default) <= g[0].memory_mb]
    if not fit:
        return f"no node has {_memory(req, big[0][0], mem_default)}M memory{where}"
    if _count(fit) < req.nodes:
        return f"{req.nodes} nodes needed, {_count(fit)} could hold one's share{where}"
    if part.max_nodes is not None and req.nodes > part.max_nodes:
        return f"{req.nodes} nodes needed, partition {part.name} allows {part.max_nodes}"
    return None


def _memory(req: NodeRequest, node: Node, def_mem: int) -> int:
    return req.memory_for(req.cpus, def_mem, node.memory_mb)


def _spread_fit(req: NodeRequest, groups: Sequence[_Group], def_mem: int, where: str) -> str | None:
    """Whether the nodes together hold `req.tasks` tasks of `req.cpus_per_task` CPUs (a
    node range: its `max_nodes` biggest nodes, at least MIN of them holding a task)."""
    caps = [
        (task_capacity(req, n.cpus, n.memory_mb, def_mem, n.gpu_count(req.gpu_type)), c)
        for n, c in groups
    ]
    if req.fixed_per_node:
        holding = sum(c for cap, c in caps if cap >= req.fixed_per_node)
        if holding >= req.nodes:
            return None
        return f"{req.nodes} nodes needed, {holding} could hold their tasks{where}"
    if req.wide:
        caps = sorted(((cap, c) for cap, c in caps if cap > 0), reverse=True)
        holding = sum(c for _, c in caps)
        if holding < req.nodes:
            return f"{req.nodes} nodes needed, {holding} could hold a task{where}"
        room, total = req.max_nodes, 0
        for cap, c in caps:
            total, room = total + cap * min(c, room), room - min(c, room)
    else:
        total = sum(cap * c for cap, c in caps)
    if total >= req.tasks:
        return None
    return f"{req.tasks} tasks of {req.cpus_per_task} CPUs need more than its nodes have{where}"
