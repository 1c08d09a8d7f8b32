"""Group commit: concurrent writers share one transaction and one fsync.

Every writer gets a future that resolves only after the transaction holding its writes is
durable, so "job id printed" still implies "job stored". Under load, batches grow by
themselves: while one commit is in flight, the next writers queue up behind it.
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
from concurrent.futures import Future

from gateway.store.base import StoreError
from gateway.store.sqlite import Batch, SqliteStore

__all__ = ["GroupCommitter"]

_STOP = object()


class GroupCommitter:
    """A writer thread that merges queued batches into single transactions."""

    def __init__(self, store: SqliteStore, max_batch: int = 512) -> None:
        self.store = store
        self.max_batch = max_batch
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="caldera-commit", daemon=True)
        self._thread.start()
        self.commits = 0
        self.batches = 0

    def submit(self, batch: Batch) -> Future[None]:
        """Queue writes; the future resolves when they are durable."""
        fut: Future[None] = Future()
        self._queue.put((batch, fut))
        return fut

    async def commit(self, batch: Batch) -> None:
        """Queue writes and wait until they are durable."""
        await asyncio.wrap_future(self.submit(batch))

    def commit_sync(self, batch: Batch) -> None:
        """Queue writes and block until they are durable."""
        self.submit(batch).result()

    def close(self) -> None:
        """Finish queued work and stop the thread."""
        self._queue.put(_STOP)
        self._thread.join()

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is _STOP:
                return
            items = [first]
            stop = False
            while len(items) < self.max_batch:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is _STOP:
                    stop = True
                    break
                items.append(nxt)
            self._commit(items)  # type: ignore[arg-type]
            if stop:
                return

    def _commit(self, items: list[tuple[Batch, Future[None]]]) -> None:
        merged = Batch()
        for batch, _ in items:
            merged.merge(batch)
        try:
            self.store.apply(merged)
        except StoreError as exc:
            if not isinstance(exc.__cause__, sqlite3.IntegrityError):
                # the disk, the lock or the file failed, not one writer: retrying each
                # batch would only wait the busy timeout again per writer
                for _, fut in items:
                    fut.set_exception(exc)
                return
            self._one_by_one(items)
            return
        except Exception:  # noqa: BLE001 - isolate the failing writer, then report to each
            self._one_by_one(items)
            return
        self.commits += 1
        self.batches += len(items)
        for _, fut in items:
            fut.set_result(None)

    def _one_by_one(self, items: list[tuple[Batch, Future[None]]]) -> None:
        for batch, fut in items:
            try:
                self.store.apply(batch)
            except Exception as exc:  # noqa: BLE001
                fut.set_exception(exc)
            else:
                fut.set_result(None)
