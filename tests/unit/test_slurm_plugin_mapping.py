"""Caldera <-> Slurm translations: ids, tags, reasons, output paths, dependencies, events."""

from __future__ import annotations

import pytest

from gateway.model.backend import EventKind
from gateway.model.state import JobState, Reason
from gateway.model.values import ALL_TASKS, Dependency, DepItem, DepKind
from slurm_plugin.client import JobStatus
from slurm_plugin.events import finished_event, state_event, unreachable_event
from slurm_plugin.mapping import (
    SlurmRef,
    TargetInfo,
    caldera_output_path,
    make_tag,
    native_dependency,
    parse_backend_id,
    parse_tag,
    reason_from_slurm,
    slurm_state,
    tagged_comment,
    user_comment,
)
from slurm_plugin.statuses import EVENT_OF_STATE
from tests.support.slurm_jobs import make_job


def test_backend_ids_round_trip_with_array_tasks() -> None:
    assert parse_backend_id("123") == SlurmRef(123)
    assert parse_backend_id("123_4") == SlurmRef(123, 4)
    assert SlurmRef(123, 4).text == "123_4"
    for bad in ("", "x", "12_", "12_x", "_3"):
        with pytest.raises(ValueError, match="not a Slurm job id"):
            parse_backend_id(bad)


def test_tags_name_the_instance_and_the_job() -> None:
    assert make_tag("gw1", 42) == "caldera:gw1:42"
    assert make_tag("gw1", 42, run=2) == "caldera:gw1:42/2"
    assert parse_tag("caldera:gw1:42", "gw1") == (42, 0)
    assert parse_tag("caldera:gw1:42/2", "gw1") == (42, 2)
    assert parse_tag("caldera:gw1:42 user text", "gw1") == (42, 0)
    assert parse_tag("caldera:gw2:42", "gw1") is None
    assert parse_tag("caldera:gw1:42x", "gw1") is None
    assert parse_tag("hello", "gw1") is None
    assert parse_tag(None, "gw1") is None
    assert tagged_comment("gw1", 42, "keep me") == "caldera:gw1:42 keep me"
    assert user_comment("caldera:gw1:42 keep me") == "keep me"
    assert user_comment("caldera:gw1:42") is None


def test_states_and_reasons_keep_slurms_words() -> None:
    assert slurm_state("CANCELLED by 0") is JobState.CANCELLED
    assert slurm_state("OUT_OF_MEMORY") is JobState.OUT_OF_MEMORY
    assert reason_from_slurm("JobHeldUser") == (Reason.JOB_HELD_USER, None)
    assert reason_from_slurm("None") == (Reason.NONE, None)
    text = "ReqNodeNotAvail,_UnavailableNodes:big[001-064]"
    assert reason_from_slurm(text) == (Reason.REQ_NODE_NOT_AVAIL, text)
    assert reason_from_slurm("launch failed requeued held") == (
        Reason.NONE,
        "launch failed requeued held",
    )


def test_output_patterns_name_caldera_ids() -> None:
    job = make_job(57)
    assert caldera_output_path(None, job) == "slurm-57.out"
    assert caldera_output_path(None, job, stderr=True) is None
    assert caldera_output_path("out-%j-%5j-%x-%N.log", job) == "out-57-00057-%x-%N.log"
    assert caldera_output_path("%A_%a.out", job) == "57_%a.out"
    assert caldera_output_path("100%%-%j", job) == "100%%-57"
    assert caldera_output_path("a\\%j", job) == "a\\%j"  # backslash: Slurm does not expand
    task = make_job(61, array_job_id=60, array_task=3)
    assert caldera_output_path(None, task) == "slurm-60_3.out"
    assert caldera_output_path("o-%A_%a-%j", task) == "o-60_3-61"


def _members(table: dict[int, list[TargetInfo]]):  # type: ignore[no-untyped-def]
    return lambda job_id: table.get(job_id, [])


def test_dependencies_on_jobs_of_the_same_cluster_become_slurms() -> None:
    table = {
        10: [TargetInfo(10, SlurmRef(900), False)],
        11: [TargetInfo(11, SlurmRef(901), True)],  # finished: the gateway judged it
        12: [TargetInfo(12, None, False)],  # another backend's job
        20: [
            TargetInfo(20, SlurmRef(910, 0), False, 20, 0),
            TargetInfo(21, SlurmRef(911, 1), False, 20, 1),
        ],
    }
    members = _members(table)
    dep = Dependency((DepItem(DepKind.AFTER_OK, 10, minutes=5), DepItem(DepKind.AFTER_ANY, 11)))
    assert native_dependency(dep, members) == "afterok:900+5"
    assert native_dependency(Dependency((DepItem(DepKind.AFTER_OK, 12),)), members) is None
    whole = Dependency((DepItem(DepKind.AFTER_NOT_OK, 20, task=ALL_TASKS),))
    assert native_dependency(whole, members) == "afternotok:910_0:911_1"
    one = Dependency((DepItem(DepKind.AFTER, 20, task=1),))
    assert native_dependency(one, members) == "after:911_1"
    corr = Dependency((DepItem(DepKind.AFTER_CORR, 20),))
    assert native_dependency(corr, members, this_task=0) == "afterok:910_0"
    assert native_dependency(corr, members) is None
    assert native_dependency(Dependency((DepItem(DepKind.SINGLETON),)), members) == "singleton"
    either = Dependency((DepItem(DepKind.AFTER_OK, 10), DepItem(DepKind.AFTER_OK, 11)), True)
    assert native_dependency(either, members) is None  # one already decided: nothing to wait
    both = Dependency((DepItem(DepKind.AFTER_OK, 10), DepItem(DepKind.AFTER_ANY, 20)), True)
    assert native_dependency(both, members) == "afterok:900?afterany:910_0:911_1"


def _row(state: JobState, **kw: object) -> JobStatus:
    return JobStatus(ref=SlurmRef(5, None), state=state, **kw)  # type: ignore[arg-type]


def test_events_carry_slurms_state_reason_and_exit_code() -> None:
    pending = state_event(1, _row(JobState.PENDING, reason="Priority"), "c1-", 100.0)
    assert (pending.kind, pending.state, pending.reason, pending.nodes) == (
        EventKind.PENDING,
        JobState.PENDING,
        Reason.PRIORITY,
        (),
    )
    running = state_event(1, _row(JobState.RUNNING, nodes=("n1",), start_time=90.0), "c1-", 100.0)
    assert (running.kind, running.state, running.nodes, running.started_at) == (
        EventKind.STARTED,
        JobState.RUNNING,
        ("c1-n1",),
        90.0,
    )
    assert (running.time, running.backend_id) == (90.0, "5")
    row = _row(JobState.SUSPENDED, nodes=("n1",), start_time=90.0)
    suspended = state_event(1, row, "c1-", 100.0)
    assert (suspended.kind, suspended.state) == (EventKind.OBSERVED, JobState.SUSPENDED)
    done = finished_event(
        1, _row(JobState.FAILED, reason="NonZeroExitCode", exit_code=768, end_time=95.0), "", 100.0
    )
    assert (done.kind, done.state, done.reason, done.exit_code, done.time) == (
        EventKind.FINISHED,
        JobState.FAILED,
        Reason.NON_ZERO_EXIT_CODE,
        768,
        95.0,
    )
    lost = unreachable_event(1, JobState.RUNNING, "5", 100.0, "connect failure")
    assert (lost.kind, lost.state, lost.reason) == (
        EventKind.OBSERVED,
        JobState.RUNNING,
        Reason.CLUSTER_UNREACHABLE,
    )


def test_every_slurm_state_maps_to_one_event_kind_and_only_final_ones_finish() -> None:
    assert set(EVENT_OF_STATE) == set(JobState)
    finishing = {state for state, kind in EVENT_OF_STATE.items() if kind is EventKind.FINISHED}
    assert finishing == {state for state in JobState if state.is_finished}
    started = {state for state, kind in EVENT_OF_STATE.items() if kind is EventKind.STARTED}
    assert started == {JobState.RUNNING}
