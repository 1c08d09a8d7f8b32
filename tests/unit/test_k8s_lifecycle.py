"""Pod phases and reasons -> the verdict of the whole gang."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gateway.model.backend import EventKind
from gateway.model.state import JobState, Reason
from k8s_bridge.gang import Gang, Verdict, decode_verdict, encode_verdict
from k8s_bridge.lifecycle import PodState, gang_status, parse_pod
from k8s_bridge.options import GangMode, K8sOptions
from k8s_bridge.render import render_gang
from k8s_bridge.request import GangRequest
from k8s_bridge.states import (
    EVENT_OF_STATE,
    LOST,
    STATE_OF_PHASE,
    STATE_OF_REASON,
    WITHDRAWN,
    event_kind,
    pod_job_state,
)
from tests.support.builders import make_job


def pod(rank: int, phase: str = "Running", **fields: Any) -> PodState:
    base: dict[str, Any] = {
        "name": f"caldera-1-{rank}",
        "uid": f"u{rank}",
        "job_id": 1,
        "attempt": 0,
        "rank": rank,
        "phase": phase,
        "node": f"n{rank}" if phase != "Pending" else None,
    }
    base.update(fields)
    return PodState(**base)


def test_all_ranks_running_is_a_running_gang() -> None:
    status = gang_status([pod(0), pod(1), pod(2)], 3)
    assert status.all_running
    assert not status.done
    assert not status.partly_placed


def test_some_ranks_unbound_is_partly_placed_and_not_running() -> None:
    status = gang_status([pod(0), pod(1, "Pending"), pod(2, "Pending")], 3)
    assert status.partly_placed
    assert not status.all_running


def test_the_job_ends_when_rank_zero_ends() -> None:
    status = gang_status([pod(0, "Succeeded", exit_code=0), pod(1)], 2)
    assert status.state is JobState.COMPLETED
    assert status.exit_code == 0
    assert status.rank == 0


def test_rank_zero_exit_code_is_the_job_exit_code() -> None:
    status = gang_status([pod(0, "Failed", exit_code=3, reason="Error"), pod(1)], 2)
    assert status.state is JobState.FAILED
    assert status.exit_code == 3 << 8
    assert status.reason is Reason.NON_ZERO_EXIT_CODE


def test_a_failed_rank_fails_the_whole_gang() -> None:
    status = gang_status([pod(0), pod(1), pod(2, "Failed", exit_code=7, reason="Error")], 3)
    assert status.state is JobState.FAILED
    assert status.rank == 2
    assert status.exit_code == 7 << 8
    assert "rank 2" in status.message


def test_signals_oom_timeout_node_loss_and_preemption() -> None:
    killed = gang_status([pod(0, "Failed", exit_code=137)], 1)
    assert (killed.state, killed.exit_code) == (JobState.FAILED, 9)
    oom = gang_status([pod(0, "Failed", exit_code=137, reason="OOMKilled")], 1)
    assert oom.state is JobState.OUT_OF_MEMORY
    late = gang_status([pod(0, "Failed", reason="DeadlineExceeded")], 1)
    assert late.state is JobState.TIMEOUT
    lost = gang_status([pod(0), pod(1, "Unknown")], 2)
    assert (lost.state, lost.reason) == (JobState.NODE_FAIL, Reason.NODE_DOWN)
    evicted = gang_status([pod(0), pod(1, "Failed", reason="Evicted")], 2)
    assert evicted.state is JobState.NODE_FAIL
    preempted = gang_status([pod(0), pod(1, "Failed", preempted=True)], 2)
    assert preempted.state is JobState.PREEMPTED


def test_pods_being_deleted_by_caldera_are_not_failures() -> None:
    status = gang_status([pod(0), pod(1, "Failed", exit_code=143, deleting=True)], 2)
    assert not status.done


def test_a_pod_vanishing_after_the_gang_ran_is_a_node_failure_only_when_synced() -> None:
    assert not gang_status([pod(0)], 2, was_running=True, missing_is_lost=False).done
    assert not gang_status([pod(0)], 2, was_running=False, missing_is_lost=True).done
    lost = gang_status([pod(0)], 2, was_running=True, missing_is_lost=True)
    assert lost.state is JobState.NODE_FAIL
    # deleted before every rank ran: its pod was seen, so it did not just lag behind
    early = gang_status([pod(0)], 2, missing_is_lost=True, seen={0, 1})
    assert (early.state, early.rank) == (JobState.NODE_FAIL, 1)


def test_pods_parse_from_api_objects() -> None:
    obj = {
        "metadata": {
            "name": "caldera-5-1",
            "uid": "abc",
            "labels": {"caldera.io/job-id": "5", "caldera.io/rank": "1", "caldera.io/attempt": "2"},
        },
        "spec": {"nodeName": "kwok-node-01"},
        "status": {
            "phase": "Failed",
            "startTime": "2026-01-01T00:00:00Z",
            "containerStatuses": [
                {
                    "state": {
                        "terminated": {
                            "exitCode": 3,
                            "reason": "Error",
                            "finishedAt": "2026-01-01T00:00:05Z",
                        }
                    }
                }
            ],
        },
    }
    parsed = parse_pod(obj)
    assert parsed is not None
    assert (parsed.job_id, parsed.rank, parsed.attempt) == (5, 1, 2)
    assert (parsed.phase, parsed.exit_code, parsed.node) == ("Failed", 3, "kwok-node-01")
    assert parsed.finished is not None
    assert parsed.started is not None
    assert parsed.finished - parsed.started == 5
    assert parse_pod({"metadata": {"name": "other", "labels": {}}}) is None


def test_verdicts_round_trip_through_the_root_annotations() -> None:
    status = gang_status([pod(0, "Failed", exit_code=2, message="boom")], 1)
    verdict = Verdict.from_status(status)
    back = decode_verdict(encode_verdict(verdict))
    assert back is not None
    assert (back.kind, back.state, back.reason, back.exit_code) == (
        verdict.kind,
        JobState.FAILED,
        Reason.NON_ZERO_EXIT_CODE,
        512,
    )
    assert "boom" in back.message
    assert decode_verdict({}) is None


def _gang(requeue: bool | None = None, deadline_s: int | None = None) -> Gang:
    job = make_job(9).nodes(2).spec(requeue=requeue).build()
    req = GangRequest(job_id=9, spec=job.spec, user="u", uid=1, gid=1, script="#!/bin/sh\n")
    manifests = render_gang(req, K8sOptions(), GangMode.CALDERA)
    return Gang(
        job=job, names=manifests.names, manifests=manifests, submitted=0.0, deadline_s=deadline_s
    )


def test_the_time_limit_ends_a_running_gang_after_the_kill_wait() -> None:
    """Rank 0's init ends it at the limit; where it did not, the kubelet is asked to once
    KillWait and a margin (5 s) are over, and the verdict comes as long again later."""
    gang = _gang(deadline_s=60)
    running = gang_status([pod(0), pod(1)], 2)
    assert gang.observe([pod(0), pod(1)], running, mono=100.0)
    assert gang.nodes == ("n0", "n1")
    assert [gang.over_limit(m, grace_s=30) for m in (150, 170, 194, 196, 229, 232)] == [
        0, 0, 0, 1, 1, 2
    ]  # fmt: skip
    assert gang.decide(running, mono=229.0, now=0.0, grace_s=30) is None
    verdict = gang.decide(running, mono=232.0, now=0.0, grace_s=30)
    assert verdict is not None
    assert (verdict.state, verdict.reason) == (JobState.TIMEOUT, Reason.TIME_LIMIT)


def test_requeue_turns_a_failed_rank_into_a_lost_gang_but_not_a_failed_script() -> None:
    rank_failed = gang_status([pod(0), pod(1, "Failed", exit_code=1)], 2)
    script_failed = gang_status([pod(0, "Failed", exit_code=1), pod(1)], 2)
    with_requeue = _gang(requeue=True)
    verdict = with_requeue.decide(rank_failed, 0.0, 0.0, 30)
    assert verdict is not None
    assert verdict.kind is EventKind.LOST
    script = with_requeue.decide(script_failed, 0.0, 0.0, 30)
    assert script is not None
    assert (script.kind, script.state) == (EventKind.FINISHED, JobState.FAILED)
    plain = _gang().decide(rank_failed, 0.0, 0.0, 30)
    assert plain is not None
    assert (plain.kind, plain.state) == (EventKind.FINISHED, JobState.FAILED)


def test_every_state_a_gang_can_reach_has_its_event_in_the_one_table() -> None:
    """Every pod phase x every reason the table knows (and one it does not), as rank 0 and
    as a failing other rank: the gang's state is in states.EVENT_OF_STATE, and the verdict
    is reported as the table says."""
    reasons = [None, "Error", *STATE_OF_REASON]
    for phase in STATE_OF_PHASE:
        for reason in reasons:
            for pods in ([pod(0, phase, reason=reason)], [pod(0), pod(1, phase, reason=reason)]):
                status = gang_status(pods, len(pods))
                if status.state is None:
                    continue
                assert status.state in EVENT_OF_STATE, (phase, reason)
                verdict = Verdict.from_status(status)
                assert verdict.kind is EVENT_OF_STATE[status.state]
    assert pod_job_state("Failed", "OOMKilled") is JobState.OUT_OF_MEMORY
    assert pod_job_state("Running", None, preempted=True) is JobState.PREEMPTED
    assert event_kind(JobState.RUNNING) is EventKind.STARTED
    assert event_kind(JobState.PENDING) is EventKind.PENDING


def test_lost_and_withdrawn_verdicts_round_trip_also_in_the_older_spelling() -> None:
    for kind, state in ((EventKind.LOST, LOST), (EventKind.WITHDRAWN, WITHDRAWN)):
        verdict = Verdict(state, Reason.NODE_DOWN, message="gone")
        assert verdict.kind is kind
        assert decode_verdict(encode_verdict(verdict)) == verdict
        older = {"caldera.io/verdict": f"{kind.value} - NodeDown 0 0"}
        back = decode_verdict(older)
        assert back is not None
        assert (back.kind, back.state) == (kind, state)
    assert decode_verdict({"caldera.io/verdict": "finished RUNNING None 0 0"}) is None


def test_the_kubelets_deadline_wins_over_the_killed_containers_error() -> None:
    """activeDeadlineSeconds: the kubelet fails the pod (DeadlineExceeded) and its container
    ends killed ("Error", 137): the job timed out, it did not fail."""
    labels = {"caldera.io/job-id": "5", "caldera.io/rank": "0"}
    terminated = {"terminated": {"exitCode": 137, "reason": "Error"}}
    obj = {
        "metadata": {"name": "caldera-5-0", "labels": labels},
        "spec": {"nodeName": "n1"},
        "status": {
            "phase": "Failed",
            "reason": "DeadlineExceeded",
            "containerStatuses": [{"state": terminated}],
        },
    }
    parsed = parse_pod(obj)
    assert parsed is not None
    status = gang_status([parsed], 1)
    assert (status.state, status.reason) == (JobState.TIMEOUT, Reason.TIME_LIMIT)
    assert status.exit_code == 9  # killed by SIGKILL after KillWait: ExitCode 0:9


def test_ranks_on_a_node_that_is_not_ready_are_lost_with_it() -> None:
    """The API server keeps saying Running while a node is NotReady: the node watch
    decides. A lost rank other than 0 requeues a --requeue job as a whole; rank 0 lost is
    the job's NODE_FAIL; a rank that had already ended keeps its own end."""
    lost = gang_status([pod(0), pod(1)], 2, down={"n1"})
    assert (lost.state, lost.reason, lost.rank, lost.running) == (
        JobState.NODE_FAIL,
        Reason.NODE_DOWN,
        1,
        1,
    )
    assert "n1" in lost.message
    verdict = _gang(requeue=True).decide(lost, 0.0, 0.0, 30)
    assert verdict is not None
    assert verdict.kind is EventKind.LOST
    plain = _gang(requeue=False).decide(lost, 0.0, 0.0, 30)
    assert plain is not None
    assert (plain.kind, plain.state) == (EventKind.FINISHED, JobState.NODE_FAIL)
    first = gang_status([pod(0), pod(1)], 2, down={"n0"})
    assert (first.state, first.rank) == (JobState.NODE_FAIL, 0)
    ended = gang_status([pod(0, "Succeeded", exit_code=0), pod(1)], 2, down={"n0"})
    assert ended.state is JobState.COMPLETED
    assert gang_status([pod(0), pod(1)], 2, down={"elsewhere"}).state is None


def _waiting(reason: str, message: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "caldera-5-1",
            "labels": {"caldera.io/job-id": "5", "caldera.io/rank": "1"},
        },
        "spec": {"nodeName": "kubelet-node-01"},
        "status": {
            "phase": "Pending",
            "containerStatuses": [{"state": {"waiting": {"reason": reason, "message": message}}}],
        },
    }


def test_a_container_that_cannot_start_fails_the_launch_and_is_not_requeued() -> None:
    pulling = parse_pod(_waiting("ErrImagePull", 'failed to pull image "x/nope:1"'))
    assert pulling is not None
    assert (pulling.reason, pulling.failed) == ("ErrImagePull", True)
    status = gang_status([pod(0), pulling], 2)
    assert (status.state, status.reason, status.rank) == (
        JobState.FAILED,
        Reason.JOB_LAUNCH_FAILURE,
        1,
    )
    assert status.exit_code == 1 << 8  # ExitCode 1:0
    assert 'ErrImagePull: failed to pull image "x/nope:1"' in status.message
    verdict = _gang(requeue=True).decide(status, 0.0, 0.0, 30)
    assert verdict is not None
    assert (verdict.kind, verdict.reason) == (EventKind.FINISHED, Reason.JOB_LAUNCH_FAILURE)
    starting = parse_pod(_waiting("ContainerCreating", ""))
    assert starting is not None
    assert not starting.failed
    assert gang_status([pod(0), starting], 2).state is None


def test_a_finished_gang_reports_the_batch_step_of_rank_zero() -> None:
    """sacct's `batch` row of a Kubernetes job: rank 0's script from its pod's start to the
    gang's end, as slurmstepd records it: the script's status (FAILED 2:0), CANCELLED 0:15
    for an end that deleted the pods (time limit, scancel), none when rank 0 never ran."""
    gang = _gang()
    running = gang_status([pod(0), pod(1)], 2)
    gang.observe([replace(pod(0), started=100.0), pod(1)], running, mono=1.0)
    failed = Verdict.from_status(gang_status([pod(0, "Failed", exit_code=2), pod(1)], 2))
    event = gang.event(replace(failed, end_time=160.0), now=170.0)
    assert event.step is not None
    step = event.step
    assert (step.step_id, step.state, step.exit_code) == ("batch", JobState.FAILED, 512)
    assert (step.start_time, step.end_time, step.nodes) == (100.0, 160.0, ("n0",))
    timeout = Verdict(JobState.TIMEOUT, Reason.TIME_LIMIT, end_time=190.0)
    ended = gang.event(timeout, now=190.0).step
    assert ended is not None
    assert (ended.state, ended.exit_code) == (JobState.CANCELLED, 15)
    never = _gang()
    assert never.event(failed, now=1.0).step is None
    node_fail = Verdict(JobState.NODE_FAIL, Reason.NONE, end_time=5.0)
    assert gang.event(node_fail, now=5.0).step is None  # how its script ended is unknown
