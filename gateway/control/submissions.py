"""Submissions made durable once each: a client that lost its answer retries with the same
token and is told the job an earlier attempt stored, never given a second job.

The gateway answers sbatch only after the job is committed; this keeps, per (owner uid,
token), the attempt in flight, so that a retry racing its first attempt waits for it
instead of storing the job twice (the store's unique token index is the last word).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3

from gateway.store.base import StoredEvent, StoreError, Submission
from gateway.store.committer import GroupCommitter
from gateway.store.sqlite import Batch, SqliteStore

__all__ = ["SubmissionLedger"]


class SubmissionLedger:
    """Stores submissions through the group committer, once per client token."""

    def __init__(self, store: SqliteStore, committer: GroupCommitter) -> None:
        self.store, self.committer = store, committer
        # (owner uid, submission token) -> the job id once committed (None: not stored)
        self._inflight: dict[tuple[int, str], asyncio.Future[int | None]] = {}

    async def store_once(self, sub: Submission, caller: int, retry: bool, now: float) -> int:
        """The id of the job stored for this submission: its own job's, or the one an
        earlier attempt with the same token (and owner) stored; `caller`: the uid that
        submitted (the event's). StoreError: nothing was stored."""
        key = None if sub.token is None else (sub.job.uid, sub.token)
        stored: int | None = None
        registered: asyncio.Future[int | None] | None = None
        try:
            if key is not None and retry:
                known = await self._token_job(key)
                if known is not None:  # stored before its answer was lost: the same job
                    return known
            if key is not None:
                registered = self._inflight[key] = asyncio.get_running_loop().create_future()
            event = StoredEvent(sub.job.job_id, now, "submit", {"uid": caller})
            await self.committer.commit(Batch(submissions=[sub], events=[event]))
            stored = sub.job.job_id
            return stored
        except StoreError as exc:
            if key is not None and isinstance(exc.__cause__, sqlite3.IntegrityError):
                # two attempts of one submission raced: the other one stored the job
                known = None
                with contextlib.suppress(StoreError):
                    known = await asyncio.to_thread(self.store.job_for_token, *key)
                if known is not None:
                    return known
            raise
        finally:
            if key is not None and registered is not None:
                if self._inflight.get(key) is registered:
                    del self._inflight[key]
                registered.set_result(stored)

    async def _token_job(self, key: tuple[int, str]) -> int | None:
        """The job an earlier attempt of this submission stored, if any (in flight: wait)."""
        pending = self._inflight.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        return await asyncio.to_thread(self.store.job_for_token, *key)
