"""What a job needs from each node it runs on, derived from its JobSpec as Slurm derives it."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from gateway.compat.hostlist import HostlistError, expand
from gateway.model.jobspec import JobSpec, Sharing

__all__ = [
    "NodeRequest",
    "constraint_satisfied",
    "node_request",
    "on_partitions",
    "spec_request",
    "task_capacity",
]


@dataclass(frozen=True, slots=True)
class NodeRequest:
    """A gang: `nodes` nodes, each giving `cpus`, `memory_mb` (0: whole node) and `gpus`."""

    nodes: int
    max_nodes: int
    tasks: int
    tasks_per_node: tuple[int, ...]
    cpus: int  # per node
    memory_mb: int | None  # per node; None: whole node (--mem=0); computed per cpu otherwise
    mem_per_cpu_mb: int | None
    gpus: int  # per node
    gpu_type: str | None
    gpu_memory_mb: int | None
    exclusive: bool
    constraint: str | None
    # -w: nodes the allocation must include; slurmctld adds others when the request needs
    # more (`-w node01 -N2`, `-w node01 -n3` on 2-CPU nodes: node[01-02])
    nodelist: tuple[str, ...]
    exclude: frozenset[str]
    partitions: tuple[str, ...]
    time_limit: int | None
    switches: int | None
    switches_wait_s: int | None
    # -n without -N: as many nodes as the tasks need, chosen when placed (Slurm's default);
    # `cpus` is then one task's, and `tasks_per_node` is decided by the placement
    spread: bool = False
    cpus_per_task: int = 1
    # -N MIN-MAX with a spread: one task on each of up to `max_nodes` nodes first, then the
    # rest as each can hold them (`-N1-2 -n3`: 2,1); `nodes` is MIN
    wide: bool = False
    # -N MIN-MAX without -n: each node takes this many tasks (0: not such a job); `tasks`
    # is then MAX's, and the job has as many as the nodes it gets
    fixed_per_node: int = 0
    # a spread with --gpus-per-task: each task's GPUs (`gpus` is then one task's too), so
    # a node takes as many tasks as its GPUs hold (`-n4 --gpus-per-task=1` on 2- and
    # 4-GPU nodes of 2 CPUs: two on each, as on the test cluster)
    gpus_per_task: int = 0
    tmp_mb: int = 0  # --tmp: each node's TmpDisk at least (not consumed, as in Slurm)
    # --gpus=G for the job: the GPUs over several nodes when no one node holds them
    # (`multi_gpu`, tried when this request finds no node); `gpus` is then 1, the least
    # a node of the job gives, and `gpus_total` G
    gpus_total: int = 0
    multi_gpu: NodeRequest | None = None

    @property
    def gpus_vary(self) -> bool:
        """Whether the GPUs of a node of the job are its placement's own, not `gpus`
        (per task, or a job-wide count split over the nodes)."""
        return bool(self.gpus_per_task or self.gpus_total or self.multi_gpu)

    def memory_for(self, cpus: int, def_mem_per_cpu: int, node_mem: int) -> int:
        """Memory (MiB) this job takes on one node with `cpus` cpus there."""
        if self.memory_mb is None:
            return node_mem
        if self.memory_mb > 0:
            return self.memory_mb
        per_cpu = self.mem_per_cpu_mb if self.mem_per_cpu_mb is not None else def_mem_per_cpu
        return per_cpu * cpus


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _split(tasks: int, nodes: int) -> tuple[int, ...]:
    """Block distribution of tasks over nodes (`SLURM_TASKS_PER_NODE`)."""
    base, extra = divmod(tasks, nodes)
    return tuple(base + (1 if i < extra else 0) for i in range(nodes))


def _gpus_per_node(spec: JobSpec, nodes: int, tasks_per_node: int) -> tuple[int, str | None]:
    count, gtype = 0, None
    for item in spec.gres:
        if item.name == "gpu":
            count, gtype = count + item.count, item.type or gtype
    for item in spec.gpus_per_node:
        count, gtype = count + item.count, item.type or gtype
    for item in spec.gpus:
        count, gtype = count + _ceil_div(item.count, nodes), item.type or gtype
    for item in spec.gpus_per_task:
        count, gtype = count + item.count * tasks_per_node, item.type or gtype
    return count, gtype


def node_request(spec: JobSpec, nodelist: tuple[str, ...] = ()) -> NodeRequest:
    """The per-node request of a job (the first component of a hetjob)."""
    nodes = max(spec.nodes_min or 1, len(nodelist), 1)
    open_count = spec.nodes_min is None or (bool(nodelist) and spec.nodes_max is None)
    if (open_count or spec.wide_range) and spec.ntasks and spec.ntasks_per_node:
        # `-n 3 --ntasks-per-node=1` without -N (or with -w only): ceil(3/1) nodes
        nodes = max(nodes, _ceil_div(spec.ntasks, spec.ntasks_per_node))
    max_nodes = max(spec.nodes_max or nodes, nodes)
    if spec.ntasks is not None:
        tasks = spec.ntasks
    elif spec.ntasks_per_node is not None:
        tasks = nodes * spec.ntasks_per_node
    else:
        tasks = nodes
    tasks = max(tasks, 1)
    if spec.nodes_min is None and spec.ntasks and spec.ntasks_per_node:
        # slurmctld gives every node its --ntasks-per-node (`-n3 --ntasks-per-node=2`: two
        # nodes of two tasks, NumTasks=4, though SLURM_NTASKS stays 3)
        tasks = max(tasks, nodes * spec.ntasks_per_node)
    nodes = min(nodes, tasks) if spec.nodes_min is None else nodes
    per_node = _split(tasks, nodes)
    cpt = spec.cpus_per_task or 1
    # -O: each node gives one task's CPUs, whatever its tasks (the test cluster: `-n5 -O`
    # on one 2-CPU node, cpu=1; `-N2 -n6 -O` 3 tasks on each of two nodes, cpu=2)
    cpus = cpt if spec.overcommit else max(per_node) * cpt
    if spec.mincpus:
        cpus = max(cpus, spec.mincpus)
    gpus, gpu_type = _gpus_per_node(spec, nodes, max(per_node))
    if spec.cpus_per_gpu and gpus:
        cpus = max(cpus, spec.cpus_per_gpu * gpus)
    spread = spec.spreads_tasks
    spread_job = spread and spec.spread_job and not spec.wide_range  # --spread-job: 1-n
    wide = spread and (spec.wide_range or spread_job)
    per_node_range = _per_node_range(spec)
    if per_node_range:  # -N MIN-MAX without -n: tasks per node fixed, the count found
        spread = wide = True
        tasks, per_node = max_nodes * per_node_range, (per_node_range,) * max_nodes
    gpt = _spread_gpus_per_task(spec) if spread else 0
    if spread:
        cpus, max_nodes = cpt, min(max_nodes, tasks) if wide and not spread_job else tasks
        gpus = gpt or gpus
    memory: int | None
    mem_per_cpu = spec.mem_per_cpu_mb
    if spec.mem_per_node_mb is not None:
        memory = None if spec.mem_per_node_mb == 0 else spec.mem_per_node_mb
    elif spec.mem_per_gpu_mb is not None and gpus:
        memory = spec.mem_per_gpu_mb * gpus
    else:
        memory = 0  # per cpu (request's or the site's default)
    req = NodeRequest(
        nodes=nodes,
        max_nodes=max_nodes,
        tasks=tasks,
        tasks_per_node=per_node,
        cpus=cpus,
        memory_mb=memory,
        mem_per_cpu_mb=mem_per_cpu,
        gpus=gpus,
        gpu_type=gpu_type,
        gpu_memory_mb=spec.gpu_memory_mb,
        exclusive=spec.sharing is Sharing.EXCLUSIVE,
        constraint=spec.constraint,
        nodelist=nodelist,
        exclude=_excluded(spec.exclude),
        partitions=spec.partitions,
        time_limit=spec.time_limit,
        switches=spec.switches,
        switches_wait_s=spec.switches_wait_s,
        spread=spread,
        cpus_per_task=cpt,
        wide=wide,
        fixed_per_node=per_node_range,
        gpus_per_task=gpt,
        tmp_mb=spec.tmp_mb or 0,
    )
    return _with_multi_gpu(spec, req)


def _with_multi_gpu(spec: JobSpec, req: NodeRequest) -> NodeRequest:
    """`--gpus=G` alone, without -w, and not spread: the request, and as its `multi_gpu`
    the same job over up to G nodes of at least one GPU each, its tasks (one a node
    without -n) split as a node range splits them (the test cluster runs `--gpus=6` on
    node03 with 2 and node04 with 4, `--gpus=6 -n4` 2,2, where no node has 6). With -N N
    the request itself is such a layout over N nodes (`-N2 --gpus=3`: 2 + 1, not 2 + 2)."""
    total = sum(item.count for item in spec.gpus)
    if total < 2 or req.spread or spec.nodelist or spec.wide_range:
        return req
    if spec.gpus_per_node or spec.gpus_per_task or any(g.name == "gpu" for g in spec.gres):
        return req
    if spec.cpus_per_gpu or spec.mem_per_gpu_mb is not None:
        return req  # (CPUs and memory by GPU: each node as asked, as before)
    fixed = spec.nodes_min is not None  # -N N: always N nodes, the GPUs split over them
    per_node = 0 if spec.ntasks is not None else (spec.ntasks_per_node or 1)
    most = req.max_nodes if fixed else min(total, spec.ntasks or total)
    layout = replace(
        req,
        max_nodes=most,
        tasks=req.tasks if fixed or not per_node else most * per_node,
        tasks_per_node=req.tasks_per_node if fixed or not per_node else (per_node,) * most,
        cpus=req.cpus_per_task,
        gpus=1,
        spread=True,
        wide=True,
        fixed_per_node=per_node,
        gpus_total=total,
    )
    return layout if fixed else replace(req, multi_gpu=layout)


def _spread_gpus_per_task(spec: JobSpec) -> int:
    """One task's GPUs when --gpus-per-task is the job's only GPU request (0 otherwise)."""
    if spec.gpus or spec.gpus_per_node or any(g.name == "gpu" for g in spec.gres):
        return 0
    return sum(item.count for item in spec.gpus_per_task)


def _excluded(text: str | None) -> frozenset[str]:
    """`-x`/ExcNodeList: nodes the job never runs on (a list slurmctld would have refused
    at submission excludes nothing)."""
    if not text:
        return frozenset()
    try:
        return frozenset(expand(text))
    except HostlistError:
        return frozenset()


def _per_node_range(spec: JobSpec) -> int:
    """Tasks per node of `-N MIN-MAX` without a task count (0: not such a job): slurmctld
    gives it as many free nodes as it may up to MAX (`-N2-4` on idle nodes: four), each
    with `--ntasks-per-node` tasks (one by default)."""
    if not spec.wide_range or spec.ntasks is not None:
        return 0
    if spec.gpus or spec.gpus_per_task or (spec.mincpus or 0) > (spec.cpus_per_task or 1):
        return 0
    return spec.ntasks_per_node or 1


# Memos keyed by object identity, holding the object so that its id cannot be reused while
# the entry lives: a cycle derives the request of every job it tests, every cycle, and a
# replay runs tens of thousands of cycles over the same job records; specs are immutable.
_MEMO_SIZE = 1 << 18
_BY_SPEC: dict[int, tuple[JobSpec, NodeRequest]] = {}
_BY_PARTS: dict[tuple[int, tuple[str, ...]], tuple[NodeRequest, NodeRequest]] = {}


def spec_request(spec: JobSpec) -> NodeRequest:
    """`node_request` of a spec with its own `-w` list expanded, kept per spec object."""
    hit = _BY_SPEC.get(id(spec))
    if hit is not None and hit[0] is spec:
        return hit[1]
    nodelist = tuple(expand(spec.nodelist)) if spec.nodelist else ()
    req = node_request(spec, nodelist)
    if len(_BY_SPEC) >= _MEMO_SIZE:
        _BY_SPEC.clear()
    _BY_SPEC[id(spec)] = (spec, req)
    return req


def on_partitions(req: NodeRequest, partitions: tuple[str, ...]) -> NodeRequest:
    """`req` limited to `partitions` (one target's, or every target's), kept per request
    object: the same shape is asked again for every job, target and search."""
    key = (id(req), partitions)
    hit = _BY_PARTS.get(key)
    if hit is not None and hit[0] is req:
        return hit[1]
    one = req
    if req.partitions != partitions:
        alt = req.multi_gpu and replace(req.multi_gpu, partitions=partitions)
        one = replace(req, partitions=partitions, multi_gpu=alt)
    if len(_BY_PARTS) >= _MEMO_SIZE:
        _BY_PARTS.clear()
    _BY_PARTS[key] = (req, one)
    return one


def task_capacity(
    req: NodeRequest, cpus: int, memory_mb: int, def_mem_per_cpu: int, gpus: int = 0
) -> int:
    """How many of a spread request's tasks fit in `cpus`, `memory_mb` (and, with GPUs per
    task, `gpus`) of one node."""
    by_cpus = cpus // req.cpus_per_task
    if req.gpus_per_task:
        by_cpus = min(by_cpus, gpus // req.gpus_per_task)
    if req.memory_mb is None or req.memory_mb > 0:  # per node: it does not grow with tasks
        return by_cpus if req.memory_for(req.cpus, def_mem_per_cpu, memory_mb) <= memory_mb else 0
    per_task = req.memory_for(req.cpus_per_task, def_mem_per_cpu, memory_mb)
    return by_cpus if per_task == 0 else min(by_cpus, memory_mb // per_task)


def constraint_satisfied(expr: str | None, features: tuple[str, ...]) -> bool:
    """Whether a node's features satisfy `-C` (`a&b`, `a,b`, `a|b`; counts and brackets
    are read as plain AND/OR over the node's own features)."""
    if not expr:
        return True
    have = set(features)
    cleaned = re.sub(r"\*\d+", "", expr).replace("[", "").replace("]", "")
    for alternative in cleaned.split("|"):
        needed = [f for f in re.split(r"[&,]", alternative) if f]
        if all(f in have for f in needed):
            return True
    return False
