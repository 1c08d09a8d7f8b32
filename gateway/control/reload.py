"""What a starting gateway takes back from its store: every unfinished job, and the jobs
that finished within MinJobAge. slurmctld saves finished jobs with its state until they
age out, so after its restart `squeue -t all`, `squeue -j N` and `scontrol show job N`
still show a job that just ended (seen on the burst test cluster, MinJobAge 300: a job
COMPLETED before slurmctld was stopped and started again was still listed); so does
Caldera after its own."""

from __future__ import annotations

import asyncio
import logging

from gateway.model.job import Job
from gateway.model.state import JobState
from gateway.store.base import JobQuery
from gateway.store.sqlite import SqliteStore

__all__ = ["reload_jobs"]

log = logging.getLogger("caldera.gateway")

_FINISHED = tuple(s for s in JobState if s.is_finished)


async def reload_jobs(store: SqliteStore, since: float) -> tuple[list[Job], list[Job]]:
    """(the unfinished jobs, the jobs that ended at or after `since`)."""
    active = await asyncio.to_thread(store.active)
    if store.unreadable:
        ids = sorted(store.unreadable)
        log.error(
            "%d stored job record(s) cannot be read and are not served: %s",
            len(ids),
            ",".join(map(str, ids)),
        )
    query = JobQuery(states=_FINISHED, start_after=since)
    recent = await asyncio.to_thread(store.query, query)
    return active, [j for j in recent if j.end_time is not None and j.end_time >= since]
