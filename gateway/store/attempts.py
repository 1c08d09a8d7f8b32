"""Earlier runs of requeued jobs, kept as slurmdbd keeps them (`sacct --duplicates`).

slurmdbd keeps one record per run of a job: when a job is requeued, the run that ended stays
with its own start, end, nodes and steps, in state REQUEUED (`scontrol requeue`) or
NODE_FAIL (its node failed), and the job goes on in a new record. The store does the same in
the transaction that stores the requeue: a job update that raises the restart count turns
the record as it ran into an attempt. The event stored with the requeue says when and why
(slurmctld's `_job_requeue_op`: a running job's record ends REQUEUED now; a job that had
completed keeps its record as logged).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import replace

from gateway.model.job import Job
from gateway.model.state import JobState, Reason
from gateway.store.base import StoredEvent

__all__ = ["finished_attempt", "migrate_to_attempts"]

# How a run ended, by the kind of the event that requeued it (gateway/control: ops.requeue
# stores "requeue", a node reported down "node-down", a backend's lost or NODE_FAIL run
# "backend"); slurmctld records NODE_FAIL for a run its node took down, else REQUEUED.
_ENDED_AS = {
    "node-down": JobState.NODE_FAIL,
    "backend": JobState.NODE_FAIL,
    "preempt-end": JobState.PREEMPTED,  # a REQUEUE preemption (recorded: sacct -D PREEMPTED)
}


def finished_attempt(ran: Job, events: Sequence[StoredEvent], now: float) -> Job | None:
    """The record of a run that a requeue ended: as it ran, ended when the requeue was
    stored. A run that had finished by itself keeps its record (slurmctld's requeue of a
    completed job logs no completion). None for a run that never started (slurmdbd has
    nothing to account)."""
    if ran.start_time is None:
        return None
    if ran.state.is_finished:
        return ran
    mine = [e for e in events if e.job_id == ran.job_id]
    event = next((e for e in mine if e.detail.get("state") == "PENDING"), None)
    event = event or (mine[0] if mine else None)
    at = event.time if event is not None else now
    if ran.state is JobState.COMPLETING and ran.end_time is not None:
        at = ran.end_time  # a preempted run ends when it was killed, not when it was gone
    state = _ENDED_AS.get(event.kind, JobState.REQUEUED) if event else JobState.REQUEUED
    return replace(
        ran,
        state=state,
        reason=Reason.NONE,
        end_time=max(at, ran.start_time),
        hold=None,
    )


# Schema 1 or 2 -> 3: steps are kept per run (the run is the job's restart count when its
# steps were stored: an earlier run's steps were overwritten already); the new tables
# (attempts, and submissions for schema 1) come from the schema itself.
_MIGRATE_STEPS = (
    "ALTER TABLE steps RENAME TO steps_v2",
    """CREATE TABLE steps (job_id INTEGER NOT NULL, run INTEGER NOT NULL,
                           step_id TEXT NOT NULL, doc BLOB NOT NULL,
                           PRIMARY KEY (job_id, run, step_id))""",
    """INSERT INTO steps
        SELECT s.job_id,
               COALESCE((SELECT CASE WHEN json_valid(CAST(j.doc AS TEXT))
                                THEN json_extract(CAST(j.doc AS TEXT), '$.restart_count') END
                         FROM jobs j WHERE j.job_id = s.job_id), 0),
               s.step_id, s.doc
        FROM steps_v2 s""",
    "DROP TABLE steps_v2",
)


def migrate_to_attempts(conn: sqlite3.Connection, schema: str) -> int | None:
    """Bring a schema 1 or 2 database to schema 3 (`schema`: its idempotent DDL, statements
    without `;` inside) in one transaction: all or nothing. The version is read again inside
    the transaction (another process may have migrated meanwhile): the version migrated
    from, or None when there was nothing to do."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        old = int(conn.execute("SELECT value FROM meta WHERE key='schema'").fetchone()[0])
        if old in (1, 2):
            for statement in _MIGRATE_STEPS:
                conn.execute(statement)
            for statement in (s for s in schema.split(";") if s.strip()):
                conn.execute(statement)
            conn.execute("UPDATE meta SET value='3' WHERE key='schema'")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return old if old in (1, 2) else None
