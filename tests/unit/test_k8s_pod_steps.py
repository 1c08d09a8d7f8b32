"""sacct's srun steps of a Kubernetes job: srun in rank 0's pod appends one record per
finished step to its termination message (k8s_bridge/pod_step_files.py); the backend reads
them from the pod and reports them with the job's end (pod_steps.py, gang.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from gateway.model.backend import EventKind
from gateway.model.state import JobState
from k8s_bridge.gang import Gang, Verdict
from k8s_bridge.lifecycle import PodState, gang_status, parse_pod
from k8s_bridge.options import GangMode, K8sOptions
from k8s_bridge.pod_steps import split_message, srun_steps
from k8s_bridge.pod_wire import STEP_RECORD
from k8s_bridge.render import render_gang
from k8s_bridge.request import GangRequest
from k8s_bridge.states import LOST
from tests.support.builders import make_job


def _record(step_id: str, ranks: list[int], **fields: Any) -> str:
    data = {
        "step_id": step_id,
        "name": "hostname",
        "ranks": ranks,
        "ntasks": 2,
        "cpus": 2,
        "start_time": 100.5,
        "end_time": 101.25,
        "exit_code": 0,
        "state": "COMPLETED",
        **fields,
    }
    return json.dumps(data)


def test_a_termination_message_splits_into_step_lines_and_the_rest() -> None:
    text = f'{STEP_RECORD}{{"a":1}}\nthe user said this\n{STEP_RECORD}{{"b":2}}\n'
    assert split_message(text) == (('{"a":1}', '{"b":2}'), "the user said this")
    assert split_message("") == ((), "")


def test_steps_land_on_their_ranks_nodes_and_bad_records_are_left_out() -> None:
    placed = {0: "node-a", 1: "node-b"}
    records = [
        _record("1", [0, 1], exit_code=512, state="FAILED"),
        '_id":"9","name":"cut by the kubelet"}',  # the kept tail may start mid-line
        _record("0", [0]),
        _record("2", [2]),  # a rank that never had a node
        _record("batch", [0]),  # only srun's numbered steps come from here
        _record("3", [0], state="PWNED"),
        _record("4", "0"),  # type: ignore[arg-type]
        "[1, 2]",
        _record("1", [1], name="again"),  # the later record of a step wins
    ]
    steps = srun_steps(records, job_id=7, run=2, placed_on=placed)
    assert [(s.step_id, s.name, s.nodes, s.state, s.exit_code) for s in steps] == [
        ("0", "hostname", ("node-a",), JobState.COMPLETED, 0),
        ("1", "again", ("node-b",), JobState.COMPLETED, 0),
    ]
    assert {(s.job_id, s.run, s.start_time, s.end_time) for s in steps} == {(7, 2, 100.5, 101.25)}


def _pod_object(rank: int, message: str) -> dict[str, Any]:
    term = {"exitCode": 0, "reason": "Completed", "message": message}
    return {
        "metadata": {
            "name": f"caldera-9-{rank}",
            "labels": {"caldera.io/job-id": "9", "caldera.io/rank": str(rank)},
        },
        "spec": {"nodeName": f"n{rank}"},
        "status": {
            "phase": "Succeeded",
            "startTime": "2026-01-01T00:00:00Z",
            "containerStatuses": [{"state": {"terminated": term}}],
        },
    }


def _gang() -> Gang:
    job = make_job(9).nodes(2).build()
    req = GangRequest(job_id=9, spec=job.spec, user="u", uid=1, gid=1, script="#!/bin/sh\n")
    manifests = render_gang(req, K8sOptions(), GangMode.CALDERA)
    return Gang(job=job, names=manifests.names, manifests=manifests, submitted=0.0)


def test_a_finished_gang_reports_rank_zeros_srun_steps_before_its_end() -> None:
    message = f"{STEP_RECORD}{_record('0', [0, 1])}\n{STEP_RECORD}{_record('1', [1])}\nbye"
    rank0 = parse_pod(_pod_object(0, message))
    assert rank0 is not None
    assert (len(rank0.steps), rank0.message) == (2, "bye")
    rank1 = parse_pod(_pod_object(1, f"{STEP_RECORD}{_record('5', [1])}"))  # not rank 0's
    assert rank1 is not None
    pods: list[PodState] = [rank0, rank1]
    gang = _gang()
    status = gang_status(pods, 2)
    gang.observe(pods, status, mono=1.0)
    events = gang.events(replace(Verdict.from_status(status), end_time=200.0), now=201.0)
    assert [(e.kind, e.step.step_id if e.step else None) for e in events] == [
        (EventKind.STEP, "0"),
        (EventKind.STEP, "1"),
        (EventKind.FINISHED, "batch"),
    ]
    assert events[0].step is not None
    assert events[0].step.nodes == ("n0", "n1")
    assert {e.run for e in events} == {gang.names.attempt}
    lost = gang.events(Verdict(LOST), now=1.0)  # requeued as a whole: the job goes on
    assert [e.kind for e in lost] == [EventKind.LOST]
