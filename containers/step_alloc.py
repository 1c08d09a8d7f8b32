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

Pure and standard library only (shipped to Kubernetes job pods too): the job's holdings,
the running steps' holds and the request in, a `Grant` or a `Refused` out.
containers/step_book.py keeps the holds; containers/srun_claim.py asks.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Grant", "Hold", "JobShare", "Refused", "StepAsk", "megabytes", "pick_step"]


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


@dataclass(frozen=True, slots=True)
class JobShare:
    """What the job holds on each of its nodes (in the job's node order)."""

    nodes: tuple[str, ...]
    cpus: tuple[int, ...]
    mem_mb: tuple[int, ...] | None  # None: memory is not a consumable (CR_Core)
    job_mem_per_node: int | None = None  # the job's own --mem, a step's ceiling


@dataclass(frozen=True, slots=True)
class Hold:
    """What a running step holds on its nodes (zeros for --overlap)."""

    nodes: tuple[str, ...]
    cpus: tuple[int, ...]
    mem_mb: tuple[int, ...]


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


@dataclass
class _Blocked:
    job_nodes: int = 0
    job_cpus: int = 0
    mem_nodes: int = 0
    mem_cpus: int = 0


def _used(job: JobShare, running: Sequence[Hold]) -> tuple[list[int], list[int]]:
    index = {name: i for i, name in enumerate(job.nodes)}
    cpus, mem = [0] * len(job.nodes), [0] * len(job.nodes)
    for hold in running:
        for name, c, m in zip(hold.nodes, hold.cpus, hold.mem_mb, strict=False):
            if name in index:
                cpus[index[name]] += c
                mem[index[name]] += m
    return cpus, mem


def _usable(
    job: JobShare, ask: StepAsk, used: tuple[list[int], list[int]], blocked: _Blocked
) -> dict[int, int] | Refused:
    """Usable CPUs per job node index (nodes left out cannot take a task now)."""
    used_cpus, used_mem = used
    everyone = ask.node_count == len(job.nodes)  # all the job's nodes are needed
    usable: dict[int, int] = {}
    for i, cpus in enumerate(job.cpus):
        if not ask.overlap:
            blocked.job_cpus += used_cpus[i]
            if ask.whole and used_cpus[i]:
                blocked.job_nodes += 1
                continue
            cpus -= used_cpus[i]
            if cpus <= 0:
                blocked.job_nodes += 1
                continue
        if job.mem_mb is not None and (ask.mem_per_cpu or ask.mem_per_node):
            fail, avail, total = Refused.BUSY, cpus, cpus
            room = job.mem_mb[i] - (0 if ask.overlap else used_mem[i])
            if ask.mem_per_cpu:
                total = min(total, job.mem_mb[i] // ask.mem_per_cpu)
                if room // ask.mem_per_cpu < avail:
                    avail = cpus = room // ask.mem_per_cpu
                    fail = Refused.MEMORY
            elif ask.mem_per_node:
                if job.mem_mb[i] < ask.mem_per_node:
                    total = 0
                if room < ask.mem_per_node and avail > 0:
                    avail = cpus = 0
                    fail = Refused.MEMORY
            if avail // ask.cpus_per_task == 0:
                if everyone:
                    return fail if total // ask.cpus_per_task == 0 else Refused.BUSY
                blocked.mem_nodes += 1
                blocked.mem_cpus += total - avail
                continue
            blocked.mem_cpus += total - avail
        if cpus > 0:
            usable[i] = cpus
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
    for pool in ([i for i in avail if job.nodes[i] not in busy], avail):
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


def pick_step(job: JobShare, running: Sequence[Hold], ask: StepAsk) -> Grant | Refused:
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
        room = job.cpus[i] - (0 if ask.overlap else used[0][i])
        if tracked and ask.mem_per_cpu:  # step_layout_create counts held memory, even --overlap
            assert job.mem_mb is not None
            room = min(room, (job.mem_mb[i] - used[1][i]) // ask.mem_per_cpu)
        if room <= 0:
            return Refused.MEMORY if (ask.mem_per_cpu or ask.mem_per_node) else Refused.CONFIG
        need = tasks * ask.cpus_per_task  # (the layout is srun's block split, node by node)
        if not ask.overlap and need > room:
            return Refused.BUSY if need <= job.cpus[i] else Refused.TOO_MANY_CPUS
        cpus = job.cpus[i] if ask.whole else tasks * ask.cpus_per_task
        alloc += cpus
        mem = 0
        if tracked and ask.mem_per_cpu:
            mem = ask.mem_per_cpu * (job.cpus[i] if ask.whole else cpus)
        elif tracked and ask.mem_per_node:
            mem = ask.mem_per_node
        alloc_mem += mem or (job.mem_mb[i] if job.mem_mb is not None else 0)
        cpus_held.append(0 if ask.overlap else cpus)
        mem_held.append(0 if ask.overlap else mem)
    hold = Hold(tuple(job.nodes[i] for i in picked), tuple(cpus_held), tuple(mem_held))
    return Grant(hold, alloc, alloc_mem)
