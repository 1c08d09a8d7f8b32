"""The changes one scancel/scontrol command makes to many jobs, committed together.

A command naming 2,000 ids used to commit (one transaction, one fsync) per id and to query
the store per id. Here the store is read once for every id that memory cannot answer alone,
and changes are collected and committed as one batch. They are committed early only before
a backend is called (a job a cluster holds): nothing else awaits between deciding a change
and making it current in memory, so no other request can change a job under a decision,
as before. Later targets of the same command see what earlier ones changed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from gateway.control.arraytasks import Target
from gateway.control.gateway import Gateway
from gateway.model.job import Job
from gateway.store.base import JobQuery

__all__ = ["Changes"]

_QUERY_IDS = 400  # ids per store query (each id is bound twice: job or array id)


class Changes:
    """Collected job changes of one command, and the view of jobs they make."""

    def __init__(self, gw: Gateway, kind: str, by: int, **detail: object) -> None:
        self.gw = gw
        self.kind = kind
        self.by = by
        self.detail = detail
        self.jobs: dict[int, Job] = {}  # changed, not yet committed
        self._by_array: dict[int, set[int]] = {}
        self._stored: dict[int, dict[int, Job]] = {}  # target id -> stored records it names
        self._ending: list[tuple[int, int]] = []  # runs whose end is the command's doing
        self.commits = 0

    async def load(self, targets: Sequence[Target]) -> None:
        """Read from the store, in a few queries, the records memory may lack: those of
        arrays (tasks forgotten after MinJobAge) and of jobs memory does not hold. A job
        memory holds that is no array's id names no other record."""
        wanted = sorted(
            {
                t.job_id
                for t in targets
                if (j := self.gw.jobs.get(t.job_id)) is None or j.array_job_id == t.job_id
            }
        )
        for start in range(0, len(wanted), _QUERY_IDS):
            chunk = wanted[start : start + _QUERY_IDS]
            found = await asyncio.to_thread(self.gw.store.query, JobQuery(job_ids=chunk))
            asked = set(chunk)
            for job in found:
                for key in {job.job_id, job.array_job_id} & asked:
                    self._stored.setdefault(key, {})[job.job_id] = job

    def members(self, job_id: int) -> list[Job]:
        """Every record an id names (the job, or an array's meta record and tasks), as
        `Gateway.array_members` finds them, with this command's changes applied."""
        found = dict(self._stored.get(job_id, {}))
        for job in self.gw.jobs.job_or_array(job_id):
            found[job.job_id] = job
        if not found and job_id in self.jobs:
            found[job_id] = self.jobs[job_id]
        for changed in self._by_array.get(job_id, ()):
            found[changed] = self.jobs[changed]
        for known in list(found):
            found[known] = self.jobs.get(known, found[known])
        return sorted(found.values(), key=lambda j: (j.array_task_id or -1, j.job_id))

    def current(self, job: Job) -> Job:
        """The job as this command last left it, else as memory holds it now."""
        return self.jobs.get(job.job_id) or self.gw.jobs.get(job.job_id, job)

    def add(self, job: Job) -> None:
        """Record a change (a later change to the same job replaces it)."""
        self.jobs[job.job_id] = job
        if job.array_job_id:
            self._by_array.setdefault(job.array_job_id, set()).add(job.job_id)

    def ending(self, key: tuple[int, int]) -> None:
        """A run being ended by this command: its mark is lifted once the change is stored."""
        self._ending.append(key)

    def abandon(self) -> None:
        """Drop what was collected (the command failed) and lift the marks of its runs."""
        self.jobs, self._by_array = {}, {}
        ending, self._ending = self._ending, []
        self.gw.ended_runs(ending)

    async def flush(self) -> None:
        """Commit what was collected (before a backend is called, and at the end); the
        store's error, if any, reaches the caller for every id of the command."""
        ending, self._ending = self._ending, []
        changed, self.jobs, self._by_array = list(self.jobs.values()), {}, {}
        try:
            if changed:
                self.commits += 1
                await self.gw.commit(changed, self.kind, by=self.by, **self.detail)
        finally:
            self.gw.ended_runs(ending)
