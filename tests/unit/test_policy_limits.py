"""QOS and association limits in the scheduling cycle, as scenario tables (jobs, nodes,
associations -> which start, which wait and with which of Slurm's reasons). The limits are
set with Caldera's sacctmgr, as an operator would."""

from __future__ import annotations

import shlex
from dataclasses import replace

import pytest

from gateway.model.job import Job, RankPlacement
from gateway.model.jobspec import JobSpec
from gateway.model.state import JobState, Reason
from gateway.policy.limits import LimitGate
from gateway.policy.model import PolicyState
from gateway.scheduler.builtin import DEFAULT_PLUGINS, FACTORIES
from gateway.scheduler.cycle import run_cycle
from gateway.scheduler.plugins import Registry
from tests.support.builders import make_job
from tests.support.policy_env import run, seeded
from tests.unit.test_scheduler_cycle import snap


def _policy(*commands: str) -> PolicyState:
    state = seeded()
    for cmd in (
        "-i add account lab parent=caldera",
        "-i add user alice,bob account=lab defaultaccount=lab",
        *commands,
    ):
        state, text, rc = run(state, shlex.split(cmd))
        assert rc == 0, (cmd, text)
    return state


def _registry(state: PolicyState) -> Registry:
    reg = Registry.build(DEFAULT_PLUGINS, FACTORIES)
    gate = next(g for g in reg.gates if isinstance(g, LimitGate))
    gate.bind(lambda: state)
    return reg


def _job(job_id: int, user: str, cpus: int = 1, qos: str = "normal", limit: int = 10) -> Job:
    spec = JobSpec(name="j", workdir="/tmp", ntasks=cpus)
    return replace(
        make_job(job_id).build(), spec=spec, user=user, account="lab", qos=qos, time_limit=limit
    )


def _running(job: Job) -> Job:
    n = job.spec.ntasks or 1
    return replace(
        job,
        state=JobState.RUNNING,
        start_time=1.0,
        placement=(RankPlacement("n01", n, n, 0),),
        nodes=("n01",),
    )


SCENARIOS = [
    # (sacctmgr commands, jobs (id, user, cpus, qos, running?), started ids, reasons)
    (
        ["-i add qos small MaxJobsPerUser=2"],
        [(1, "alice", 1, "small", False), (2, "alice", 1, "small", False),
         (3, "alice", 1, "small", False), (4, "bob", 1, "small", False)],
        {1, 2, 4},
        {3: Reason.QOS_MAX_JOBS_PER_USER_LIMIT},
    ),
    (
        ["-i add qos small MaxJobsPerUser=2"],
        [(1, "alice", 1, "small", True), (2, "alice", 1, "small", False),
         (3, "alice", 1, "small", False)],
        {2},
        {3: Reason.QOS_MAX_JOBS_PER_USER_LIMIT},
    ),
    (
        ["-i modify account lab set GrpTRES=cpu=3"],
        [(1, "alice", 2, "normal", True), (2, "bob", 2, "normal", False),
         (3, "bob", 1, "normal", False)],
        {3},
        {2: Reason.ASSOC_GRP_CPU_LIMIT},
    ),
    (
        ["-i modify account caldera set GrpJobs=1"],  # a parent's limit binds its subtree
        [(1, "alice", 1, "normal", False), (2, "bob", 1, "normal", False)],
        {1},
        {2: Reason.ASSOC_GRP_JOBS_LIMIT},
    ),
    (
        ["-i modify user alice set MaxJobs=1"],
        [(1, "alice", 1, "normal", False), (2, "alice", 1, "normal", False),
         (3, "bob", 1, "normal", False)],
        {1, 3},
        {2: Reason.ASSOC_MAX_JOBS_LIMIT},
    ),
    (
        ["-i add qos wide GrpTRES=cpu=2 MaxTRESPerUser=cpu=1"],
        [(1, "alice", 1, "wide", False), (2, "alice", 1, "wide", False),
         (3, "bob", 1, "wide", False), (4, "bob", 1, "wide", False)],
        {1, 3},
        {2: Reason.QOS_MAX_CPU_PER_USER_LIMIT, 4: Reason.QOS_GRP_CPU_LIMIT},
    ),
    (
        ["-i add qos short MaxWall=5", "-i modify account lab set MaxWall=8"],
        [(1, "alice", 1, "short", False), (2, "alice", 1, "normal", False)],
        set(),
        {1: Reason.QOS_MAX_WALL_DURATION_PER_JOB_LIMIT,
         2: Reason.ASSOC_MAX_WALL_DURATION_PER_JOB_LIMIT},
    ),
]  # fmt: skip


@pytest.mark.parametrize(("commands", "jobs", "started", "reasons"), SCENARIOS)
def test_limits_keep_jobs_pending_with_slurms_reasons(
    commands: list[str],
    jobs: list[tuple[int, str, int, str, bool]],
    started: set[int],
    reasons: dict[int, Reason],
) -> None:
    state = _policy(*commands)
    built = []
    for job_id, user, cpus, qos, running in jobs:
        job = _job(job_id, user, cpus, qos)
        built.append(_running(job) if running else job)
    result = run_cycle(snap(built, nodes=1, cpus=16), _registry(state))
    assert {d.job.job_id for d in result.starts} == started
    for job_id, reason in reasons.items():
        assert result.reasons[job_id] is reason


def test_without_a_bound_policy_the_gate_lets_everything_through() -> None:
    jobs = [_job(i, "alice") for i in (1, 2, 3)]
    result = run_cycle(snap(jobs, cpus=16), Registry.build(DEFAULT_PLUGINS, FACTORIES))
    assert {d.job.job_id for d in result.starts} == {1, 2, 3}


def test_a_limit_holds_until_a_running_job_ends() -> None:
    state = _policy("-i add qos small MaxJobsPerUser=1")
    reg = _registry(state)
    first = _running(_job(1, "alice", qos="small"))
    waiting = _job(2, "alice", qos="small")
    result = run_cycle(snap([first, waiting], cpus=16), reg)
    assert result.reasons[2] is Reason.QOS_MAX_JOBS_PER_USER_LIMIT
    result = run_cycle(snap([waiting], cpus=16), reg)
    assert [d.job.job_id for d in result.starts] == [2]
