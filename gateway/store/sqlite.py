"""SQLite store in WAL mode with full synchronous commits (durable before a job id is printed).

Jobs are kept as JSON documents with a few indexed columns for queries. Writers batch: one
`apply()` call is one transaction, and the group committer in `committer.py` merges
concurrent submissions into one call, so one fsync serves many jobs. A requeued job's
earlier runs are kept as attempt records with their steps (`attempts.py`).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson

from gateway.model.codec import job_from_dict, job_to_dict, step_from_dict, step_to_dict
from gateway.model.job import Job, Step
from gateway.store import policy_store as ps
from gateway.store.attempts import finished_attempt, migrate_to_attempts
from gateway.store.base import JobQuery, StoredEvent, StoreError, Submission
from gateway.store.node_admin import (
    NODE_ADMIN_DDL,
    NodeAdmin,
    load_node_admin,
    migrate_to_node_admin,
    save_node_admin,
)
from gateway.store.textcodec import env_from_db, env_to_db, script_from_db, script_to_db

__all__ = ["Batch", "SqliteStore", "store_error"]

log = logging.getLogger("caldera.store")

_SCHEMA_VERSION = 5  # 2: tokens; 3: attempts, steps per run; 4: drained nodes; 5: policy
_SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    job_id INTEGER PRIMARY KEY,
    array_job_id INTEGER NOT NULL,
    uid INTEGER NOT NULL,
    state TEXT NOT NULL,
    finished INTEGER NOT NULL,
    name TEXT NOT NULL,
    partition TEXT NOT NULL,
    submit_time REAL NOT NULL,
    start_time REAL,
    end_time REAL,
    doc BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_active ON jobs(finished) WHERE finished = 0;
CREATE INDEX IF NOT EXISTS jobs_array ON jobs(array_job_id);
CREATE INDEX IF NOT EXISTS jobs_end ON jobs(end_time);
CREATE TABLE IF NOT EXISTS scripts (job_id INTEGER PRIMARY KEY, script TEXT NOT NULL,
                                    env BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS steps (job_id INTEGER NOT NULL, run INTEGER NOT NULL,
                                  step_id TEXT NOT NULL, doc BLOB NOT NULL,
                                  PRIMARY KEY (job_id, run, step_id));
CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY AUTOINCREMENT,
                                   job_id INTEGER NOT NULL, time REAL NOT NULL,
                                   kind TEXT NOT NULL, detail BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS events_job ON events(job_id);
CREATE TABLE IF NOT EXISTS submissions (uid INTEGER NOT NULL, token TEXT NOT NULL,
                                        job_id INTEGER NOT NULL, time REAL NOT NULL,
                                        PRIMARY KEY (uid, token));
CREATE TABLE IF NOT EXISTS attempts (job_id INTEGER NOT NULL, run INTEGER NOT NULL,
                                     doc BLOB NOT NULL, PRIMARY KEY (job_id, run));
"""
    + NODE_ADMIN_DDL
    + ps.POLICY_DDL
)
_TOKEN_TTL_S = 7 * 86400  # a retry comes within seconds; a week is generous
_DECODE_ERRORS = (ValueError, KeyError, TypeError, AttributeError)

# What a user is told for SQLite's primary result codes (the rest: SQLite's own words)
_CAUSES = {
    "SQLITE_FULL": "No space left on device",
    "SQLITE_BUSY": "database is locked (another process holds the job store)",
    "SQLITE_LOCKED": "database is locked (another process holds the job store)",
    "SQLITE_IOERR": "Input/output error",
    "SQLITE_CORRUPT": "database disk image is malformed",
    "SQLITE_NOTADB": "file is not a database",
    "SQLITE_READONLY": "Read-only file system",
    "SQLITE_CANTOPEN": "unable to open the database file",
}


def store_error(path: str, exc: sqlite3.Error) -> StoreError:
    """A StoreError naming the cause as the operating system would (disk full, I/O error)."""
    primary = "_".join(str(exc.sqlite_errorname).split("_")[:2])  # SQLITE_IOERR_WRITE -> IOERR
    return StoreError(f"{path}: {exc}", _CAUSES.get(primary, str(exc)))


@dataclass
class Batch:
    """Writes that commit together."""

    submissions: list[Submission] = field(default_factory=list)
    updates: list[Job] = field(default_factory=list)
    events: list[StoredEvent] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)

    def merge(self, other: Batch) -> None:
        """Append another batch's writes to this one."""
        self.submissions.extend(other.submissions)
        self.updates.extend(other.updates)
        self.events.extend(other.events)
        self.steps.extend(other.steps)


def _job_row(job: Job) -> tuple[Any, ...]:
    return (
        job.job_id,
        job.array_job_id,
        job.uid,
        job.state.long,
        int(job.state.is_finished),
        job.spec.name,
        job.partition,
        job.submit_time,
        job.start_time,
        job.end_time,
        orjson.dumps(job_to_dict(job)),
    )


class SqliteStore:
    """The embedded store. Safe to use from several threads (a connection per thread)."""

    def __init__(self, path: str | Path, busy_timeout_ms: int = 10_000) -> None:
        self.path = str(path)
        self.busy_timeout_ms = busy_timeout_ms
        self._local = threading.local()
        self._write_lock = threading.Lock()
        # job id -> why its stored record cannot be read (it is skipped, never served)
        self.unreadable: dict[int, str] = {}
        _create_private(self.path)
        try:
            conn = self._conn()
            conn.executescript(_SCHEMA)
            row = conn.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
            if row is None:
                conn.execute(
                    "INSERT INTO meta(key, value) VALUES ('schema', ?)", (str(_SCHEMA_VERSION),)
                )
            elif int(row[0]) in (1, 2, 3, 4):  # 4: no policy, 3 no drained nodes, 2 no attempts
                self._migrate(conn)
            elif int(row[0]) != _SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path}: schema version {row[0]}, expected {_SCHEMA_VERSION}"
                )
            conn.execute("DELETE FROM submissions WHERE time < ?", (time.time() - _TOKEN_TTL_S,))
        except sqlite3.Error as exc:
            raise store_error(self.path, exc) from exc

    def _migrate(self, conn: sqlite3.Connection) -> None:
        old = migrate_to_attempts(conn, _SCHEMA)
        if migrate_to_node_admin(conn) and old is None:
            old = 3
        if ps.migrate_to_policy(conn) and old is None:
            old = 4
        if old is not None:
            log.info("%s: schema migrated from version %d to %d", self.path, old, _SCHEMA_VERSION)

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=True)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_ms)}")
            self._local.conn = conn
        return conn

    def _rows(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        try:
            return self._conn().execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise store_error(self.path, exc) from exc

    def check_integrity(self, quick: bool = True) -> list[str]:
        """SQLite's own check of every page (`quick_check` skips index contents: linear
        time); [] when sound, else its first complaints."""
        pragma = "quick_check" if quick else "integrity_check"
        try:
            rows = self._conn().execute(f"PRAGMA {pragma}(20)").fetchall()
        except sqlite3.Error as exc:
            return [str(exc)]
        found = [str(r[0]) for r in rows]
        return [] if found == ["ok"] else found

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn()
        with self._write_lock:
            try:
                conn.execute("BEGIN IMMEDIATE")
                yield conn
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                if conn.in_transaction:
                    with suppress(sqlite3.Error):  # SQLite rolls back by itself when it cannot
                        conn.execute("ROLLBACK")
                raise store_error(self.path, exc) from exc

    # --- writes ---------------------------------------------------------------------

    def apply(self, batch: Batch) -> None:
        """Commit a batch of writes as one transaction (one fsync)."""
        with self._tx() as conn:
            if batch.submissions:
                conn.executemany(
                    "INSERT INTO jobs VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    [_job_row(s.job) for s in batch.submissions],
                )
                conn.executemany(
                    "INSERT OR REPLACE INTO scripts VALUES (?,?,?)",
                    [
                        (s.job.job_id, script_to_db(s.script), env_to_db(s.environment))
                        for s in batch.submissions
                    ],
                )
                conn.executemany(
                    "INSERT INTO submissions VALUES (?,?,?,?)",
                    [
                        (s.job.uid, s.token, s.job.job_id, s.job.submit_time)
                        for s in batch.submissions
                        if s.token is not None
                    ],
                )
            if batch.updates:
                conn.executemany(
                    "INSERT OR REPLACE INTO attempts VALUES (?,?,?)",
                    [
                        (a.job_id, a.restart_count, orjson.dumps(job_to_dict(a)))
                        for a in self._ended_runs(conn, batch)
                    ],
                )
                conn.executemany(
                    "INSERT OR REPLACE INTO jobs VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    [_job_row(j) for j in batch.updates],
                )
            if batch.steps:
                conn.executemany(
                    "INSERT OR REPLACE INTO steps VALUES (?,?,?,?)",
                    [
                        (s.job_id, s.run, s.step_id, orjson.dumps(step_to_dict(s)))
                        for s in batch.steps
                    ],
                )
            if batch.events:
                conn.executemany(
                    "INSERT INTO events(job_id, time, kind, detail) VALUES (?,?,?,?)",
                    [
                        (e.job_id, e.time, e.kind, orjson.dumps(dict(e.detail)))
                        for e in batch.events
                    ],
                )

    def _ended_runs(self, conn: sqlite3.Connection, batch: Batch) -> list[Job]:
        """The runs this batch's updates requeue (restart count raised), as they ran: the
        stored record, or an earlier update of the same batch."""
        latest: dict[int, Job] = {}
        out: list[Job] = []
        for job in batch.updates:
            ran = latest.get(job.job_id)
            if ran is None and job.restart_count > 0:
                row = conn.execute("SELECT doc FROM jobs WHERE job_id=?", (job.job_id,)).fetchone()
                try:
                    ran = job_from_dict(orjson.loads(row[0])) if row else None
                except _DECODE_ERRORS as exc:  # a damaged record: the run is not accounted
                    log.error("job %s: stored record unreadable, run not kept: %s", job.job_id, exc)
            if ran is not None and ran.restart_count < job.restart_count:
                attempt = finished_attempt(ran, batch.events, time.time())
                if attempt is not None:
                    out.append(attempt)
            latest[job.job_id] = job
        return out

    def insert(self, submissions: Sequence[Submission]) -> None:
        """Store new jobs; durable when this returns."""
        self.apply(Batch(submissions=list(submissions)))

    def update(self, jobs: Sequence[Job], events: Sequence[StoredEvent] = ()) -> None:
        """Replace job records and append events atomically."""
        self.apply(Batch(updates=list(jobs), events=list(events)))

    def add_steps(self, steps: Sequence[Step]) -> None:
        """Insert or replace step records."""
        self.apply(Batch(steps=list(steps)))

    # --- reads ----------------------------------------------------------------------

    def _jobs(self, sql: str, args: Sequence[Any] = ()) -> list[Job]:
        """Decoded job records; one that cannot be decoded (a damaged row) is skipped and
        named in the log once, never raised to the caller (it would stop start-up)."""
        jobs: list[Job] = []
        for job_id, doc in self._rows(sql.replace("SELECT doc", "SELECT job_id, doc", 1), args):
            try:
                jobs.append(job_from_dict(orjson.loads(doc)))
            except _DECODE_ERRORS as exc:
                if job_id not in self.unreadable:
                    self.unreadable[job_id] = f"{type(exc).__name__}: {exc}"[:200]
                    log.error(
                        "job %s: its stored record cannot be read (%s); it is skipped and left "
                        "in %s untouched for repair",
                        job_id,
                        self.unreadable[job_id],
                        self.path,
                    )
        return jobs

    def max_job_id(self) -> int:
        """The highest job id ever stored (0 when empty). In a damaged store (served when
        forced), the highest any readable table knows: never an id given out before."""
        try:
            return int(self._rows("SELECT MAX(job_id) FROM jobs")[0][0] or 0)
        except StoreError:
            found = [0]
            for table in ("jobs", "scripts", "events", "submissions"):
                with suppress(StoreError):
                    found.append(int(self._rows(f"SELECT MAX(job_id) FROM {table}")[0][0] or 0))  # noqa: S608
            return max(found)

    def get(self, job_id: int) -> Job | None:
        """One job."""
        jobs = self._jobs("SELECT doc FROM jobs WHERE job_id=?", (job_id,))
        return jobs[0] if jobs else None

    def job_for_token(self, uid: int, token: str) -> int | None:
        """The job a submission token of this user created, if any."""
        rows = self._rows("SELECT job_id FROM submissions WHERE uid=? AND token=?", (uid, token))
        return int(rows[0][0]) if rows else None

    def active(self) -> list[Job]:
        """Every unfinished job, by id. In a damaged store (served when forced), the jobs
        that can still be read one by one; the others are named in `unreadable`."""
        try:
            return self._jobs("SELECT doc FROM jobs WHERE finished=0 ORDER BY job_id")
        except StoreError:
            ids = self._rows("SELECT job_id FROM jobs INDEXED BY jobs_active WHERE finished=0")
        jobs: list[Job] = []
        for (job_id,) in sorted(ids):
            try:
                jobs.extend(self._jobs("SELECT doc FROM jobs WHERE job_id=?", (job_id,)))
            except StoreError as exc:
                self.unreadable[job_id] = exc.cause
                log.error("job %s: its stored record cannot be read (%s)", job_id, exc.cause)
        return jobs

    def query(self, q: JobQuery) -> list[Job]:
        """Jobs for accounting (sacct), by submit time then id."""
        where: list[str] = []
        args: list[Any] = []
        if q.job_ids is not None:
            marks = ",".join("?" * len(q.job_ids))
            where.append(f"(job_id IN ({marks}) OR array_job_id IN ({marks}))")
            args.extend(q.job_ids)
            args.extend(q.job_ids)
        if q.users is not None:
            where.append(f"uid IN ({','.join('?' * len(q.users))})")
            args.extend(q.users)
        if q.states is not None:
            where.append(f"state IN ({','.join('?' * len(q.states))})")
            args.extend(s.long for s in q.states)
        if q.names is not None:
            where.append(f"name IN ({','.join('?' * len(q.names))})")
            args.extend(q.names)
        if q.partitions is not None:
            where.append(f"partition IN ({','.join('?' * len(q.partitions))})")
            args.extend(q.partitions)
        if q.start_after is not None:
            where.append("(end_time IS NULL OR end_time >= ?)")
            args.append(q.start_after)
        if q.end_before is not None:
            where.append("COALESCE(start_time, submit_time) <= ?")
            args.append(q.end_before)
        sql = "SELECT doc FROM jobs"  # only "?" placeholders are interpolated below
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY submit_time, job_id"
        if q.limit is not None:
            sql += f" LIMIT {int(q.limit)}"
        return self._jobs(sql, args)

    def steps(self, job_ids: Sequence[int]) -> list[Step]:
        """Steps of every run of these jobs, by job, run, then start (slurmdbd's order:
        `batch` before the srun steps it starts)."""
        if not job_ids:
            return []
        marks = ",".join("?" * len(job_ids))
        rows = self._rows(
            f"SELECT run, doc FROM steps WHERE job_id IN ({marks}) "  # noqa: S608
            "ORDER BY job_id, run, step_id",
            list(job_ids),
        )
        steps = [replace(step_from_dict(orjson.loads(doc)), run=run) for run, doc in rows]
        inf = float("inf")
        return sorted(steps, key=lambda s: (s.job_id, s.run, s.start_time or inf, s.step_id))

    def attempts(self, job_ids: Sequence[int]) -> list[Job]:
        """The earlier runs of these jobs (ended by a requeue), by job then run."""
        if not job_ids:
            return []
        marks = ",".join("?" * len(job_ids))
        rows = self._rows(
            f"SELECT job_id, doc FROM attempts WHERE job_id IN ({marks}) "  # noqa: S608
            "ORDER BY job_id, run",
            list(job_ids),
        )
        out: list[Job] = []
        for job_id, doc in rows:
            try:
                out.append(job_from_dict(orjson.loads(doc)))
            except _DECODE_ERRORS as exc:
                log.error("job %s: a stored attempt cannot be read (%s); skipped", job_id, exc)
        return out

    def script(self, job_id: int) -> tuple[str, dict[str, str]] | None:
        """The script and environment a job (or its array) was submitted with."""
        rows = self._rows("SELECT script, env FROM scripts WHERE job_id=?", (job_id,))
        if not rows:
            return None
        row = rows[0]
        return script_from_db(row[0]), env_from_db(row[1])

    def events(self, job_id: int) -> list[StoredEvent]:
        """A job's event log, oldest first."""
        rows = self._rows(
            "SELECT job_id, time, kind, detail FROM events WHERE job_id=? ORDER BY seq", (job_id,)
        )
        return [StoredEvent(r[0], r[1], r[2], orjson.loads(r[3])) for r in rows]

    def node_admin(self) -> dict[str, NodeAdmin]:
        """Drained nodes by name."""
        try:
            return load_node_admin(self._conn())
        except sqlite3.Error as exc:
            raise store_error(self.path, exc) from exc

    def set_node_admin(self, drain: Sequence[NodeAdmin], resume: Sequence[str]) -> None:
        """Drain and resume nodes in one durable transaction."""
        with self._tx() as conn:
            save_node_admin(conn, drain, resume)

    def policy(self, cluster: str) -> tuple[ps.PolicyState | None, dict[int, float], float | None]:
        """The cluster's policy (None: never saved), decayed usage by association, last decay."""
        try:
            return (ps.load_policy(self._conn(), cluster), *ps.load_usage(self._conn(), cluster))
        except sqlite3.Error as exc:
            raise store_error(self.path, exc) from exc

    def save_policy(
        self, state: ps.PolicyState | None, usage: tuple[str, dict[int, float], float] | None = None
    ) -> None:
        """Replace the policy and/or (cluster, usage, decay time) in one transaction."""
        with self._tx() as conn:
            ps.save_both(conn, state, usage)

    def close(self) -> None:
        """Close this thread's connection."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


def _create_private(path: str) -> None:
    """Create the database file 0600 before SQLite does (SQLite gives its -wal and -shm the
    database's mode), and take group/other access away from an existing install's files:
    they hold every job's script and environment. Never through a symbolic link."""
    if path == ":memory:" or path.startswith("file:"):
        return
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    for name in (path, f"{path}-wal", f"{path}-shm", f"{path}-journal"):
        try:
            fd = os.open(name, flags | (os.O_CREAT if name == path else 0), 0o600)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise StoreError(f"{name}: {exc.strerror}", exc.strerror) from exc
        try:
            mode = os.fstat(fd).st_mode & 0o777
            if mode & 0o077:
                os.fchmod(fd, mode & 0o700)
                log.warning(
                    "%s was mode %o (readable by other users); now %o", name, mode, mode & 0o700
                )
        finally:
            os.close(fd)
