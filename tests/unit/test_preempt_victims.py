"""Preemption victims (gateway/scheduler/preempt.py) as scenario tables: a pending
preemptor, running jobs with their placements, the free map -> the victims or None; and
the rules (gateway/policy/preempt_rules.py) that say who may preempt whom."""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

import pytest

from gateway.model.job import Job, RankPlacement
from gateway.model.jobspec import JobSpec
from gateway.model.state import JobState, Reason
from gateway.policy.model import PolicyState
from gateway.policy.preempt_rules import (
    Mode,
    PreemptConfig,
    may_preempt,
    may_preempt_any,
    mode_of,
    preempt_config,
)
from gateway.scheduler.builtin import DEFAULT_PLUGINS, FACTORIES
from gateway.scheduler.cycle import _place_on_targets, run_cycle
from gateway.scheduler.plugins import Registry
from gateway.scheduler.preempt import Preemption, choose_victims, released
from gateway.scheduler.request import node_request
from gateway.scheduler.selection import Target
from gateway.scheduler.snapshot import NodeFree, Snapshot
from tests.support.builders import make_job
from tests.support.policy_env import run, seeded
from tests.unit.test_scheduler_cycle import snap

REG = Registry.build(DEFAULT_PLUGINS, FACTORIES)
TARGETS = (Target("local", "debug"),)


def _pending(job_id: int, cpus: int, nodes: int = 1, qos: str = "high") -> Job:
    spec = JobSpec(name="p", workdir="/tmp", nodes_min=nodes, ntasks=cpus)
    return replace(make_job(job_id).build(), spec=spec, qos=qos, time_limit=10)


def _running(job_id: int, where: dict[str, int], priority: int, started: float = 0.0) -> Job:
    """A running job holding `cpus` on each named node (a gang when several)."""
    total = sum(where.values())
    spec = JobSpec(name="v", workdir="/tmp", nodes_min=len(where), ntasks=total)
    placement = tuple(RankPlacement(n, c, c, 0) for n, c in where.items())
    return replace(
        make_job(job_id).build(),
        spec=spec,
        qos="low",
        state=JobState.RUNNING,
        start_time=started or time.time() - 100,
        placement=placement,
        nodes=tuple(where),
        num_cpus=total,
        priority=priority,
        time_limit=10,
    )


def _fits(job: Job, s: Snapshot) -> Callable[[dict[str, NodeFree]], Sequence[RankPlacement] | None]:
    req = replace(node_request(job.spec, ()), partitions=("debug",))

    def fits(free: dict[str, NodeFree]) -> Sequence[RankPlacement] | None:
        got = _place_on_targets(job, req, TARGETS, dict(free), REG, s)
        return None if got is None else got[1]

    return fits


def _low(pre: Job, victim: Job) -> bool:
    return victim.qos == "low"


def _victims(
    pre: Job, running: list[Job], nodes: int = 2, ending: frozenset[int] = frozenset()
) -> list[int] | None:
    s = snap([*running, pre], nodes=nodes, cpus=4)
    got = choose_victims(pre, s.running, s.free, _fits(pre, s), _low, ending)
    return None if got is None else [v.job_id for v in got]


def test_one_victim_suffices_and_it_is_the_lowest_priority() -> None:
    running = [_running(1, {"n01": 4}, priority=20), _running(2, {"n02": 4}, priority=10)]
    assert _victims(_pending(9, 4), running) == [2]


def test_never_more_than_needed_even_when_a_small_job_was_tried_first() -> None:
    # n01: a 1-CPU job (lowest priority, tried first, not enough alone) and a 3-CPU job
    running = [
        _running(1, {"n01": 1}, priority=1),
        _running(2, {"n01": 3}, priority=2),
        _running(3, {"n02": 4}, priority=50),
    ]
    assert _victims(_pending(9, 3), running) == [2]


def test_a_gang_is_a_victim_as_a_whole() -> None:
    gang = _running(1, {"n01": 4, "n02": 4}, priority=1)
    s = snap([gang], nodes=2, cpus=4)
    assert _victims(_pending(9, 4), [gang]) == [1]
    after = released(s.free, [gang])
    assert [after[n].cpus for n in ("n01", "n02")] == [4, 4]
    assert all(after[n].jobs == 0 for n in ("n01", "n02"))


def test_none_when_even_every_allowed_victim_would_not_suffice() -> None:
    running = [_running(1, {"n01": 2}, priority=1), _running(2, {"n01": 2}, priority=1)]
    running = [running[0], replace(running[1], qos="high")]  # not preemptible by QOS
    assert _victims(_pending(9, 4), running, nodes=1) is None


def test_a_gang_preemptor_counts_the_free_room_and_takes_only_the_victim_it_needs() -> None:
    # n01: victim (2 CPUs) + 2 free, n02 idle: a 2-node, 8-CPU gang needs the victim only
    running = [_running(1, {"n01": 2}, priority=1)]
    assert _victims(_pending(9, 8, nodes=2), running) == [1]


def test_victims_already_being_ended_are_used_first_and_no_new_one_is_chosen() -> None:
    running = [_running(1, {"n01": 4}, priority=1), _running(2, {"n02": 4}, priority=50)]
    assert _victims(_pending(9, 4), running, ending=frozenset({2})) == [2]


def test_one_cycle_never_gives_a_victim_to_two_preemptors() -> None:
    victim = _running(1, {"n01": 4}, priority=1)
    pre1 = replace(_pending(8, 4), priority=100)
    pre2 = replace(_pending(9, 4), priority=90)
    s = snap([victim, pre1, pre2], nodes=1, cpus=4)
    result = run_cycle(s, REG, Preemption(_low, s.running))
    assert result.preempt == {8: (1,)}
    assert result.reasons[8] is Reason.RESOURCES
    assert 9 not in result.preempt
    assert not result.starts


def test_the_room_a_preemptor_waits_for_is_not_given_to_a_lower_job() -> None:
    # n01: victim (2 CPUs) + 2 free; the preemptor needs all 4; a later 2-CPU job must not
    # start in the 2 free CPUs the preemptor will use
    victim = _running(1, {"n01": 2}, priority=1)
    pre = replace(_pending(8, 4), priority=100)
    small = replace(_pending(9, 2, qos="low"), priority=10)
    s = snap([victim, pre, small], nodes=1, cpus=4)
    result = run_cycle(s, REG, Preemption(_low, s.running))
    assert result.preempt == {8: (1,)}
    assert [d.job.job_id for d in result.starts] == []


def test_a_preemptor_waiting_for_its_victims_is_never_itself_a_victim_or_rival() -> None:
    ending = {8: frozenset({1})}
    victim = _running(1, {"n01": 4}, priority=1)
    pre = replace(_pending(8, 4), priority=100)
    s = snap([victim, pre], nodes=1, cpus=4)
    result = run_cycle(s, REG, Preemption(_low, s.running, ending))
    assert result.preempt == {8: (1,)}  # the same victim, nothing new


# --- the rules -------------------------------------------------------------------------


def _state(*commands: str) -> PolicyState:
    state = seeded()
    for cmd in commands:
        state, text, rc = run(state, shlex.split(cmd))
        assert rc == 0, (cmd, text)
    return state


def test_preempt_qos_follows_the_preempt_list_and_the_exempt_time() -> None:
    state = _state(
        "-i add qos low",
        "-i add qos high preempt=low",
        "-i modify qos low set preemptexempttime=00:05:00",
    )
    cfg = preempt_config({"preempt_type": "preempt/qos", "preempt_mode": "REQUEUE"})
    now = time.time()
    pre = _pending(9, 1)
    young = _running(1, {"n01": 1}, priority=1, started=now - 60)
    old = _running(2, {"n01": 1}, priority=1, started=now - 600)
    assert not may_preempt(cfg, state, {}, now, pre, young)  # exempt for 5 minutes
    assert may_preempt(cfg, state, {}, now, pre, old)
    assert not may_preempt(cfg, state, {}, now, replace(pre, qos="low"), old)
    off = PreemptConfig()
    assert not may_preempt(off, state, {}, now, pre, old)


def test_mode_comes_from_the_qos_and_no_requeue_means_cancel() -> None:
    state = _state("-i add qos low preemptmode=cancel", "-i add qos mid")
    cfg = preempt_config({"preempt_type": "preempt/qos", "preempt_mode": "REQUEUE"})
    victim = _running(1, {"n01": 1}, priority=1)
    assert mode_of(cfg, state, victim) is Mode.CANCEL
    mid = replace(victim, qos="mid")
    assert mode_of(cfg, state, mid) is Mode.REQUEUE
    no_requeue = replace(mid, spec=replace(mid.spec, requeue=False))
    assert mode_of(cfg, state, no_requeue) is Mode.CANCEL
    # JobRequeue=0 at the site: a job that did not ask for --requeue is cancelled
    assert mode_of(cfg, state, mid, requeue_default=False) is Mode.CANCEL
    asked = replace(mid, spec=replace(mid.spec, requeue=True))
    assert mode_of(cfg, state, asked, requeue_default=False) is Mode.REQUEUE


def test_a_job_whose_qos_preempts_nothing_is_never_asked_for_victims() -> None:
    state = _state("-i add qos low", "-i add qos high preempt=low")
    cfg = preempt_config({"preempt_type": "preempt/qos", "preempt_mode": "CANCEL"})
    assert may_preempt_any(cfg, state, _pending(9, 1, qos="high"))
    assert not may_preempt_any(cfg, state, _pending(9, 1, qos="low"))
    victim = _running(1, {"n01": 4}, priority=1)
    pre = replace(_pending(8, 4), priority=100)
    s = snap([victim, pre], nodes=1, cpus=4)
    never = Preemption(_low, s.running, worth_asking=lambda job: False)
    result = run_cycle(s, REG, never)
    assert result.preempt == {}
    assert result.reasons[8] is Reason.RESOURCES


@pytest.mark.parametrize(
    ("values", "fragment"),
    [
        ({"preempt_type": "preempt/bogus"}, "preempt_type"),
        ({"preempt_mode": "SUSPENDED"}, "preempt_mode"),
        ({"preempt_exempt_time": "soon"}, "preempt_exempt_time"),
    ],
)
def test_bad_settings_name_the_key(values: dict[str, str], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        preempt_config(values)
