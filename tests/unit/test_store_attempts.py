"""Every run of a requeued job is kept (as slurmdbd keeps them for `sacct --duplicates`):
the run a requeue ends is stored with its own times, nodes, state and steps, in the same
transaction as the requeue; databases of schema 1 and 2 are migrated."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gateway.control.transitions import requeued
from gateway.model.job import Job, Step
from gateway.model.state import JobState
from gateway.store.base import StoredEvent, StoreError, Submission
from gateway.store.sqlite import Batch, SqliteStore
from tests.support.builders import make_job

T0 = 1_700_000_000.0


def _running(job: Job, start: float, nodes: tuple[str, ...] = ("n01",)) -> Job:
    return replace(job, state=JobState.RUNNING, start_time=start, nodes=nodes, num_cpus=2)


def _step(job_id: int, step_id: str, run: int, state: JobState, start: float) -> Step:
    return Step(
        job_id=job_id,
        step_id=step_id,
        name=step_id,
        state=state,
        start_time=start,
        end_time=start + 5,
        exit_code=15 if state is JobState.CANCELLED else 0,
        run=run,
    )


def _requeue(store: SqliteStore, job: Job, at: float, kind: str = "requeue") -> Job:
    again = requeued(job, at)
    store.update([again], [StoredEvent(job.job_id, at, kind, {"state": again.state.long})])
    return again


def test_a_requeue_keeps_the_run_it_ended_with_its_steps(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "c.db")
    job = replace(make_job(5).build(), submit_time=T0)
    store.insert([Submission(job, "#!/bin/sh\n", {})])
    run0 = _running(job, T0 + 1)
    store.update([run0])
    store.add_steps([_step(5, "batch", 0, JobState.CANCELLED, T0 + 1)])
    job = _requeue(store, run0, T0 + 10)
    run1 = _running(job, T0 + 20, ("n02",))
    store.update([run1])
    store.add_steps([_step(5, "batch", 1, JobState.RUNNING, T0 + 20)])
    job = _requeue(store, run1, T0 + 30, kind="node-down")

    again = SqliteStore(tmp_path / "c.db")  # durable: read through a new connection
    attempts = again.attempts([5])
    got = [
        (a.restart_count, a.state, a.submit_time, a.start_time, a.end_time, a.nodes, a.num_cpus)
        for a in attempts
    ]
    assert got == [
        (0, JobState.REQUEUED, T0, T0 + 1, T0 + 10, ("n01",), 2),
        (1, JobState.NODE_FAIL, T0 + 10, T0 + 20, T0 + 30, ("n02",), 2),
    ]
    current = again.get(5)
    assert current is not None
    assert (current.state, current.restart_count, current.submit_time) == (
        JobState.PENDING,
        2,
        T0 + 30,
    )
    assert [(s.run, s.step_id, s.state) for s in again.steps([5])] == [
        (0, "batch", JobState.CANCELLED),
        (1, "batch", JobState.RUNNING),
    ]


def test_a_run_that_never_started_leaves_no_attempt(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "c.db")
    job = make_job(6).build()
    store.insert([Submission(job, "#!/bin/sh\n", {})])
    _requeue(store, job, T0, kind="backend")
    assert store.attempts([6]) == []
    assert store.get(6) is not None


def test_a_run_that_had_finished_keeps_its_record_when_requeued_later(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "c.db")
    job = make_job(9).build()
    store.insert([Submission(job, "#!/bin/sh\n", {})])
    failed = replace(_running(job, T0), state=JobState.FAILED, end_time=T0 + 2, exit_code=3 << 8)
    store.update([failed])
    _requeue(store, failed, T0 + 50)  # `scontrol requeue` of a finished job, as Slurm allows
    assert store.attempts([9]) == [failed]


def test_a_requeue_and_the_next_start_merged_in_one_batch_keep_the_ended_run(
    tmp_path: Path,
) -> None:
    store = SqliteStore(tmp_path / "c.db")
    job = make_job(7).build()
    store.insert([Submission(job, "#!/bin/sh\n", {})])
    batch = Batch(updates=[_running(job, T0)])
    pending = requeued(batch.updates[0], T0 + 3)
    batch.merge(Batch(updates=[pending], events=[StoredEvent(7, T0 + 3, "backend", {})]))
    batch.merge(Batch(updates=[_running(pending, T0 + 4)]))
    store.apply(batch)
    [attempt] = store.attempts([7])
    assert (attempt.state, attempt.start_time, attempt.end_time) == (
        JobState.NODE_FAIL,
        T0,
        T0 + 3,
    )
    current = store.get(7)
    assert current is not None
    assert current.state is JobState.RUNNING


def test_the_attempt_commits_with_the_requeue_or_not_at_all(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "c.db")
    job = make_job(8).build()
    store.insert([Submission(job, "#!/bin/sh\n", {})])
    ran = _running(job, T0)
    store.update([ran])
    batch = Batch(
        updates=[requeued(ran, T0 + 5)],
        submissions=[Submission(make_job(8).build(), "dup", {})],  # a real constraint failure
    )
    with pytest.raises(StoreError):
        store.apply(batch)
    assert store.attempts([8]) == []
    assert store.get(8) == ran


_SCHEMA_2 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE jobs (job_id INTEGER PRIMARY KEY, array_job_id INTEGER NOT NULL,
    uid INTEGER NOT NULL, state TEXT NOT NULL, finished INTEGER NOT NULL, name TEXT NOT NULL,
    partition TEXT NOT NULL, submit_time REAL NOT NULL, start_time REAL, end_time REAL,
    doc BLOB NOT NULL);
CREATE TABLE scripts (job_id INTEGER PRIMARY KEY, script TEXT NOT NULL, env BLOB NOT NULL);
CREATE TABLE steps (job_id INTEGER NOT NULL, step_id TEXT NOT NULL, doc BLOB NOT NULL,
    PRIMARY KEY (job_id, step_id));
CREATE TABLE events (seq INTEGER PRIMARY KEY AUTOINCREMENT, job_id INTEGER NOT NULL,
    time REAL NOT NULL, kind TEXT NOT NULL, detail BLOB NOT NULL);
CREATE TABLE submissions (uid INTEGER NOT NULL, token TEXT NOT NULL, job_id INTEGER NOT NULL,
    time REAL NOT NULL, PRIMARY KEY (uid, token));
INSERT INTO meta VALUES ('schema', '2');
"""


def _old_store(db: Path, version: int) -> None:
    """A database as schema 2 (or 1: without submission tokens) wrote it: a job in its
    second run with a step, and a job whose record is damaged, with a step."""
    import orjson

    from gateway.model.codec import job_to_dict, step_to_dict

    job = replace(_running(make_job(3).build(), T0), restart_count=1)
    step = _step(3, "batch", 0, JobState.RUNNING, T0)
    doc = orjson.dumps(job_to_dict(job))
    conn = sqlite3.connect(db)
    conn.executescript(_SCHEMA_2)
    row = (3, 0, job.uid, "RUNNING", 0, "x", "debug", T0, T0, None, doc)
    conn.execute("INSERT INTO jobs VALUES (?,?,?,?,?,?,?,?,?,?,?)", row)
    conn.execute("INSERT INTO jobs VALUES (?,?,?,?,?,?,?,?,?,?,?)", (4, *row[1:10], b"{bad"))
    for job_id in (3, 4):
        conn.execute(
            "INSERT INTO steps VALUES (?,?,?)",
            (job_id, "batch", orjson.dumps(step_to_dict(replace(step, job_id=job_id)))),
        )
    if version == 1:
        conn.execute("DROP TABLE submissions")
        conn.execute("UPDATE meta SET value='1'")
    conn.commit()
    conn.close()


@pytest.mark.parametrize("version", [1, 2])
def test_an_older_store_is_migrated_with_its_steps_in_the_current_run(
    tmp_path: Path, version: int
) -> None:
    db = tmp_path / "c.db"
    _old_store(db, version)
    store = SqliteStore(db)
    assert store._rows("SELECT value FROM meta") == [("5",)]  # 5: policy
    assert [(s.job_id, s.run, s.step_id) for s in store.steps([3, 4])] == [
        (3, 1, "batch"),  # the job's restart count when the step was stored
        (4, 0, "batch"),  # a damaged job record does not stop the migration
    ]
    assert store.attempts([3]) == []
    run1 = store.get(3)
    assert run1 is not None
    _requeue(store, run1, T0 + 9)
    assert [(a.restart_count, a.state) for a in store.attempts([3])] == [(1, JobState.REQUEUED)]
    store.close()
    assert SqliteStore(db)._rows("SELECT value FROM meta") == [("5",)]  # reopened: unchanged


def test_sacct_prints_each_stored_run_with_its_own_steps_and_only_the_last_without_d(
    tmp_path: Path,
) -> None:
    from gateway.compat.sacct_fmt import SacctOptions, render_sacct
    from gateway.compat.sacct_fmt_json import sacct_json_doc

    store = SqliteStore(tmp_path / "c.db")
    job = replace(make_job(5).build(), submit_time=T0)
    store.insert([Submission(job, "#!/bin/sh\n", {})])
    run0 = _running(job, T0 + 1)
    store.update([run0])
    store.add_steps([_step(5, "0", 0, JobState.CANCELLED, T0 + 2)])
    store.add_steps([_step(5, "batch", 0, JobState.CANCELLED, T0 + 1)])
    job = _requeue(store, run0, T0 + 10)
    current = replace(job, state=JobState.CANCELLED, start_time=T0 + 12, end_time=T0 + 12)
    store.update([current])
    records = [*store.attempts([5]), *[j for j in [store.get(5)] if j is not None]]
    steps: dict[int, list[Step]] = {}
    for step in store.steps([5]):
        steps.setdefault(step.job_id, []).append(step)
    fields = "JobID,State,ExitCode,Elapsed"
    every = render_sacct(
        records, steps, SacctOptions(fields=fields, parsable2=True, duplicates=True), now=T0
    )
    assert every.splitlines()[1:] == [
        "5|REQUEUED|0:0|00:00:09",
        "5.batch|CANCELLED|0:15|00:00:05",  # slurmdbd's order: by start
        "5.0|CANCELLED|0:15|00:00:05",
        "5|CANCELLED|0:0|00:00:00",
    ]
    latest = render_sacct(records, steps, SacctOptions(fields=fields, parsable2=True), now=T0)
    assert latest.splitlines()[1:] == ["5|CANCELLED|0:0|00:00:00"]
    doc: Any = sacct_json_doc(records, steps, now=T0)  # sacct --json: every record
    got = [(r["state"]["current"], len(r["steps"])) for r in doc["jobs"]]
    assert got == [("REQUEUED", 2), ("CANCELLED", 0)]
