"""Job priority as Slurm 22.05 computes it: priority/basic (FIFO) and priority/multifactor.

Ported from `set_priority_factors` and `_get_priority_internal` in
`src/plugins/priority/multifactor/priority_multifactor.c`:

    priority = site + Wage*age + Wassoc*assoc + Wfs*fairshare + Wjs*jobsize
               + Wpart*partition + Wqos*qos + sum(Wtres_i * tres_i) - nice

each factor in [0, 1] (unless a NO_NORMAL_* flag), the sum floored at 1 (0 is reserved for
held jobs) and cut at 2^32-1. This module is the one place where Caldera computes a job's
priority: the submit path, release and the scheduling cycle all call it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = [
    "BASIC_BASE",
    "BasicCounter",
    "Factors",
    "JobInputs",
    "PriorityConfig",
    "SystemInputs",
    "age_factor",
    "factors",
    "job_size_factor",
    "multifactor_priority",
    "reniced",
    "weighted_sum",
]

BASIC_BASE = 0xFFFF0000  # priority/basic: TOP_PRIORITY, the count starts one below it
_MAX = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class PriorityConfig:
    """slurm.conf's Priority* settings (22.05 defaults). Weights are unsigned 32-bit."""

    type: str = "priority/basic"  # or priority/multifactor
    weight_age: int = 0
    weight_assoc: int = 0
    weight_fairshare: int = 0
    weight_jobsize: int = 0
    weight_partition: int = 0
    weight_qos: int = 0
    weight_tres: Mapping[str, float] = field(default_factory=dict)  # e.g. {"cpu": 100.0}
    max_age_s: int = 7 * 86400  # PriorityMaxAge=7-0
    decay_half_life_s: int = 7 * 86400  # PriorityDecayHalfLife=7-0
    calc_period_s: int = 300  # PriorityCalcPeriod=5
    favor_small: bool = False
    fair_tree: bool = True  # PriorityFlags=NO_FAIR_TREE clears it
    small_relative_to_time: bool = False
    no_normal_assoc: bool = False
    no_normal_part: bool = False
    no_normal_qos: bool = False
    no_normal_tres: bool = False
    dampening: int = 1  # FairShareDampeningFactor

    @property
    def multifactor(self) -> bool:
        """Whether PriorityType=priority/multifactor."""
        return self.type == "priority/multifactor"


@dataclass(frozen=True, slots=True)
class SystemInputs:
    """What the factors are normalised against (slurmctld's globals)."""

    node_count: int
    cluster_cpus: int
    max_partition_priority: int = 0  # highest PriorityJobFactor of any partition
    max_qos_priority: int = 0
    max_assoc_priority: int = 0


@dataclass(frozen=True, slots=True)
class JobInputs:
    """One pending job as the factors see it."""

    job_id: int
    accrue_time: float | None  # None: not accruing age (held, dependent...)
    min_nodes: int
    cpus: int
    time_limit_min: int | None  # None: NO_VAL (the partition's MaxTime is used)
    partition_max_time_min: int
    fs_factor: float
    partition_priority: int = 0  # the partition's PriorityJobFactor
    qos_priority: int = 0
    assoc_priority: int = 0
    nice: int = 0
    site: int = 0
    tres: Mapping[str, float] = field(default_factory=dict)  # job's TRES count / partition's


class Factors(NamedTuple):
    """A job's weighted factors, as `sprio -l` prints them, and its priority (a named
    tuple: 10,000 of them are made per refresh, and a frozen dataclass is slow to build)."""

    job_id: int
    priority: int
    site: int
    age: float
    assoc: float
    fairshare: float
    jobsize: float
    partition: float
    qos: float
    nice: int
    tres: Mapping[str, float]


class BasicCounter:
    """priority/basic's count: slurmctld's `lowest_prio` (job_mgr.c set_job_prio with
    priority_basic.c priority_p_set, 22.05). Each number taken is one below the lowest
    taken so far, less the job's nice. slurmctld takes one for every accepted submission
    that is not held (salloc's, srun's and `--test-only`'s too), every release and every
    resume of a job an operator suspended; a split array task keeps its array's priority,
    a requeued job its own, and a refused submission takes none. Seen on the test
    cluster: jobs B (an array), held C, D, release C, E, hold+release A, F, release of
    task G_1 of a held array, H, a refused sbatch, I, a job run then requeued, J got
    ...040, -, ...039, ...038, ...037, ...036, ...035, ...034, ...033, -, ...032,
    ...031 (kept), ...030; `--nice=7` then ...022 (base ...029) and the next ...028."""

    def __init__(self, lowest: int = BASIC_BASE) -> None:
        self.lowest = lowest

    @classmethod
    def recovered(cls, priorities: Iterable[int]) -> BasicCounter:
        """The count as slurmctld resumes it from saved jobs: at the lowest priority above
        1 among them (0 is held, 1 the floor)."""
        return cls(min([BASIC_BASE, *(p for p in priorities if p > 1)]))

    def take(self, nice: int | None) -> int:
        """The next job's priority (never below 1; slurmctld's uint32 arithmetic)."""
        new = self.lowest - 1 if self.lowest >= 2 else 1
        offset = nice or 0
        if offset <= 0 or new > offset + 1:
            new = (new - offset) & _MAX
        new = max(new, 1)
        self.lowest = min(new + offset, self.lowest)
        return new


def reniced(priority: int, old_nice: int | None, new_nice: int | None) -> int:
    """priority/basic's priority after `scontrol update Nice=` (job_mgr.c _update_job):
    shifted by the change, at least 2; the count is left alone."""
    return max(priority + (old_nice or 0) - (new_nice or 0), 2)


def age_factor(now: float, accrue_time: float | None, max_age_s: int) -> float:
    """Seconds accrued over PriorityMaxAge, capped at 1 (0 before accruing starts)."""
    if accrue_time is None:
        return 0.0
    diff = int(now - accrue_time) if now > accrue_time else 0
    if max_age_s <= 0 or diff >= max_age_s:
        return 1.0
    return diff / max_age_s


def job_size_factor(job: JobInputs, sys: SystemInputs, cfg: PriorityConfig) -> float:
    """Nodes and CPUs over the cluster's (favour large by default), or size per minute of
    time limit with SMALL_RELATIVE_TO_TIME; clamped to [0, 1]."""
    nodes, cpus = max(1, sys.node_count), max(1, sys.cluster_cpus)
    if cfg.small_relative_to_time:
        js = max(job.min_nodes * sys.cluster_cpus / nodes, float(job.cpus))
        limit = job.time_limit_min if job.time_limit_min is not None else job.partition_max_time_min
        js = js / max(1, limit) / cpus
        if cfg.favor_small:
            js = 1.0 - js
    elif cfg.favor_small:
        js = (nodes - job.min_nodes) / nodes
        if job.cpus:
            js = (js + (cpus - job.cpus) / cpus) / 2
    else:
        js = job.min_nodes / nodes
        if job.cpus:
            js = (js + job.cpus / cpus) / 2
    return min(1.0, max(0.0, js))


def _norm(value: int, top: int, raw: bool) -> float:
    if raw:
        return float(value)
    return value / top if top else 0.0


def factors(job: JobInputs, now: float, sys: SystemInputs, cfg: PriorityConfig) -> Factors:
    """The job's weighted factors and priority (`set_priority_factors` then the weighted sum
    of `_get_priority_internal`)."""
    age = 0.0
    if cfg.weight_age:
        age = age_factor(now, job.accrue_time, cfg.max_age_s) * cfg.weight_age
    fs = job.fs_factor * cfg.weight_fairshare
    js = job_size_factor(job, sys, cfg) * cfg.weight_jobsize if cfg.weight_jobsize else 0.0
    part = 0.0
    if job.partition_priority and cfg.weight_partition:
        part = _norm(job.partition_priority, sys.max_partition_priority, cfg.no_normal_part)
        part *= cfg.weight_partition
    qos = 0.0
    if job.qos_priority and cfg.weight_qos:
        qos = _norm(job.qos_priority, sys.max_qos_priority, cfg.no_normal_qos) * cfg.weight_qos
    assoc = 0.0
    if cfg.weight_assoc:
        assoc = _norm(job.assoc_priority, sys.max_assoc_priority, cfg.no_normal_assoc)
        assoc *= cfg.weight_assoc
    tres = {k: v * cfg.weight_tres.get(k, 0.0) for k, v in job.tres.items() if k in cfg.weight_tres}
    total = weighted_sum(age, assoc, fs, js, part, qos, sum(tres.values()), job.site, job.nice)
    return Factors(job.job_id, total, job.site, age, assoc, fs, js, part, qos, job.nice, tres)


def weighted_sum(
    age: float,
    assoc: float,
    fs: float,
    js: float,
    part: float,
    qos: float,
    tres: float,
    site: int,
    nice: int,
) -> int:
    """The sum as slurmctld truncates it: floored at 1, at most 2^32-1."""
    total = age + assoc + fs + js + part + qos + tres + site - nice
    if total < 1:
        total = 1
    return min(_MAX, int(total))


def multifactor_priority(job: JobInputs, now: float, sys: SystemInputs, cfg: PriorityConfig) -> int:
    """Just the number."""
    return factors(job, now, sys, cfg).priority
