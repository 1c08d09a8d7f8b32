"""bf_interval: blocked jobs' expected starts are refreshed once per interval, as slurmctld's
backfill updates StartTime only when it runs; starts and the top job's reservation are
decided in every cycle."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gateway.model.job import Job
from gateway.model.state import JobState
from gateway.scheduler.bf_params import BackfillParams, parse_scheduler_parameters
from gateway.scheduler.builtin import DEFAULT_PLUGINS, FACTORIES
from gateway.scheduler.cycle import run_cycle
from gateway.scheduler.plan import apply_plan
from gateway.scheduler.plugins import Registry
from tests.unit.test_scheduler_backfill import NOW, Case, Pend, Run, _snapshot

N = ("n01", "n02", "n03", "n04")
# job 2 (the top job) holds the binding reservation, job 3 gets an estimate only
CASE = Case(
    "two blocked jobs",
    running=[Run(1, N[:2], 60)],
    pending=[Pend(2, 4, 30), Pend(3, 3, 30)],
    starts={},
    reasons={},
    planned={},
)


def _registry(text: str) -> Registry:
    reg = Registry.build(DEFAULT_PLUGINS, FACTORIES)
    reg.backfill = parse_scheduler_parameters(text)
    return reg


def test_bf_interval_is_read_in_seconds_within_slurms_bounds() -> None:
    assert parse_scheduler_parameters("bf_interval=45").interval_s == 45
    assert BackfillParams().interval_s == 0  # Caldera's default: every cycle
    for bad in ("bf_interval=0", "bf_interval=10801", "bf_interval=x"):
        with pytest.raises(ValueError, match="bf_interval"):
            parse_scheduler_parameters(bad)


def test_estimates_come_once_per_interval_and_the_reservation_every_cycle() -> None:
    reg = _registry("bf_interval=30")
    snap = _snapshot(CASE)
    rounds = []
    for dt in (0, 10, 29, 30, 45, 61):
        result = run_cycle(replace(snap, now=NOW + dt), reg)
        rounds.append((dt, result.estimated, sorted(result.planned)))
    assert rounds == [
        (0, True, [2, 3]),
        (10, False, [2]),
        (29, False, [2]),
        (30, True, [2, 3]),
        (45, False, [2]),
        (61, True, [2, 3]),
    ]


def test_without_bf_interval_every_cycle_estimates() -> None:
    reg = _registry("")
    snap = _snapshot(CASE)
    for dt in (0, 1, 2):
        result = run_cycle(replace(snap, now=NOW + dt), reg)
        assert result.estimated
        assert sorted(result.planned) == [2, 3]


def test_a_forced_cycle_does_not_count_as_a_round() -> None:
    """sbatch --test-only runs a cycle of its own: it must not use up the next round."""
    reg = _registry("bf_interval=30")
    snap = _snapshot(CASE)
    assert not run_cycle(snap, reg, estimates=False).estimated
    assert reg.estimated_at is None
    assert run_cycle(snap, reg).estimated


def test_a_cycle_without_a_round_keeps_the_last_estimates() -> None:
    reg = _registry("bf_interval=30")
    snap = _snapshot(CASE)
    jobs: dict[int, Job] = {j.job_id: j for j in snap.pending}
    first = run_cycle(snap, reg)
    _, others = apply_plan([], snap.pending, jobs.get, first)
    jobs.update({j.job_id: j for j in others})
    estimate = jobs[3].sched_start
    assert estimate is not None
    assert jobs[2].sched_start is not None
    later = run_cycle(replace(snap, now=NOW + 10), reg)
    assert not later.estimated
    _, others = apply_plan([], snap.pending, jobs.get, later)
    jobs.update({j.job_id: j for j in others})
    assert jobs[3].sched_start == estimate  # kept, not cleared
    # a round that finds no estimate for a job clears it
    gone = replace(later, planned={2: later.planned[2]}, estimated=True)
    _, others = apply_plan([], snap.pending, jobs.get, gone)
    assert [(j.job_id, j.sched_start) for j in others] == [(3, None)]
    assert all(j.state is JobState.PENDING for j in others)
