"""Delayed job-level preemption's choice (gateway/scheduler/preempt.py `fewest_victims`,
`Preemption` with `delayed` and `marked`) as scenario tables, and the `Privileged` QOS
flag's rules (gateway/policy/preempt_rules.py)."""

from __future__ import annotations

import shlex
import time
from dataclasses import replace

from gateway.model.job import Job
from gateway.policy.model import PolicyState
from gateway.policy.preempt_rules import may_preempt, preempt_config, privileged
from gateway.scheduler.cycle import run_cycle
from gateway.scheduler.preempt import Preemption, choose_victims, fewest_victims
from tests.support.policy_env import run, seeded
from tests.unit.test_preempt_victims import REG, _fits, _low, _pending, _running
from tests.unit.test_scheduler_cycle import snap


def _fewest(
    pre: Job, running: list[Job], marked: frozenset[int] = frozenset(), budget: int = 2000
) -> list[int] | None:
    s = snap([*running, pre], nodes=2, cpus=4)
    got = fewest_victims(pre, s.running, s.free, _fits(pre, s), _low, marked, budget)
    return None if got is None else [v.job_id for v in got]


def _greedy(pre: Job, running: list[Job]) -> list[int] | None:
    s = snap([*running, pre], nodes=2, cpus=4)
    got = choose_victims(pre, s.running, s.free, _fits(pre, s), _low)
    return None if got is None else sorted(v.job_id for v in got)


# n01: three 1-CPU jobs of low priority (1 CPU free); n02: one 4-CPU job of priority 50
SMALL_MANY = [
    _running(1, {"n01": 1}, priority=1),
    _running(2, {"n01": 1}, priority=2),
    _running(3, {"n01": 1}, priority=3),
    _running(4, {"n02": 4}, priority=50),
]


def test_the_fewest_whole_jobs_win_over_the_lowest_priorities() -> None:
    pre = _pending(9, 4)
    assert _greedy(pre, SMALL_MANY) == [1, 2, 3]  # Slurm's pick: lowest priority first
    assert _fewest(pre, SMALL_MANY) == [4]  # Octopus's: one job instead of three


def test_among_equally_few_the_lowest_priority_is_taken() -> None:
    running = [_running(1, {"n01": 4}, priority=20), _running(2, {"n02": 4}, priority=10)]
    assert _fewest(_pending(9, 4), running) == [2]


def test_two_victims_when_no_single_job_suffices() -> None:
    # each node: a 2-CPU job and 2 free; a 2-node gang of 8 CPUs needs both jobs
    running = [_running(1, {"n01": 2}, priority=1), _running(2, {"n02": 2}, priority=1)]
    assert sorted(_fewest(_pending(9, 8, nodes=2), running) or []) == [1, 2]


def test_marked_victims_stay_chosen_while_they_suffice() -> None:
    running = [_running(1, {"n01": 4}, priority=10), _running(2, {"n02": 4}, priority=20)]
    assert _fewest(_pending(9, 4), running) == [1]
    assert _fewest(_pending(9, 4), running, marked=frozenset({2})) == [2]


def test_none_when_every_allowed_job_would_not_suffice() -> None:
    running = [_running(1, {"n01": 2}, priority=1)]
    assert _fewest(_pending(9, 8, nodes=2), [replace(running[0], qos="high")]) is None


def test_past_the_budget_the_greedy_pick_is_used() -> None:
    assert _fewest(_pending(9, 4), SMALL_MANY, budget=1) == _greedy(_pending(9, 4), SMALL_MANY)


def test_a_delayed_preemptor_takes_the_fewest_and_others_keep_off_its_marks() -> None:
    pre = replace(_pending(9, 4), priority=100)
    s = snap([*SMALL_MANY, pre], nodes=2, cpus=4)
    delayed = Preemption(_low, s.running, delayed=lambda job: job.job_id == 9)
    assert run_cycle(s, REG, delayed).preempt == {9: (4,)}
    plain = Preemption(_low, s.running)
    assert {k: sorted(v) for k, v in run_cycle(s, REG, plain).preempt.items()} == {9: [1, 2, 3]}
    # job 4 is marked WillEvict for job 7: job 9 must look elsewhere
    marked = Preemption(_low, s.running, delayed=lambda job: True, marked={7: frozenset({4})})
    assert {k: sorted(v) for k, v in run_cycle(s, REG, marked).preempt.items()} == {9: [1, 2, 3]}


# --- the Privileged flag --------------------------------------------------------------


def _state(*commands: str) -> PolicyState:
    state = seeded()
    for cmd in commands:
        state, text, rc = run(state, shlex.split(cmd))
        assert rc == 0, (cmd, text)
    return state


def test_a_privileged_qos_job_is_never_a_victim() -> None:
    state = _state(
        "-i add qos vip flags=Privileged",
        "-i add qos low",
        "-i add qos high preempt=low,vip",
    )
    cfg = preempt_config({"preempt_type": "preempt/qos", "preempt_mode": "REQUEUE"})
    now = time.time()
    pre = _pending(9, 1, qos="high")
    low = _running(1, {"n01": 1}, priority=1)
    assert may_preempt(cfg, state, {}, now, pre, low)
    assert not may_preempt(cfg, state, {}, now, pre, replace(low, qos="vip"))
    assert privileged(state, replace(low, qos="vip"))
    assert not privileged(state, low)
    assert not privileged(None, low)


def test_sacctmgr_shows_the_flag_and_refuses_an_unknown_one() -> None:
    state = _state("-i add qos vip flags=privileged")
    _, text, rc = run(state, shlex.split("-P -n show qos vip format=Name,Flags"))
    assert (rc, text.strip()) == (0, "vip|Privileged")
    _, text, rc = run(state, shlex.split("-i modify qos vip set flags=Privileges"))
    assert rc == 1
    assert "Unknown QOS flag 'Privileges'" in text
