"""The store contract: what the gateway needs to keep durably, independent of the database.

SQLite is the embedded default; the contract keeps to plain rows and JSON documents so a
PostgreSQL implementation can follow without touching callers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.model.job import Job, Step
from gateway.model.state import JobState

__all__ = ["JobQuery", "Store", "StoreError", "StoredEvent", "Submission"]


class StoreError(Exception):
    """The store could not do what was asked (disk full, corrupt file, bad schema...).

    `cause` is what a user is told, in the words of the operating system or of Slurm
    ("No space left on device", "database is locked"); the message adds the file.
    """

    def __init__(self, message: str, cause: str | None = None) -> None:
        super().__init__(message)
        self.cause = cause or message


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """One entry of the job event log."""

    job_id: int
    time: float
    kind: str
    detail: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Submission:
    """A new job with what only the backend needs later: its script and environment."""

    job: Job
    script: str
    environment: Mapping[str, str]
    token: str | None = None  # the client's submission token: a retry finds this job


@dataclass(frozen=True, slots=True)
class JobQuery:
    """Filters for accounting queries (sacct); None means any."""

    job_ids: Sequence[int] | None = None
    users: Sequence[int] | None = None
    states: Sequence[JobState] | None = None
    start_after: float | None = None  # job ended after (or is still active)
    end_before: float | None = None  # job started (or was submitted) before
    names: Sequence[str] | None = None
    partitions: Sequence[str] | None = None
    limit: int | None = None


class Store(Protocol):
    """Durable storage of jobs, steps, scripts and events."""

    def max_job_id(self) -> int:
        """The highest job id ever stored (0 when empty)."""
        ...

    def insert(self, submissions: Sequence[Submission]) -> None:
        """Store new jobs atomically; durable when this returns."""
        ...

    def update(self, jobs: Sequence[Job], events: Sequence[StoredEvent] = ()) -> None:
        """Replace job records and append events, atomically. A record whose restart count
        rose keeps the run it replaces as an attempt, in the same transaction."""
        ...

    def add_steps(self, steps: Sequence[Step]) -> None:
        """Insert or replace step records."""
        ...

    def get(self, job_id: int) -> Job | None:
        """One job."""
        ...

    def job_for_token(self, uid: int, token: str) -> int | None:
        """The job a submission token of this user created, if any."""
        ...

    def active(self) -> list[Job]:
        """Every job not finished (pending, running...)."""
        ...

    def query(self, q: JobQuery) -> list[Job]:
        """Jobs for accounting, oldest first."""
        ...

    def steps(self, job_ids: Sequence[int]) -> list[Step]:
        """Steps of every run of these jobs (`Step.run` says which)."""
        ...

    def attempts(self, job_ids: Sequence[int]) -> list[Job]:
        """The earlier runs of these jobs that a requeue ended, as slurmdbd keeps them."""
        ...

    def script(self, job_id: int) -> tuple[str, dict[str, str]] | None:
        """The script and environment a job was submitted with."""
        ...

    def events(self, job_id: int) -> list[StoredEvent]:
        """A job's event log."""
        ...

    def close(self) -> None:
        """Release the database."""
        ...
