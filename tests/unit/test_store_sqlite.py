"""The SQLite store: durability settings, round trips, queries, group commit."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import pytest

from gateway.compat.arrays import parse_array
from gateway.control.arraytasks import Target, parse_targets, remove_index
from gateway.model.job import Step
from gateway.model.state import JobState
from gateway.store.base import JobQuery, StoredEvent, StoreError, Submission
from gateway.store.committer import GroupCommitter
from gateway.store.sqlite import Batch, SqliteStore
from tests.support.builders import make_job


def test_the_database_is_in_wal_mode_with_full_sync(tmp_path: Path):
    store = SqliteStore(tmp_path / "c.db")
    conn = store._conn()
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_a_stored_job_reads_back_equal_with_its_script_and_events(tmp_path: Path):
    store = SqliteStore(tmp_path / "c.db")
    job = make_job(7).array("1-5:2%1").gpus(2).depends("afterok:3_*+5").build()
    store.insert([Submission(job, "#!/bin/sh\necho hi\n", {"A": "1"})])
    store.update([replace(job, state=JobState.RUNNING)], [StoredEvent(7, 1.0, "start", {"n": 1})])
    again = SqliteStore(tmp_path / "c.db")
    got = again.get(7)
    assert got == replace(job, state=JobState.RUNNING)
    assert again.script(7) == ("#!/bin/sh\necho hi\n", {"A": "1"})
    assert [e.kind for e in again.events(7)] == ["start"]
    assert again.max_job_id() == 7


def test_active_and_accounting_queries(tmp_path: Path):
    store = SqliteStore(tmp_path / "c.db")
    done = make_job(1).state(JobState.COMPLETED, end_time=100.0).build()
    running = make_job(2).state(JobState.RUNNING, start_time=50.0).build()
    pending = make_job(3).user(42).build()
    store.insert([Submission(j, "#!/bin/sh\n", {}) for j in (done, running, pending)])
    assert [j.job_id for j in store.active()] == [2, 3]
    assert [j.job_id for j in store.query(JobQuery(users=[42]))] == [3]
    assert [j.job_id for j in store.query(JobQuery(states=[JobState.COMPLETED]))] == [1]
    store.add_steps([Step(job_id=1, step_id="batch", name="batch", state=JobState.COMPLETED)])
    assert [s.step_id for s in store.steps([1, 2])] == ["batch"]


def test_a_duplicate_job_id_is_refused_and_nothing_of_that_batch_is_kept(tmp_path: Path):
    store = SqliteStore(tmp_path / "c.db")
    store.insert([Submission(make_job(1).build(), "#!/bin/sh\n", {})])
    with pytest.raises(Exception, match="UNIQUE"):
        store.insert(
            [Submission(make_job(2).build(), "x", {}), Submission(make_job(1).build(), "y", {})]
        )
    assert store.get(2) is None


def test_group_commit_merges_concurrent_writers_and_each_sees_its_own_outcome(tmp_path: Path):
    store = SqliteStore(tmp_path / "c.db")
    committer = GroupCommitter(store)
    futures = [
        committer.submit(Batch(submissions=[Submission(make_job(i).build(), "s", {})]))
        for i in range(1, 201)
    ]
    bad = committer.submit(Batch(submissions=[Submission(make_job(5).build(), "dup", {})]))
    for f in futures:
        f.result(timeout=10)
    with pytest.raises(StoreError, match="UNIQUE"):
        bad.result(timeout=10)
    committer.close()
    assert store.max_job_id() == 200
    assert committer.commits < 200  # batched


def test_reads_work_from_other_threads(tmp_path: Path):
    store = SqliteStore(tmp_path / "c.db")
    store.insert([Submission(make_job(1).build(), "s", {})])
    seen: list[int] = []
    t = threading.Thread(target=lambda: seen.append(store.max_job_id()))
    t.start()
    t.join()
    assert seen == [1]


def test_removing_array_indices_keeps_the_rest_compact():
    spec = parse_array("0-999999", 1_000_001)
    assert spec is not None
    rest = remove_index(spec, 0)
    assert rest is not None
    assert rest.render() == "1-999999"
    rest = remove_index(rest, 500)
    assert rest is not None
    assert rest.render() == "1-499,501-999999"
    assert rest.count == 999998
    single = parse_array("4")
    assert single is not None
    assert remove_index(single, 4) is None


def test_job_targets_parse_as_scancel_reads_them():
    assert parse_targets("12") == [Target(12)]
    assert parse_targets("12_3 14") == [Target(12, (3,)), Target(14)]
    assert parse_targets("12_[1-3,7]") == [Target(12, (1, 2, 3, 7))]
    for bad in ("abc", "12_", "12_[x]", "0", "12x"):
        assert parse_targets(bad) is None
