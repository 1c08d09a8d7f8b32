"""The local backend's spool records, mount parsing and srun's reporting (no processes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from containers.docker_runner import parse_mounts
from containers.spool import (
    ContainerPlan,
    JobPlan,
    JobResult,
    SupervisorInfo,
    read_json,
    read_step,
    step_to_json,
    write_json,
)
from containers.srun_io import describe_failures
from gateway.model.job import Step, wait_status
from gateway.model.state import JobState, Reason


def _plan(**changes: object) -> JobPlan:
    values: dict[str, object] = dict(
        job_id=5,
        name="j",
        node="n1",
        user="u",
        uid=1,
        gid=2,
        groups=(2, 3),
        workdir="/w",
        script="/s",
        args=("a",),
        env={"X": "1"},
        stdin="/dev/null",
        stdout="/w/o",
        stderr=None,
        open_append=False,
        time_limit_s=60.0,
        kill_wait_s=30.0,
        signal=(10, 60.0, True),
        memory_limit_mb=100,
        cpus=2,
        ntasks=1,
    )
    values.update(changes)
    return JobPlan(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "plan",
    [
        _plan(),
        _plan(signal=None, time_limit_s=None),
        _plan(container=ContainerPlan("img", "unix:///s", (("/a", "/b", True),), "/wd", "c")),
    ],
)
def test_job_plans_survive_their_json_form(tmp_path: Path, plan: JobPlan) -> None:
    write_json(tmp_path / "plan.json", plan.to_json())
    data = read_json(tmp_path / "plan.json")
    assert isinstance(data, dict)
    assert JobPlan.from_json(data) == plan


def test_results_survive_their_json_form() -> None:
    result = JobResult(
        JobState.OUT_OF_MEMORY,
        253,
        wait_status(2),
        Reason.NONE,
        1.0,
        2.0,
        message="m",
        max_rss_kb=7,
    )
    assert JobResult.from_json(json.loads(json.dumps(result.to_json()))) == result


def test_broken_or_partial_records_read_as_missing(tmp_path: Path) -> None:
    (tmp_path / "half.json").write_text('{"state": "RUN')
    assert read_json(tmp_path / "half.json") is None
    assert read_json(tmp_path / "absent.json") is None
    assert SupervisorInfo.from_json({"pid": "x"}) is None
    assert JobResult.from_json({"state": "NOPE"}) is None
    (tmp_path / "bad-step.json").write_text('{"step_id": "0", "state": "WHAT"}')
    assert read_step(tmp_path / "bad-step.json", 1) is None


def test_step_records_round_trip(tmp_path: Path) -> None:
    step = Step(
        job_id=4,
        step_id="2",
        name="bash",
        state=JobState.FAILED,
        start_time=1.0,
        end_time=2.0,
        exit_code=wait_status(3),
        nodes=("n1",),
        ntasks=2,
        cpus=2,
    )
    write_json(tmp_path / "2.json", step_to_json(step))
    assert read_step(tmp_path / "2.json", 4) == step


def test_write_json_replaces_atomically_and_leaves_no_temporaries(tmp_path: Path) -> None:
    write_json(tmp_path / "a.json", {"v": 1})
    write_json(tmp_path / "a.json", {"v": 2})
    assert read_json(tmp_path / "a.json") == {"v": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


@pytest.mark.parametrize(
    ("items", "mounts"),
    [
        (("/a:/b",), (("/a", "/b", False),)),
        (("/a",), (("/a", "/a", False),)),
        (("/a:/b:ro,/c:/d:rw",), (("/a", "/b", True), ("/c", "/d", False))),
        (("/x::ro",), (("/x", "/x", True),)),
    ],
)
def test_container_mounts_read_as_pyxis_reads_them(
    items: tuple[str, ...], mounts: tuple[tuple[str, str, bool], ...]
) -> None:
    assert parse_mounts(items) == mounts


def test_srun_reports_failed_tasks_as_srun_groups_them() -> None:
    statuses = [wait_status(2), wait_status(5), wait_status(signal=9), wait_status(signal=9), 0]
    assert describe_failures("n1", dict(enumerate(statuses))) == [
        "srun: error: n1: task 0: Exited with exit code 2",
        "srun: error: n1: task 1: Exited with exit code 5",
        "srun: error: n1: tasks 2-3: Killed",
    ]
