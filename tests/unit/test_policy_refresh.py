"""The cycle's priority refresh: one pass over every pending job, equal job by job to the
reference formula (`priority.factors`, tested against Slurm's documentation), with the
fair share of the job's association."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from gateway.model.job import Hold, Job
from gateway.model.jobspec import JobSpec
from gateway.model.state import Reason
from gateway.policy.jobs import (
    accrue_usage,
    job_inputs,
    job_tres,
    partition_tres,
    system_inputs,
)
from gateway.policy.model import PolicyState
from gateway.policy.priority import PriorityConfig, factors
from gateway.policy.refresh import compute_priorities
from gateway.policy.shares import compute_shares
from tests.support.builders import make_cluster, make_job
from tests.support.policy_env import run, seeded

NOW = 1_800_000_000.0
CLUSTERS = {"local": make_cluster(nodes=8, cpus=16)}


def _state() -> PolicyState:
    state = seeded()
    for argv in (
        ["-i", "add", "qos", "high", "priority=500"],
        ["-i", "add", "account", "lab", "parent=caldera", "fairshare=40", "priority=7"],
        ["-i", "add", "user", "alice,bob", "account=lab", "defaultaccount=lab"],
        ["-i", "modify", "user", "bob", "set", "fairshare=3"],
    ):
        state, text, rc = run(state, argv)
        assert rc == 0, text
    return state


def _jobs(state: PolicyState, n: int = 60) -> list[Job]:
    rng = random.Random(5)
    users = ["alice", "bob", "tester", "root", "nobody"]
    out = []
    for i in range(1, n + 1):
        spec = JobSpec(
            name="j",
            workdir="/tmp",
            ntasks=rng.choice([None, 1, 4, 32]),
            nodes_min=rng.choice([None, 1, 2, 8]),
            cpus_per_task=rng.choice([None, 2]),
            nice=rng.choice([None, 0, 50, -20]),
        )
        job = replace(
            make_job(i).build(),
            spec=spec,
            user=rng.choice(users),
            account=rng.choice(["", "lab", "xcore"]),
            qos=rng.choice(["normal", "high", "debug"]),
            submit_time=NOW - rng.randint(0, 30 * 86400),
            reason=rng.choice([Reason.NONE, Reason.PRIORITY, Reason.DEPENDENCY]),
            time_limit=rng.choice([0, 60, 600]),
        )
        out.append(job)
    return out


CONFIGS = [
    PriorityConfig(type="priority/multifactor", weight_age=1000, weight_fairshare=10000,
                   weight_jobsize=1000, weight_qos=2000, weight_assoc=300),
    PriorityConfig(type="priority/multifactor", weight_age=1000, weight_fairshare=10000,
                   weight_jobsize=1000, weight_qos=2000, fair_tree=False, favor_small=True,
                   max_age_s=86400),
    PriorityConfig(type="priority/multifactor", weight_jobsize=1000, weight_qos=3,
                   small_relative_to_time=True, no_normal_qos=True, no_normal_assoc=True,
                   weight_assoc=2, weight_tres={"cpu": 1000.0, "node": 50.0, "mem": 7.0}),
]  # fmt: skip


@pytest.mark.parametrize("cfg", CONFIGS)
def test_refresh_equals_the_reference_formula_job_by_job(cfg: PriorityConfig) -> None:
    state = _state()
    usage = {a.id: float(a.id * 1000) for a in state.assocs if a.user}
    jobs = _jobs(state)
    got = compute_priorities(jobs, state, usage, CLUSTERS, cfg, NOW)
    _, rows = compute_shares(state, usage, cfg)
    fs = {r.node.assoc_id: r.node.fs_factor for r in rows if r.node.user is not None}
    index = {(a.user, a.account, a.partition): a for a in state.assocs if a.user}
    max_qos = max(q.priority for q in state.qos.values())
    max_assoc = max(a.priority or 0 for a in state.assocs)
    sys = system_inputs(CLUSTERS, max_qos, max_assoc)
    for job in jobs:
        account = (
            job.account or state.users[job.user].default_account
            if job.user in state.users
            else job.account
        )
        assoc = index.get((job.user, account, job.partition)) or index.get((job.user, account, ""))
        qos = state.qos.get(job.qos)
        inputs = job_inputs(
            job,
            fs.get(assoc.id, 0.0) if assoc else 0.0,
            qos.priority if qos else 0,
            (assoc.priority or 0) if assoc else 0,
            job_tres(job, partition_tres(CLUSTERS), cfg.weight_tres),
        )
        want = factors(inputs, NOW, sys, cfg)
        assert got[job.job_id] == want, job.job_id


def test_held_jobs_are_left_out_and_basic_keeps_the_numbers_jobs_took() -> None:
    """priority/basic: a job's priority is the count's number it took when submitted or
    released (a split array task has its array's), never derived from its id."""
    state = _state()
    jobs = [replace(j, priority=4000 - 3 * j.job_id) for j in _jobs(state, 5)]
    jobs[0] = replace(jobs[0], hold=Hold.USER)
    basic = compute_priorities(jobs, state, {}, CLUSTERS, PriorityConfig(), NOW)
    assert jobs[0].job_id not in basic
    for job in jobs[1:]:
        assert basic[job.job_id].priority == job.priority


def test_the_less_used_user_comes_first_under_fair_tree() -> None:
    """Two users of one account, same shares: the one with usage ranks below."""
    state = _state()
    ids = {a.user: a.id for a in state.assocs if a.account == "lab" and a.user}
    base = replace(make_job(1).build(), user="alice", account="lab")
    jobs = [base, replace(make_job(2).build(), user="bob", account="lab")]
    state, _, _ = run(state, ["-i", "modify", "user", "bob", "set", "fairshare=1"])
    cfg = PriorityConfig(type="priority/multifactor", weight_fairshare=1000)
    got = compute_priorities(jobs, state, {ids["alice"]: 5000.0}, CLUSTERS, cfg, NOW)
    assert got[2].priority > got[1].priority


def test_usage_is_charged_per_cpu_second_with_the_qos_usage_factor_and_decays() -> None:
    """`_apply_new_usage`: seconds * decay^seconds * CPUs * UsageFactor, to the user's
    association; existing usage decays by decay^(now - last)."""
    state = _state()
    state, _, _ = run(state, ["-i", "modify", "qos", "high", "set", "UsageFactor=2"])
    alice = next(a.id for a in state.assocs if a.user == "alice")
    job = replace(
        make_job(1).build(), user="alice", account="lab", qos="high", start_time=NOW - 100,
        num_cpus=4,
    )  # fmt: skip
    hl = 7 * 86400
    d = 1 - 0.693 / hl
    out = accrue_usage({alice: 1000.0}, [job], state, NOW - 60, NOW, hl)
    assert out[alice] == pytest.approx(1000.0 * d**60 + 60 * d**60 * 4 * 2)
    ended = replace(job, end_time=NOW - 30)
    out = accrue_usage({}, [ended], state, NOW - 60, NOW, hl)
    assert out[alice] == pytest.approx(30 * d**30 * 4 * 2)
    assert accrue_usage({alice: 5.0}, [job], state, None, NOW, hl) == {alice: 5.0}


def test_tres_factor_is_the_jobs_share_of_its_partition() -> None:
    """priority_multifactor.shtml "TRES Factors": the amount of each TRES the job asks for
    in its partition, times PriorityWeightTRES (8 nodes x 16 CPUs = 128 CPUs here)."""
    state = _state()
    job = replace(make_job(1).build(), spec=JobSpec(name="j", workdir="/tmp", ntasks=32),
                  user="alice", account="lab")  # fmt: skip
    cfg = PriorityConfig(type="priority/multifactor", weight_tres={"cpu": 1000.0, "node": 80})
    got = compute_priorities([job], state, {}, CLUSTERS, cfg, NOW)[1]
    assert dict(got.tres) == {"cpu": 32 / 128 * 1000, "node": 1 / 8 * 80}
    assert got.priority == 250 + 10
