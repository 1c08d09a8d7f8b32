"""The dashboard's pure views: the queue paged, sorted and filtered on the server, and the
output tail shown only from a file its job's owner owns."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from gateway.dashboard.detail import read_tail
from gateway.dashboard.views import QueueQuery, queue_page
from gateway.model.job import Job
from gateway.model.state import JobState
from tests.support.builders import make_job


def _jobs() -> list[Job]:
    out = []
    for i in range(1, 101):
        job = make_job(i).build()
        out.append(
            replace(
                job,
                user=f"u{i % 3}",
                partition="gpu" if i % 4 == 0 else "debug",
                cluster="east" if i % 5 == 0 else "caldera",
                state=JobState.RUNNING if i % 2 == 0 else JobState.PENDING,
                priority=1000 - i,
            )
        )
    return out


def test_pages_cover_the_queue_once_in_order() -> None:
    jobs = _jobs()
    seen: list[int] = []
    for offset in range(0, 100, 30):
        page = queue_page(jobs, QueueQuery(offset=offset, limit=30), now=0.0)
        assert page["total"] == page["matching"] == 100
        seen += [r["job_id"] for r in page["rows"]]
    assert seen == list(range(1, 101))


def test_filters_combine_and_counts_cover_everything() -> None:
    page = queue_page(
        _jobs(), QueueQuery(user="u1", state="R", partition="gpu", limit=500), now=0.0
    )
    want = [i for i in range(1, 101) if i % 3 == 1 and i % 2 == 0 and i % 4 == 0]
    assert [r["job_id"] for r in page["rows"]] == want
    assert page["counts"] == {"RUNNING": 50, "PENDING": 50}
    assert page["choices"]["clusters"] == ["caldera", "east"]
    assert page["choices"]["users"] == ["u0", "u1", "u2"]
    east = queue_page(_jobs(), QueueQuery(cluster="east", limit=500), now=0.0)
    assert [r["job_id"] for r in east["rows"]] == list(range(5, 101, 5))


def test_an_unknown_state_matches_nothing() -> None:
    assert queue_page(_jobs(), QueueQuery(state="NOPE"), now=0.0)["matching"] == 0


def test_sorts_are_stable_by_id_both_ways() -> None:
    jobs = _jobs()
    up = queue_page(jobs, QueueQuery(sort="user", limit=500), now=0.0)["rows"]
    assert [(r["user"], r["job_id"]) for r in up] == sorted((r["user"], r["job_id"]) for r in up)
    down = queue_page(jobs, QueueQuery(sort="priority", descending=True, limit=3), now=0.0)
    assert [r["job_id"] for r in down["rows"]] == [1, 2, 3]  # priority 1000 - id
    ids = queue_page(jobs, QueueQuery(descending=True, limit=2), now=0.0)["rows"]
    assert [r["job_id"] for r in ids] == [100, 99]


def test_rows_hold_no_script_environment_or_paths() -> None:
    row = queue_page(_jobs(), QueueQuery(limit=1), now=0.0)["rows"][0]
    assert not {"script", "environment", "env", "stdout", "workdir", "command"} & set(row)


def test_the_page_size_is_bounded() -> None:
    assert len(queue_page(_jobs(), QueueQuery(limit=10_000), now=0.0)["rows"]) == 100
    assert queue_page(_jobs(), QueueQuery(limit=10_000), now=0.0)["limit"] == 500


def test_output_tail_only_from_the_owners_regular_file(tmp_path: Path) -> None:
    out = tmp_path / "slurm-1.out"
    out.write_text("".join(f"line {i}\n" for i in range(10_000)))
    mine = os.getuid()
    tail = read_tail(str(out), mine, limit=100)
    assert tail is not None
    assert tail.endswith("line 9999\n")
    assert not tail.startswith("ine")  # the cut first line is dropped
    assert read_tail(str(out), mine + 1) is None  # not the owner's file
    link = tmp_path / "link.out"
    link.symlink_to(out)
    assert read_tail(str(link), mine) is None  # a symlink is not followed
    assert read_tail(str(tmp_path), mine) is None  # not a regular file
    assert read_tail(str(tmp_path / "missing"), mine) is None


@pytest.mark.parametrize("name", ["<script>alert(1)</script>", "a&b"])
def test_names_pass_through_unescaped_for_the_page_to_show_as_text(name: str) -> None:
    job = replace(make_job(1).build(), spec=replace(make_job(1).build().spec, name=name))
    assert queue_page([job], QueueQuery(), now=0.0)["rows"][0]["name"] == name
