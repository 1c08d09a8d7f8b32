"""Victims inside their GraceTime read back after a gateway restart (preempt_restore.py): the
last `preempt` of the current run, not carried out yet, with its preemptor, mode and end; and
what the backend reports meanwhile about such a run (its pods gone) is not its end."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gateway.control.preempt_restore import _read
from gateway.control.transitions import after_event
from gateway.model.backend import BackendEvent, EventKind
from gateway.model.job import Job
from gateway.model.state import JobState
from gateway.policy.preempt_rules import Mode
from gateway.store.base import StoredEvent
from tests.support.builders import make_job


class _Events:
    def __init__(self, *events: tuple[float, str, dict[str, Any]]) -> None:
        self.log = [StoredEvent(7, t, kind, detail) for t, kind, detail in events]

    def events(self, job_id: int) -> list[StoredEvent]:
        return self.log


START = (100.0, "start", {})
PREEMPT = (110.0, "preempt", {"by": 9, "mode": "REQUEUE", "grace_s": 60})


def _job() -> Job:
    return make_job(7).build()


def test_a_preemption_of_the_current_run_goes_on_from_its_event() -> None:
    (got,) = _read(_Events(START, PREEMPT), [_job()], 0.5)
    assert (got.preemptor, got.mode, got.deadline) == (9, Mode.REQUEUE, 110.0 + 30.0)


def test_a_preemption_carried_out_or_of_an_earlier_run_is_not_restored() -> None:
    ended = _Events(START, PREEMPT, (140.0, "preempt-end", {}))
    earlier = _Events(START, PREEMPT, (150.0, "start", {}))
    for store in (ended, earlier, _Events(START)):
        assert _read(store, [_job()], 1.0) == []


def test_a_suspension_or_a_malformed_event_is_not_a_grace() -> None:
    suspend = (110.0, "preempt", {"by": 9, "mode": "SUSPEND", "grace_s": 0})
    bad = (110.0, "preempt", {"by": "9", "mode": "CANCEL", "grace_s": 60})
    for event in (suspend, bad):
        assert _read(_Events(START, event), [_job()], 1.0) == []


def test_a_lost_or_finished_run_of_a_victim_in_its_grace_is_left_to_the_preemption() -> None:
    running = replace(_job(), state=JobState.RUNNING, preempt_time=110.0)
    lost = BackendEvent(job_id=7, kind=EventKind.LOST, time=120.0)
    failed = BackendEvent(job_id=7, kind=EventKind.FINISHED, time=120.0, state=JobState.NODE_FAIL)
    for ev in (lost, failed):
        assert after_event(running, ev, requeue_default=True, now=120.0) is None
        other = after_event(replace(running, preempt_time=None), ev, True, 120.0)
        assert other is not None
        assert other.state is JobState.PENDING  # requeued as a lost node
