"""Backend events as job state changes (gateway/control/transitions.py)."""

from __future__ import annotations

from dataclasses import replace

from gateway.control.transitions import after_event, ended, requeued
from gateway.model.backend import BackendEvent, EventKind
from gateway.model.job import HANDING
from gateway.model.state import JobState, Reason
from tests.support.builders import make_job

NOW = 1_700_000_000.0


def _running(requeue: bool | None = None):  # type: ignore[no-untyped-def]
    job = make_job(7).state(JobState.RUNNING, start_time=NOW - 60, nodes=("n01",)).build()
    return replace(job, spec=replace(job.spec, requeue=requeue), backend_id="b7")


def test_finished_keeps_the_backends_state_exit_code_and_nodes() -> None:
    ev = BackendEvent(
        job_id=7,
        kind=EventKind.FINISHED,
        time=NOW,
        state=JobState.FAILED,
        exit_code=3 << 8,
        nodes=("n02",),
    )
    out = after_event(_running(), ev, requeue_default=True, now=NOW + 5)
    assert out is not None
    assert (out.state, out.exit_code, out.end_time, out.nodes) == (
        JobState.FAILED,
        3 << 8,
        NOW,
        ("n02",),
    )


def test_a_node_failure_requeues_unless_the_job_said_no_requeue() -> None:
    ev = BackendEvent(job_id=7, kind=EventKind.FINISHED, time=NOW, state=JobState.NODE_FAIL)
    again = after_event(_running(), ev, requeue_default=True, now=NOW)
    assert again is not None
    assert (again.state, again.restart_count, again.backend_id) == (JobState.PENDING, 1, None)
    failed = after_event(_running(requeue=False), ev, requeue_default=True, now=NOW)
    assert failed is not None
    assert failed.state is JobState.NODE_FAIL


def test_a_lost_job_ends_node_fail_when_the_gateway_learns_of_it() -> None:
    ev = BackendEvent(job_id=7, kind=EventKind.LOST, time=NOW - 30)
    out = after_event(_running(), ev, requeue_default=False, now=NOW)
    assert out is not None
    assert (out.state, out.reason, out.end_time) == (JobState.NODE_FAIL, Reason.NODE_DOWN, NOW)


def test_slurm_side_states_and_reasons_are_taken_over() -> None:
    queued = replace(make_job(8).build(), backend_id="")
    ev = BackendEvent(
        job_id=8, kind=EventKind.STARTED, time=NOW, backend_id="4242", reason=Reason.DEPENDENCY
    )
    out = after_event(queued, ev, requeue_default=False, now=NOW)
    assert out is not None
    assert (out.state, out.backend_id, out.reason) == (JobState.PENDING, "4242", Reason.DEPENDENCY)
    started = after_event(
        out, replace(ev, state=JobState.RUNNING, nodes=("node01",)), requeue_default=False, now=NOW
    )
    assert started is not None
    assert (started.state, started.start_time, started.nodes) == (
        JobState.RUNNING,
        NOW,
        ("node01",),
    )
    assert (
        after_event(
            started,
            replace(ev, state=JobState.RUNNING, nodes=("node01",)),
            requeue_default=False,
            now=NOW,
        )
        is None
    )


def test_events_for_finished_or_never_handed_jobs_change_nothing() -> None:
    done = ended(_running(), JobState.COMPLETED, NOW)
    for kind in EventKind:
        assert (
            after_event(
                done, BackendEvent(job_id=7, kind=kind, time=NOW), requeue_default=True, now=NOW
            )
            is None
        )
    fresh = make_job(9).build()
    assert (
        after_event(
            fresh,
            BackendEvent(job_id=9, kind=EventKind.FINISHED, time=NOW),
            requeue_default=True,
            now=NOW,
        )
        is None
    )
    again = requeued(_running(), NOW + 1)
    assert (again.restart_count, again.submit_time) == (1, NOW + 1)  # slurmctld's new submit


def test_a_queueing_backends_own_start_time_replaces_the_hand_over_time() -> None:
    handed = _running()  # Caldera handed it to Slurm at NOW - 60; Slurm held it until NOW
    ev = BackendEvent(
        job_id=7,
        kind=EventKind.STARTED,
        time=NOW,
        state=JobState.RUNNING,
        nodes=("n03",),
        started_at=NOW,
    )
    out = after_event(handed, ev, requeue_default=False, now=NOW + 1)
    assert out is not None
    assert (out.state, out.start_time, out.nodes) == (JobState.RUNNING, NOW, ("n03",))
    # the same report again changes nothing; a report without the backend's start (cluster
    # unreachable) keeps it
    assert after_event(out, ev, requeue_default=False, now=NOW + 2) is None
    blind = BackendEvent(
        job_id=7,
        kind=EventKind.STARTED,
        time=NOW + 30,
        state=JobState.RUNNING,
        reason=Reason.CLUSTER_UNREACHABLE,
    )
    later = after_event(out, blind, requeue_default=False, now=NOW + 30)
    assert later is not None
    assert (later.start_time, later.reason) == (NOW, Reason.CLUSTER_UNREACHABLE)


def test_a_job_that_started_and_ended_between_two_polls_keeps_the_backends_start() -> None:
    ev = BackendEvent(
        job_id=7,
        kind=EventKind.FINISHED,
        time=NOW + 5,
        state=JobState.COMPLETED,
        started_at=NOW,
    )
    out = after_event(_running(), ev, requeue_default=False, now=NOW + 6)
    assert out is not None
    assert (out.start_time, out.end_time) == (NOW, NOW + 5)


def test_a_withdrawn_job_waits_again_as_the_same_run() -> None:
    job = replace(_running(), restart_count=2, submit_time=NOW - 600, num_cpus=4)
    ev = BackendEvent(
        job_id=7,
        kind=EventKind.WITHDRAWN,
        time=NOW,
        reason=Reason.REQ_NODE_NOT_AVAIL,
        message="node n01 no longer exists",
        run=2,
    )
    out = after_event(job, ev, requeue_default=True, now=NOW + 5)
    assert out is not None
    assert (out.state, out.reason, out.state_desc) == (
        JobState.PENDING,
        Reason.REQ_NODE_NOT_AVAIL,
        "node n01 no longer exists",
    )
    assert (out.restart_count, out.submit_time) == (2, NOW - 600)  # not a restart
    assert (out.start_time, out.end_time, out.nodes, out.placement) == (None, None, (), ())
    assert (out.backend_id, out.num_cpus) == (None, 0)
    # without a reason the job waits for resources; a finished job is not brought back
    plain = after_event(job, replace(ev, reason=None), requeue_default=True, now=NOW)
    assert plain is not None
    assert plain.reason is Reason.RESOURCES
    done = replace(job, state=JobState.COMPLETED)
    assert after_event(done, ev, requeue_default=True, now=NOW) is None


def test_a_launch_failure_keeps_the_backends_message_for_scontrol() -> None:
    ev = BackendEvent(
        job_id=7,
        kind=EventKind.FINISHED,
        time=NOW,
        state=JobState.FAILED,
        reason=Reason.JOB_LAUNCH_FAILURE,
        exit_code=1 << 8,
        message='Failed to pull image "caldera.local/nope:1"',
    )
    out = after_event(_running(), ev, requeue_default=True, now=NOW)
    assert out is not None
    assert (out.state, out.reason) == (JobState.FAILED, Reason.JOB_LAUNCH_FAILURE)
    assert out.state_desc == 'Failed to pull image "caldera.local/nope:1"'
    other = replace(ev, reason=Reason.NON_ZERO_EXIT_CODE)
    plain = after_event(_running(), other, requeue_default=True, now=NOW)
    assert plain is not None
    assert plain.state_desc is None  # only a launch failure's words replace the reason


def test_a_job_being_handed_over_takes_the_clusters_id_from_its_first_report() -> None:
    handing = replace(make_job(9).build(), backend_id=HANDING, cluster="hpc")
    for kind in (EventKind.SUBMITTED, EventKind.PENDING):
        ev = BackendEvent(
            job_id=9, kind=kind, time=NOW, backend_id="hpc:4242", reason=Reason.PRIORITY
        )
        out = after_event(handing, ev, requeue_default=True, now=NOW)
        assert out is not None
        assert out.backend_id == "hpc:4242"
        assert out.state is JobState.PENDING
    lost = after_event(handing, BackendEvent(job_id=9, kind=EventKind.LOST, time=NOW), True, NOW)
    assert lost is not None
    assert (lost.state, lost.backend_id, lost.restart_count) == (JobState.PENDING, None, 1)


def test_a_requeued_job_waits_the_credential_lifetime_unless_it_begins_later() -> None:
    """slurmctld's batch_requeue_fini: begin = now + cred_expire + 1 (121 s on the test
    cluster: Reason=BeginTime, EligibleTime = the requeue + 121 s); a later --begin of its
    own stands. A node failure's requeue (a backend's event) does not wait."""
    out = requeued(_running(), NOW + 0.6, 60.5)
    assert (out.state, out.reason, out.restart_count) == (JobState.PENDING, Reason.BEGIN_TIME, 1)
    assert out.spec.begin == int(NOW) + 61  # ceil
    assert out.eligible_time is None
    assert out.expected_start == float(int(NOW) + 61)  # squeue %S, scontrol StartTime
    later = replace(_running(), spec=replace(_running().spec, begin=int(NOW) + 3600))
    assert requeued(later, NOW, 121).spec.begin == int(NOW) + 3600
    plain = requeued(_running(), NOW)  # no delay asked
    assert (plain.reason, plain.spec.begin) == (Reason.NONE, None)
    lost = BackendEvent(job_id=7, kind=EventKind.LOST, time=NOW)
    out = after_event(_running(True), lost, True, NOW)
    assert out is not None
    assert (out.state, out.reason, out.spec.begin) == (JobState.PENDING, Reason.NONE, None)
