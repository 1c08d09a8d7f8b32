"""Every pending job's priority in one pass: the one place Caldera computes priorities.

priority/basic: each job keeps the number its submission, release or resume took from
slurmctld's count (priority.BasicCounter, kept by the policy service). priority/multifactor:
the fair-share tree of the associations and their decayed usage, then each job's weighted
factors. Held jobs keep 0.

The per-job loop is `priority.factors` unrolled (no intermediate JobInputs, the
association's factors looked up once per (user, account, partition)): 10,000 jobs must
be recomputed within the cycle's budget. tests/unit/test_policy_refresh.py holds it equal
to `factors` job by job.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from gateway.model.cluster import ClusterState
from gateway.model.job import Job
from gateway.model.state import Reason
from gateway.model.values import INFINITE
from gateway.policy.jobs import (
    assoc_index,
    job_size,
    job_tres,
    partition_factors,
    partition_tres,
    system_inputs,
)
from gateway.policy.model import PolicyState
from gateway.policy.priority import (
    Factors,
    JobInputs,
    PriorityConfig,
    job_size_factor,
)
from gateway.policy.shares import compute_shares

__all__ = ["compute_priorities", "fair_shares"]

_MAX = 0xFFFFFFFF
_NONE: Mapping[str, float] = MappingProxyType({})


def fair_shares(
    state: PolicyState, usage: Mapping[int, float], cfg: PriorityConfig
) -> dict[int, float]:
    """Each user association's fair-share factor (Fair Tree or classic)."""
    _, rows = compute_shares(state, usage, cfg)
    return {r.node.assoc_id: r.node.fs_factor for r in rows if r.node.user is not None}


def compute_priorities(
    pending: Iterable[Job],
    state: PolicyState,
    usage: Mapping[int, float],
    clusters: Mapping[str, ClusterState],
    cfg: PriorityConfig,
    now: float,
    shares: Mapping[int, float] | None = None,
) -> dict[int, Factors]:
    """Factors (and priority) of every pending, not held job; `shares` (from
    `fair_shares`) saves recomputing the tree between two calculation periods. The cyclic
    garbage collector is paused meanwhile: the pass allocates tens of thousands of
    short-lived acyclic objects, and each full collection would walk every job held."""
    paused = gc.isenabled()
    gc.disable()
    try:
        return _compute(pending, state, usage, clusters, cfg, now, shares)
    finally:
        if paused:
            gc.enable()


def _compute(
    pending: Iterable[Job],
    state: PolicyState,
    usage: Mapping[int, float],
    clusters: Mapping[str, ClusterState],
    cfg: PriorityConfig,
    now: float,
    shares: Mapping[int, float] | None,
) -> dict[int, Factors]:
    jobs = [j for j in pending if j.hold is None]
    direct = {  # an operator's fixed priority: no factors (sprio shows it alone)
        j.job_id: Factors(j.job_id, j.priority, 0, 0, 0, 0, 0, 0, 0, j.spec.nice or 0, {})
        for j in jobs
        if j.fixed_priority or not cfg.multifactor
    }
    jobs = [j for j in jobs if j.job_id not in direct]
    if not jobs:
        return direct
    fs_by_assoc: Mapping[int, float] = {}
    if cfg.weight_fairshare:
        fs_by_assoc = shares if shares is not None else fair_shares(state, usage, cfg)
    max_qos = max((q.priority for q in state.qos.values()), default=0)
    max_assoc = max((a.priority or 0 for a in state.assocs), default=0)
    sys = system_inputs(clusters, max_qos, max_assoc)
    qos_w = {
        name: (
            (float(q.priority) if cfg.no_normal_qos else q.priority / max_qos if max_qos else 0.0)
            * cfg.weight_qos
            if q.priority and cfg.weight_qos
            else 0.0
        )
        for name, q in state.qos.items()
    }
    top = sys.max_partition_priority
    part_w = {  # slurmctld's part_ptr->norm_priority * PriorityWeightPartition
        name: (float(f) if cfg.no_normal_part else f / top if top else 0.0) * cfg.weight_partition
        for name, f in partition_factors(clusters).items()
    }
    index = assoc_index(state)
    default_acct = {u.name: u.default_account for u in state.users.values()}
    per_assoc: dict[tuple[str, str, str], tuple[float, float]] = {}
    w_age, w_fs, w_js, max_age = (
        cfg.weight_age,
        cfg.weight_fairshare,
        cfg.weight_jobsize,
        cfg.max_age_s,
    )
    w_assoc = cfg.weight_assoc
    simple_size = not (cfg.small_relative_to_time or cfg.favor_small)
    n_nodes, n_cpus = max(1, sys.node_count), max(1, sys.cluster_cpus)
    w_tres = cfg.weight_tres
    totals = partition_tres(clusters) if w_tres else {}
    out: dict[int, Factors] = direct
    dep, begin, held = Reason.DEPENDENCY, Reason.BEGIN_TIME, Reason.JOB_HELD_USER
    for job in jobs:
        account = job.account or default_acct.get(job.user, "")
        part = job.partition.split(",", 1)[0] if job.partition else ""
        key = (job.user, account, part)
        found = per_assoc.get(key)
        if found is None:
            assoc = index.get(key) or index.get((job.user, account, ""))
            fs = fs_by_assoc.get(assoc.id, 0.0) * w_fs if assoc is not None else 0.0
            ap = 0.0
            if w_assoc and assoc is not None:
                raw = assoc.priority or 0
                ap = float(raw) if cfg.no_normal_assoc else raw / max_assoc if max_assoc else 0.0
                ap *= w_assoc
            found = per_assoc[key] = (fs, ap)
        fs, ap = found
        age = 0.0
        reason = job.reason  # identity tests: hashing an Enum member runs Python code
        if w_age and reason is not dep and reason is not begin and reason is not held:
            accrue = job.eligible_time or job.submit_time
            diff = int(now - accrue) if now > accrue else 0
            age = (1.0 if max_age <= 0 or diff >= max_age else diff / max_age) * w_age
        js = 0.0
        if w_js:
            nodes, cpus = job_size(job)
            if simple_size:
                js = nodes / n_nodes
                if cpus:
                    js = (js + cpus / n_cpus) / 2
                js = (1.0 if js > 1.0 else 0.0 if js < 0.0 else js) * w_js
            else:
                limit = job.time_limit if job.time_limit not in (0, INFINITE) else None
                inputs = JobInputs(job.job_id, 0.0, nodes, cpus, limit, limit or 1, 0.0)
                js = job_size_factor(inputs, sys, cfg) * w_js
        qos = qos_w.get(job.qos, 0.0)
        nice = job.spec.nice or 0
        tres: Mapping[str, float] = _NONE
        tres_sum = 0.0
        if w_tres:
            tres = {k: v * w_tres[k] for k, v in job_tres(job, totals, w_tres).items()}
            tres_sum = sum(tres.values())
        pw = part_w.get(part, 0.0)
        total = age + ap + fs + js + pw + qos + tres_sum - nice  # weighted_sum, inlined
        prio = 1 if total < 1 else (_MAX if total >= _MAX else int(total))
        out[job.job_id] = Factors(job.job_id, prio, 0, age, ap, fs, js, pw, qos, nice, tres)
    return out
