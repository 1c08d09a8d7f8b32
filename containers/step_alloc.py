"""Which of a job's nodes a new step gets, or why it must wait or fail: slurmctld 22.05's
step allocation (step_mgr.c `_pick_step_nodes`, `step_layout_create`, `_step_alloc_lps`)
for the cases a batch script's srun reaches.

A step holds CPUs and memory of the job on its nodes while it runs. Without `--exact`
(implied by `--exclusive` and by srun's own `-c`) a step takes every CPU the job has on
each of its nodes, so two plain `srun -n1 ... &` in a one-node job run one after the
other, the second told "step creation temporarily disabled" (checked on the test
cluster). A step without a memory request takes the job's memory without holding it;
with one (srun reads SLURM_MEM_PER_CPU/NODE from the batch environment) it holds it.
`--overlap` holds nothing and is not held back by CPUs, but is still refused memory that
other steps hold (22.05's step_layout_create). A step that could never fit is refused at
once; one that fits once others end is BUSY (srun retries).

GPUs (gres_ctld.c, gres.c `_step_test`): a step holds its GPUs, the lowest of the job's on
each node that no other step holds. A step with no GPU request takes the job's own (srun
copies it: `_copy_job_tres_to_step`), so it waits for steps holding any of them;
`--gres=none` takes none. `--overlap` neither holds GPUs nor waits for them. A request
the job's GPUs can never meet is "Invalid generic resource (gres) specification".

Pure and standard library only (shipped to Kubernetes job pods too): the job's holdings,
the running steps' holds and the request in, a `Grant`, a `Refused`, or a `Spent` (refused
once slurmctld would have numbered the step) out.
containers/step_book.py keeps the holds; containers/srun_claim.py asks.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "GpuAsk",
    "Grant",
    "Hold",
    "JobShare",
    "Refused",
    "Spent",
    "StepAsk",
    "megabytes",
    "pick_step",
]


# gateway.compat.quantity.str_to_mbytes's sizes, again here because job pods have only
# the standard library (tests/unit/test_step_alloc.py checks the two agree)
_MEGABYTES = re.compile(r"\s*\+?(\d+)(?:([KMGT])[Bb]?)?", re.IGNORECASE)
_SCALE = {"K": -1, "": 1, "M": 1, "G": 1 << 10, "T": 1 << 20}


def megabytes(text: str) -> int | None:
    """str_to_mbytes: `3000`, `500K` (rounded up), `2G`, `4GB`... in MB; None if not a size."""
    match = _MEGABYTES.fullmatch(text)
    if match is None:
        return None
    number, scale = int(match.group(1)), _SCALE[(match.group(2) or "").upper()]
    return -(-number // 1024) if scale < 0 else number * scale


class Refused(enum.Enum):
    """slurmctld's answers that keep a step from starting (slurm_strerror's text)."""

    BUSY = "Requested nodes are busy"
    MEMORY = "Memory required by task is not available"
    TOO_MANY_CPUS = "More processors requested than permitted"
    CONFIG = "Requested node configuration is not available"
    INVALID_GRES = "Invalid generic resource (gres) specification"


@dataclass(frozen=True, slots=True)
class Spent:
    """A refusal slurmctld gives after numbering the step (step_layout_create's memory
    check): the step id is used up although no step runs (sacct never shows it)."""

    reason: Refused


@dataclass(frozen=True, slots=True)
class JobShare:
    """What the job holds on each of its nodes (in the job's node order)."""

    nodes: tuple[str, ...]
    cpus: tuple[int, ...]
    mem_mb: tuple[int, ...] | None  # None: memory is not a consumable (CR_Core)
    job_mem_per_node: int | None = None  # the job's own --mem, a step's ceiling
    gpus: tuple[tuple[int, ...], ...] = ()  # the job's GPU indices on each node; () unknown


@dataclass(frozen=True, slots=True)
class Hold:
    """What a running step holds on its nodes (zeros for --overlap)."""

    nodes: tuple[str, ...]
    cpus: tuple[int, ...]
    mem_mb: tuple[int, ...]
    gpus: tuple[tuple[int, ...], ...] = ()  # GPU indices held on each node


@dataclass(frozen=True, slots=True)
class GpuAsk:
    """A step's GPUs (srun's --gres/--gpus-per-node, --gpus-per-task, --gpus): the first of
    per node, per task, per step that is set counts, as gres_ctld.c reads them."""

    per_node: int = 0
    per_task: int = 0
    per_step: int = 0

    def least(self) -> int:
        """The fewest GPUs a node of the step needs (`_step_test`'s min_gres)."""
        return max(self.per_node, self.per_task, 1)


@dataclass(frozen=True, slots=True)
class StepAsk:
    """The step srun asks for: node count (min = max), tasks per node in order, and how."""

    tasks_per_node: tuple[int, ...]
    cpus_per_task: int
    cpu_count: int  # srun's: ntasks, or ntasks * cpus-per-task with -c
    nodelist: tuple[str, ...] = ()
    whole: bool = True  # not --exact
    overlap: bool = False
    mem_per_cpu: int | None = None
    mem_per_node: int | None = None
    gpu: GpuAsk | None = None  # None: no GPUs
    relative: int | None = None  # -r: the step's nodes from the job's node N on
    overcommit: bool = False  # -O: no CPU is counted (slurmctld's cpu_count = 0)

    @property
    def node_count(self) -> int:
        """The step's node count (srun asks min = max)."""
        return len(self.tasks_per_node)


@dataclass(frozen=True, slots=True)
class Grant:
    """The step's nodes and what it holds on them; `alloc_cpus` is sacct's AllocCPUS and
    `alloc_mem_mb` the memory of its TRES (what it may use, held or not)."""

    hold: Hold
    alloc_cpus: int
    alloc_mem_mb: int = 0
    gpus: tuple[tuple[int, ...], ...] = ()  # the step's GPUs on each node (held or not)


@dataclass
class _Blocked:
    job_nodes: int = 0
    job_cpus: int = 0
    mem_nodes: int = 0
    mem_cpus: int = 0


@dataclass
class _Used:
    cpus: list[int]
    mem: list[int]
    gpus: list[set[int]]


def _used(job: JobShare, running: Sequence[Hold]) -> _Used:
    index = {name: i for i, name in enumerate(job.nodes)}
    n = len(job.nodes)
    used = _Used([0] * n, [0] * n, [set() for _ in range(n)])
    for hold in running:
        for k, name in enumerate(hold.nodes):
            i = index.get(name)
            if i is None:
                continue
            used.cpus[i] += hold.cpus[k] if k < len(hold.cpus) else 0
            used.mem[i] += hold.mem_mb[k] if k < len(hold.mem_mb) else 0
            if k < len(hold.gpus):
                used.gpus[i].update(hold.gpus[k])
    return used


@dataclass
class _GpuTally:
    """`_step_test`'s running totals over the nodes seen: GPUs counted ignoring the other
    steps (gross) and counting them (total), and the nodes the step may still take."""

    gross: int = 0
    total: int = 0
    nodes_left: int = 0


def _gpu_asked(job: JobShare, ask: StepAsk) -> GpuAsk | None:
    """The step's GPU request when both it and the job have GPUs."""
    return ask.gpu if ask.gpu is not None and ask.gpu != GpuAsk() and job.gpus else None


def _gpu_cpus(gpu: GpuAsk, have: int, cpt: int, last: bool, so_far: int) -> int | None:
    """The CPUs a node can give the step for its GPUs (None: no limit), `_step_test`."""
    if have == 0:
        return 0
    least = gpu.least()
    if gpu.per_step and gpu.per_step > so_far and last:
        least = max(least, gpu.per_step - so_far)
    if least > have:
        return 0
    return -(-have // gpu.per_task) * cpt if gpu.per_task else None


def _usable(
    job: JobShare, ask: StepAsk, used: _Used, blocked: _Blocked
) -> dict[int, int] | Refused:
    """Usable CPUs per job node index (nodes left out cannot take a task now)."""
    everyone = ask.node_count == len(job.nodes)  # all the job's nodes are needed
    gpu = _gpu_asked(job, ask)
    tally = _GpuTally(nodes_left=ask.node_count)
    gres_invalid = 0
    usable: dict[int, int] = {}
    for i, cpus in enumerate(job.cpus):
        if not ask.overlap:
            blocked.job_cpus += used.cpus[i]
            if ask.whole and used.cpus[i]:
                blocked.job_nodes += 1
                continue
            cpus -= used.cpus[i]
            if cpus <= 0:
                blocked.job_nodes += 1
                continue
        fail, avail, total = Refused.BUSY, cpus, cpus
        checked = False
        if job.mem_mb is not None and (ask.mem_per_cpu or ask.mem_per_node):
            checked = True
            room = job.mem_mb[i] - (0 if ask.overlap else used.mem[i])
            if ask.mem_per_cpu:
                total = min(total, job.mem_mb[i] // ask.mem_per_cpu)
                if room // ask.mem_per_cpu < avail:
                    avail = room // ask.mem_per_cpu
                    fail = Refused.MEMORY
            elif ask.mem_per_node:
                if job.mem_mb[i] < ask.mem_per_node:
                    total = 0
                if room < ask.mem_per_node and avail > 0:
                    avail = 0
                    fail = Refused.MEMORY
        if gpu is not None:
            checked = True
            mine = job.gpus[i] if i < len(job.gpus) else ()
            last = tally.nodes_left == 1
            gross = _gpu_cpus(gpu, len(mine), ask.cpus_per_task, last, tally.gross)
            if gross != 0:
                tally.gross += len(mine)
            total = total if gross is None else min(total, gross)
            cap = gross
            if not ask.overlap:
                free = len([g for g in mine if g not in used.gpus[i]])
                cap = _gpu_cpus(gpu, free, ask.cpus_per_task, last, tally.total)
                if cap != 0:
                    tally.total += free
            if cap is not None and cap < avail:
                avail, fail = cap, Refused.INVALID_GRES
                if total == 0:
                    gres_invalid += 1
        if checked:
            if avail // ask.cpus_per_task == 0:
                if everyone:
                    return fail if total // ask.cpus_per_task == 0 else Refused.BUSY
                blocked.mem_nodes += 1
                blocked.mem_cpus += total - avail
                continue
            blocked.mem_cpus += total - avail
            tally.nodes_left -= 1
        if avail > 0:
            usable[i] = avail
    if gres_invalid and gres_invalid >= ask.node_count:
        return Refused.INVALID_GRES
    return usable


def _pick_by_cpus(nodes: list[int], count: int, cpus: int, usable: dict[int, int]) -> list[int]:
    """_pick_step_nodes_cpus: `count` nodes with `cpus` CPUs among them ([] if none)."""
    if count <= 0 or len(nodes) < count:
        return []
    target = -(-cpus // count)
    if cpus <= count or target > 1024:
        return nodes[:count]
    picked: list[int] = []
    short: dict[int, int] = {}
    left_nodes, left_cpus = count, cpus
    for i in nodes:
        if usable[i] < target:
            short[usable[i]] = short.get(usable[i], 0) + 1
            continue
        picked.append(i)
        left_cpus -= usable[i]
        left_nodes -= 1
        if left_cpus <= 0 and left_nodes <= 0:
            return picked
        if left_nodes == 0:
            return []
    nodes_left, cpus_left = left_nodes, left_cpus
    for size in range(target - 1, 0, -1):
        take = min(short.get(size, 0), nodes_left)
        short[size] = take
        nodes_left -= take
        cpus_left -= take * size
    if cpus_left > 0 or nodes_left > 0:
        return []
    for i in nodes:
        if usable[i] >= target or not short.get(usable[i]):
            continue
        short[usable[i]] -= 1
        picked.append(i)
        left_cpus -= usable[i]
        left_nodes -= 1
        if left_cpus <= 0 and left_nodes <= 0:
            return picked
        if left_nodes == 0:
            break
    return []


def _short_of_nodes(ask: StepAsk, have: int, blocked: _Blocked) -> Refused:
    if ask.node_count <= have and blocked.mem_cpus == 0 and blocked.job_cpus == 0:
        return Refused.TOO_MANY_CPUS
    if blocked.mem_cpus > 0 or ask.node_count <= have + blocked.mem_nodes + blocked.job_nodes:
        return Refused.BUSY
    return Refused.CONFIG


def _pick_nodes(
    job: JobShare, ask: StepAsk, running: Sequence[Hold], usable: dict[int, int], blocked: _Blocked
) -> list[int] | Refused:
    avail = sorted(usable)
    if ask.relative is not None:  # the first nodes are not the step's; no idle-first pick
        avail = [i for i in avail if i >= ask.relative]
    picked: list[int] = []
    if ask.nodelist:
        wanted = [i for i, name in enumerate(job.nodes) if name in ask.nodelist]
        if any(i not in usable for i in wanted):
            if blocked.job_nodes:
                return Refused.BUSY
            return Refused.MEMORY if blocked.mem_nodes == 0 else Refused.BUSY
        if len(wanted) > ask.node_count:
            avail = wanted
        else:
            picked = wanted
            avail = [i for i in avail if i not in wanted]
    if len(avail) + len(picked) < ask.node_count:
        return Refused.BUSY
    busy = {name for hold in running for name in hold.nodes}
    needed = ask.node_count - len(picked)
    idle = [i for i in avail if job.nodes[i] not in busy]
    for pool in [avail] if ask.relative is not None else [idle, avail]:
        if needed <= 0 or len(pool) < needed:
            continue
        rest = ask.cpu_count
        for i in picked:
            rest = 0 if usable[i] >= rest else rest - usable[i]
        chosen = _pick_by_cpus(pool, min(needed, len(pool)), rest, usable)
        if chosen:
            picked += chosen
            avail = [i for i in avail if i not in chosen]
            needed = 0
        elif pool is avail:
            return _short_of_nodes(ask, len(avail) + len(picked), blocked)
    if needed > 0:
        return _short_of_nodes(ask, len(picked), blocked)
    have = sum(usable[i] for i in picked)
    if ask.cpu_count > have:
        if ask.cpu_count <= have + blocked.mem_cpus + blocked.job_cpus:
            return Refused.BUSY
        return Refused.CONFIG
    return sorted(picked)


def pick_step(job: JobShare, running: Sequence[Hold], ask: StepAsk) -> Grant | Refused | Spent:
    """The step's nodes and holds, or why it cannot start (BUSY: it can once steps end)."""
    tracked = job.mem_mb is not None
    if (
        tracked
        and ask.mem_per_node
        and job.job_mem_per_node
        and ask.mem_per_node > job.job_mem_per_node
    ):
        return Refused.MEMORY
    used = _used(job, running)
    blocked = _Blocked()
    usable = _usable(job, ask, used, blocked)
    if isinstance(usable, Refused):
        return usable
    picked = _pick_nodes(job, ask, running, usable, blocked)
    if isinstance(picked, Refused):
        return picked
    cpus_held: list[int] = []
    mem_held: list[int] = []
    alloc = alloc_mem = 0
    for i, tasks in zip(picked, ask.tasks_per_node, strict=True):
        room = job.cpus[i] - (0 if ask.overlap else used.cpus[i])
        if tracked and ask.mem_per_cpu:  # step_layout_create counts held memory, even --overlap
            assert job.mem_mb is not None
            room = min(room, (job.mem_mb[i] - used.mem[i]) // ask.mem_per_cpu)
        if room <= 0:  # (slurmctld has numbered the step by now)
            return Spent(
                Refused.MEMORY if (ask.mem_per_cpu or ask.mem_per_node) else Refused.CONFIG
            )
        need = tasks * ask.cpus_per_task  # (the layout is srun's block split, node by node)
        if ask.overcommit:
            need = min(need, room)
        if not ask.overlap and need > room:
            return Refused.BUSY if need <= job.cpus[i] else Refused.TOO_MANY_CPUS
        cpus = job.cpus[i] if ask.whole else need
        alloc += cpus
        mem = 0
        if tracked and ask.mem_per_cpu:
            mem = ask.mem_per_cpu * (job.cpus[i] if ask.whole else cpus)
        elif tracked and ask.mem_per_node:
            mem = ask.mem_per_node
        alloc_mem += mem or (job.mem_mb[i] if job.mem_mb is not None else 0)
        cpus_held.append(0 if ask.overlap else cpus)
        mem_held.append(0 if ask.overlap else mem)
    gpus = _pick_gpus(job, ask, picked, used)
    if gpus is None:
        return Refused.BUSY
    nodes = tuple(job.nodes[i] for i in picked)
    hold = Hold(nodes, tuple(cpus_held), tuple(mem_held), () if ask.overlap else gpus)
    return Grant(hold, alloc, alloc_mem, gpus)


def _pick_gpus(
    job: JobShare, ask: StepAsk, picked: list[int], used: _Used
) -> tuple[tuple[int, ...], ...] | None:
    """The step's GPUs on each picked node, gres_ctld.c's `_step_alloc`: the lowest the
    job has there and no other step holds (any of the job's, for --overlap); a per-step
    count leaves one for each node still to come. None if they are not all there."""
    gpu = _gpu_asked(job, ask)
    if gpu is None:
        return ()
    out: list[tuple[int, ...]] = []
    got = 0
    for k, (i, tasks) in enumerate(zip(picked, ask.tasks_per_node, strict=True)):
        mine = job.gpus[i] if i < len(job.gpus) else ()
        free = mine if ask.overlap else tuple(g for g in mine if g not in used.gpus[i])
        rest = len(picked) - k
        most = None
        if gpu.per_node:
            need = gpu.per_node
        elif gpu.per_task:
            need = gpu.per_task * tasks
        elif rest == 1:
            need = gpu.per_step - got
        else:
            need, most = 1, max(gpu.per_step - got - (rest - 1), 1)
        take = min(len(free), most if most is not None and not ask.overlap else need)
        if take < need:
            return None
        out.append(free[:take])
        got += take
    return tuple(out)
