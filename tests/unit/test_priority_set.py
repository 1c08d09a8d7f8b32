"""A priority set by hand (sbatch --priority, scontrol update Priority=), as slurmctld keeps
it: an operator's stays (direct_set_prio) until a hold and release; a user's submission
value is ignored and a user may only lower a priority, which the next count undoes.
tests/differential/test_priority_set_vs_slurm.py compares the same against the test cluster."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

from gateway.compat.slurm_errors import SlurmErrno
from gateway.control.gateway import Gateway
from gateway.control.job_update import not_persistent, update_field
from gateway.model.codec import job_from_dict, job_to_dict
from gateway.model.job import Hold, Job
from gateway.model.state import JobState, Reason
from gateway.policy.model import initial_state
from gateway.policy.priority import PriorityConfig
from gateway.policy.refresh import compute_priorities
from gateway.policy.service import policy_of
from tests.support.builders import make_gateway, make_job


def _pending(priority: int, fixed: bool = False, nice: int | None = None) -> Job:
    job = make_job(5).build()
    return replace(job, priority=priority, fixed_priority=fixed, spec=replace(job.spec, nice=nice))


def test_an_operator_sets_any_priority_and_it_stays() -> None:
    out = update_field(_pending(4294901000, nice=3), "Priority", "50", operator=True)
    assert isinstance(out, Job)
    assert (out.priority, out.fixed_priority, out.spec.nice) == (50, True, None)
    assert not not_persistent(_pending(4294901000), out, operator=True)
    raised = update_field(_pending(10), "priority", "4000000000", operator=True)
    assert isinstance(raised, Job)
    assert raised.priority == 4_000_000_000


def test_a_user_may_only_lower_a_priority_and_is_told_it_will_not_last() -> None:
    before = _pending(4294901000)
    lowered = update_field(before, "priority", "5", operator=False)
    assert isinstance(lowered, Job)
    assert (lowered.priority, lowered.fixed_priority) == (5, False)
    assert not_persistent(before, lowered, operator=False)
    assert update_field(lowered, "priority", "1000", operator=False) is SlurmErrno.ACCESS_DENIED
    assert not not_persistent(lowered, lowered, operator=False)  # the same value: no change


def test_a_held_job_keeps_its_hold_and_bad_values_are_refused() -> None:
    held = replace(_pending(0), hold=Hold.USER)
    assert update_field(held, "priority", "7", operator=True) is SlurmErrno.JOB_HELD
    for bad in ("abc", "-1", "4294967294", "5x"):
        assert update_field(_pending(9), "priority", bad, operator=True) is SlurmErrno.NOT_SUPPORTED


def test_priority_zero_holds_the_job_as_the_callers_hold_would() -> None:
    by_user = update_field(_pending(4294901000), "priority", "0", operator=False)
    assert isinstance(by_user, Job)
    assert (by_user.hold, by_user.priority, by_user.reason) == (
        Hold.USER,
        0,
        Reason.JOB_HELD_USER,
    )
    assert not not_persistent(_pending(4294901000), by_user, operator=False)  # rc 0
    by_root = update_field(_pending(50, fixed=True), "priority", "0", operator=True)
    assert isinstance(by_root, Job)
    assert (by_root.hold, by_root.reason) == (Hold.ADMIN, Reason.JOB_HELD_ADMIN)
    assert update_field(by_root, "priority", "0", operator=False) == by_root  # already 0
    running = replace(_pending(4294901000), state=JobState.RUNNING)
    shown = update_field(running, "priority", "0", operator=True)
    assert isinstance(shown, Job)  # it keeps running, shown held (test cluster: rc 0)
    assert (shown.state, shown.hold, shown.priority, shown.reason) == (
        JobState.RUNNING,
        None,
        0,
        Reason.JOB_HELD_ADMIN,
    )


def test_nice_leaves_a_fixed_priority_alone() -> None:
    fixed = _pending(50, fixed=True)
    assert update_field(fixed, "nice", "10", operator=True) == fixed
    counted = update_field(_pending(4294901000), "nice", "10", operator=True)
    assert isinstance(counted, Job)
    assert counted.priority == 4294900990


def test_fixed_priorities_survive_the_store_and_multifactor_leaves_them_alone() -> None:
    fixed = _pending(50, fixed=True)
    assert job_from_dict(job_to_dict(fixed)).fixed_priority
    cfg = PriorityConfig(type="priority/multifactor", weight_age=1000)
    state = initial_state("local")
    factors = compute_priorities([fixed], state, {}, {}, cfg, fixed.submit_time + 60)
    assert factors[fixed.job_id].priority == 50
    assert factors[fixed.job_id].age == 0.0


def _gateway(tmp_path: Path) -> Gateway:
    return make_gateway(tmp_path)


def test_sbatch_priority_is_an_operators_only(tmp_path: Path) -> None:
    policy = policy_of(_gateway(tmp_path))
    job = make_job(7).build()
    asked = replace(job, spec=replace(job.spec, priority=100))
    mine = policy.admit(asked, operator=True)
    assert (mine.priority, mine.fixed_priority) == (100, True)
    theirs = policy.admit(asked, operator=False)
    assert not theirs.fixed_priority
    assert theirs.priority > 1_000_000
    assert policy.number(mine) == 100  # a requeue keeps it (priority_basic.c)
    zero = policy.admit(replace(job, spec=replace(job.spec, priority=0)), operator=True)
    assert not zero.fixed_priority  # sbatch never sends --priority=0: the count's number
    assert zero.priority > 1_000_000
    held = policy.admit(replace(asked, hold=Hold.USER, priority=0), operator=True)
    assert (held.priority, held.fixed_priority) == (0, False)  # sbatch -H: the hold wins


def test_under_multifactor_a_users_lowered_priority_lasts_until_the_next_calculation(
    tmp_path: Path,
) -> None:
    """The multifactor plugin's decay thread recomputes every pending job once per
    PriorityCalcPeriod; in between, a user's lowered priority stands (the cycles do not
    undo it, as they did: it reverted at the next 0.2 s cycle)."""
    now = [1_800_000_000.0]
    gw = make_gateway(
        tmp_path,
        priority={"PriorityType": "priority/multifactor", "PriorityWeightJobSize": 1000},
    )
    gw.clock = lambda: now[0]
    service = policy_of(gw)
    job = replace(make_job(5).build(), submit_time=now[0])
    gw.jobs[job.job_id] = job

    async def scenario() -> list[int]:
        seen: list[int] = []
        await service.refresh()
        seen.append(gw.jobs[5].priority)  # computed
        lowered = replace(gw.jobs[5], priority=5)
        gw.jobs[5] = lowered
        service.lowered_by_user(lowered)
        for step in (1, 250, 60):  # cycles, then past PriorityCalcPeriod (300 s)
            now[0] += step
            await service.refresh()
            seen.append(gw.jobs[5].priority)
        return seen

    computed, *after = asyncio.run(scenario())
    assert computed > 5
    assert after == [5, 5, computed]


def test_start_time_moves_a_pending_jobs_begin_and_only_a_pending_jobs() -> None:
    """scontrol update StartTime= (or EligibleTime=): the client gives seconds since the
    epoch, never before now; a requeued job's BeginTime wait is lifted so (what the test
    cluster does with StartTime=now); a running job is ESLURM_JOB_NOT_PENDING."""
    waiting = replace(_pending(100), reason=Reason.BEGIN_TIME)
    waiting = replace(waiting, spec=replace(waiting.spec, begin=2_000_000_000))
    out = update_field(waiting, "StartTime", "1900000000", operator=False)
    assert isinstance(out, Job)
    assert (out.spec.begin, out.reason, out.expected_start) == (1_900_000_000, Reason.NONE, 1.9e9)
    held = replace(_pending(0), reason=Reason.JOB_HELD_USER, hold=Hold.USER)
    kept = update_field(held, "StartTime", "1900000000", operator=False)
    assert isinstance(kept, Job)
    assert kept.reason is Reason.JOB_HELD_USER
    running = replace(_pending(100), state=JobState.RUNNING)
    assert update_field(running, "StartTime", "1900000000", False) is SlurmErrno.JOB_NOT_PENDING
    assert update_field(waiting, "StartTime", "soon", False) is SlurmErrno.INVALID_TIME_VALUE
