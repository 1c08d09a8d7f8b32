"""The SQLite store's answers to faults: causes named as the system names them, private
files, submission tokens (with the migration of a version-1 store), damaged records."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import orjson
import pytest

from gateway.model.codec import job_to_dict
from gateway.store.base import StoreError, Submission
from gateway.store.sqlite import Batch, SqliteStore
from tests.support.builders import make_job


def _submit(store: SqliteStore, job_id: int, token: str | None = None) -> None:
    job = make_job(job_id).build()
    store.apply(Batch(submissions=[Submission(job, "#!/bin/sh\n", {"A": "1"}, token)]))


def test_a_full_database_is_reported_as_no_space_left(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "c.db")
    _submit(store, 1)
    size = store._rows("PRAGMA page_count")[0][0]
    store._rows(f"PRAGMA max_page_count={size}")  # SQLite's own SQLITE_FULL, no tmpfs needed
    big = Submission(make_job(2).build(), "#!/bin/sh\n" + "#" * 20_000, {})
    with pytest.raises(StoreError) as err:
        store.apply(Batch(submissions=[big]))
    assert err.value.cause == "No space left on device"
    assert store.max_job_id() == 1  # nothing of the failed batch was kept


def test_files_are_created_private_and_old_modes_are_fixed(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    SqliteStore(db).close()
    for name in ("c.db", "c.db-wal", "c.db-shm"):
        if (tmp_path / name).exists():
            assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600, name
    os.chmod(db, 0o644)
    SqliteStore(db)
    assert stat.S_IMODE(db.stat().st_mode) == 0o600


def test_a_token_finds_its_job_after_a_reopen(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "c.db")
    job = make_job(7).build()
    store.apply(Batch(submissions=[Submission(job, "#!/bin/sh\n", {}, "t" * 32)]))
    store.close()
    again = SqliteStore(tmp_path / "c.db")
    assert again.job_for_token(job.uid, "t" * 32) == 7
    assert again.job_for_token(job.uid + 1, "t" * 32) is None
    assert again.job_for_token(job.uid, "u" * 32) is None


def test_a_version_1_store_is_migrated(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    store = SqliteStore(db)
    _submit(store, 3)
    store.close()
    conn = sqlite3.connect(db)
    conn.execute("DROP TABLE submissions")
    conn.execute("UPDATE meta SET value='1' WHERE key='schema'")
    conn.commit()
    conn.close()
    migrated = SqliteStore(db)
    assert migrated._rows("SELECT value FROM meta WHERE key='schema'") == [("5",)]  # 5: policy
    assert [j.job_id for j in migrated.active()] == [3]
    _submit(migrated, 4, "x" * 32)
    assert migrated.job_for_token(make_job(4).build().uid, "x" * 32) == 4


def test_an_undecodable_record_is_skipped_and_named(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    store = SqliteStore(db)
    for job_id in (1, 2, 3):
        _submit(store, job_id)
    bad_state = {**job_to_dict(make_job(3).build()), "state": "BOGUS"}
    store.close()
    conn = sqlite3.connect(db)
    conn.execute("UPDATE jobs SET doc=? WHERE job_id=2", (b"{not json",))
    conn.execute("UPDATE jobs SET doc=? WHERE job_id=3", (orjson.dumps(bad_state),))
    conn.commit()
    conn.close()
    again = SqliteStore(db)
    assert [j.job_id for j in again.active()] == [1]
    assert sorted(again.unreadable) == [2, 3]
    assert again.get(2) is None
    assert again.max_job_id() == 3
    assert again.check_integrity() == []
