"""Submit-time limits (gateway/policy/submit_limits.py): QOS GrpSubmitJobs and
MaxSubmitJobsPerUser, association GrpSubmitJobs and MaxSubmitJobs refuse a submission
with slurmctld's reason and ESLURM_ACCOUNTING_POLICY; arrays count one per task; finished
jobs do not count. Limits set with Caldera's sacctmgr, as an operator would."""

from __future__ import annotations

import shlex
from dataclasses import replace

import pytest

from gateway.compat.arrays import parse_array
from gateway.model.job import Job
from gateway.model.jobspec import JobSpec
from gateway.model.state import JobState
from gateway.policy.model import PolicyState
from gateway.policy.submit_limits import (
    ACCOUNTING_POLICY,
    SubmitLimitError,
    check_submit,
    submit_limit_reason,
)
from tests.support.builders import make_job
from tests.support.policy_env import run, seeded


def _policy(*commands: str) -> PolicyState:
    state = seeded()
    for cmd in (
        "-i add account lab parent=caldera",
        "-i add account sub parent=lab",
        "-i add user alice,bob account=lab defaultaccount=lab",
        "-i add user carol account=sub defaultaccount=sub",
        *commands,
    ):
        state, text, rc = run(state, shlex.split(cmd))
        assert rc == 0, (cmd, text)
    return state


def _job(job_id: int, user: str, qos: str = "normal", array: str | None = None) -> Job:
    spec = JobSpec(name="j", workdir="/tmp")
    job = replace(make_job(job_id).build(), spec=spec, user=user, qos=qos, account="")
    if array is not None:
        arr = parse_array(array, 1_000_000)
        job = replace(job, spec=replace(spec, array=arr), array_job_id=job_id, array_pending=arr)
    return job


def test_qos_max_submit_per_user_counts_that_users_jobs_in_that_qos() -> None:
    state = _policy("-i modify qos normal set maxsubmitjobsperuser=2")
    active = [_job(1, "alice"), replace(_job(2, "alice"), state=JobState.RUNNING)]
    assert submit_limit_reason(_job(9, "alice"), state, active) == "QOSMaxSubmitJobPerUserLimit"
    assert submit_limit_reason(_job(9, "bob"), state, active) is None
    done = [active[0], replace(active[1], state=JobState.COMPLETED)]
    assert submit_limit_reason(_job(9, "alice"), state, done) is None


def test_an_array_counts_one_per_task_on_both_sides() -> None:
    state = _policy("-i modify qos normal set maxsubmitjobsperuser=5")
    assert submit_limit_reason(_job(9, "alice", array="0-4"), state, []) is None
    assert (
        submit_limit_reason(_job(9, "alice", array="0-5"), state, [])
        == "QOSMaxSubmitJobPerUserLimit"
    )
    pending_array = _job(1, "alice", array="0-3")  # 4 tasks still pending
    assert submit_limit_reason(_job(9, "alice"), state, [pending_array]) is None
    assert (
        submit_limit_reason(_job(9, "alice", array="0-1"), state, [pending_array])
        == "QOSMaxSubmitJobPerUserLimit"
    )


def test_qos_grp_submit_counts_every_user() -> None:
    state = _policy("-i modify qos normal set grpsubmitjobs=2")
    active = [_job(1, "alice"), _job(2, "bob")]
    assert submit_limit_reason(_job(9, "carol"), state, active) == "QOSGrpSubmitJobsLimit"


def test_assoc_max_submit_is_inherited_and_counts_the_users_own_association() -> None:
    state = _policy("-i modify account lab set maxsubmitjobs=1")
    assert submit_limit_reason(_job(9, "alice"), state, [_job(1, "alice")]) == (
        "AssocMaxSubmitJobLimit"
    )
    assert submit_limit_reason(_job(9, "alice"), state, [_job(1, "bob")]) is None


def test_assoc_grp_submit_counts_the_whole_subtree() -> None:
    state = _policy("-i modify account lab set grpsubmitjobs=2")
    active = [_job(1, "bob"), _job(2, "carol")]  # carol is in sub, below lab
    assert submit_limit_reason(_job(9, "alice"), state, active) == "AssocGrpSubmitJobsLimit"
    assert submit_limit_reason(_job(9, "alice"), state, active[:1]) is None


def test_the_refusal_is_sbatchs_two_lines_and_exit_status_1() -> None:
    state = _policy("-i modify qos normal set maxsubmitjobsperuser=0")
    with pytest.raises(SubmitLimitError) as err:
        check_submit(_job(9, "alice"), state, [])
    assert err.value.exit_code == 1
    assert err.value.render("sbatch") == (
        "sbatch: error: QOSMaxSubmitJobPerUserLimit\n"
        f"sbatch: error: Batch job submission failed: {ACCOUNTING_POLICY}\n"
    )


def test_no_submit_limit_anywhere_refuses_nothing() -> None:
    state = _policy()
    check_submit(_job(9, "alice", array="0-999"), state, [_job(i, "alice") for i in range(50)])
