"""Which jobs one scancel names (gateway/control/scancel_select.py): the ids scancel checks
first when it signals or filters, the filters after, and the steps `ID.STEP` names."""

from __future__ import annotations

from dataclasses import replace

from gateway.control.arraytasks import Target, parse_targets
from gateway.control.scancel_select import Filters, select, split_steps
from gateway.model.job import Job
from gateway.model.state import JobState
from tests.support.builders import make_job


def _site() -> list[Job]:
    done = make_job(10).state(JobState.COMPLETED).build()
    running = make_job(11).state(JobState.RUNNING).build()
    mine = replace(make_job(12).build(), user="ann")
    meta = make_job(20).array("1-5").build()  # tasks 1-5 pending in the meta record
    task = replace(
        make_job(21).state(JobState.RUNNING).build(),
        array_job_id=20,
        array_task_id=0,
        array_pending=None,
    )
    return [done, running, mine, meta, task]


def _ids(text: str) -> list[Target]:
    parsed = parse_targets(text)
    assert parsed is not None
    return parsed


def test_checked_ids_that_name_no_unfinished_job_are_answered_apart() -> None:
    jobs = _site()
    chosen, unknown = select(_ids("10 11 99 20_[0,3,7] 21"), jobs, Filters(), verify=True)
    assert chosen == [Target(11), Target(20, (0,)), Target(20, (3,)), Target(21)]
    assert unknown == [Target(10), Target(99), Target(20, (7,))]  # ended, absent, no such task


def test_unchecked_ids_go_as_given_and_filters_never_widen_given_ids() -> None:
    jobs = _site()
    chosen, unknown = select(_ids("10 99 20_[1-3]"), jobs, Filters(), verify=False)
    assert (chosen, unknown) == (_ids("10 99 20_[1-3]"), [])
    # every id unknown: the filter must not fall back to every job of the user
    chosen, unknown = select(_ids("99"), jobs, Filters(user="ann"), verify=True)
    assert (chosen, unknown) == ([], [Target(99)])
    chosen, _ = select([], jobs, Filters(user="ann"), verify=True)
    assert chosen == [Target(12)]
    chosen, _ = select(_ids("11 12"), jobs, Filters(user="ann"), verify=True)
    assert chosen == [Target(12)]
    chosen, _ = select(_ids("20"), jobs, Filters(states=frozenset({JobState.RUNNING})), True)
    assert chosen == [Target(21)]  # the running task of array 20, not its pending record


def test_step_ids_of_unfinished_jobs_are_split_from_those_scancel_does_not_find() -> None:
    found, missing = split_steps(["11.0", "10.0", "99.2", "20_3.1", "21.x", "20_9.0"], _site())
    assert found == [("11.0", Target(11), 0), ("20_3.1", Target(20, (3,)), 1)]
    assert missing == ["10.0", "99.2", "21.x", "20_9.0"]  # ended, absent, malformed, no task
