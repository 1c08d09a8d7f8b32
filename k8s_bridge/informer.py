"""List-then-watch caches of API objects (client-go's informer, in a thread).

One request lists the objects, one long-lived watch keeps the cache current; the API server
is asked again only when the watch ends (relist when its resourceVersion expired, 410) or
breaks (unreachable: the cache is marked unsynced and relisted with backoff once the server
answers). Consumers read a consistent copy and are woken through `on_change`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from k8s_bridge.kube import KubeClient, KubeError, Resource

__all__ = ["Informer"]

log = logging.getLogger(__name__)

T = TypeVar("T")
Obj = dict[str, Any]


def _key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


class Informer(Generic[T]):
    """A cache of `parse(object)` by namespace/name (objects parsed to None are left out)."""

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        namespace: str | None,
        parse: Callable[[Obj], T | None],
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        on_change: Callable[[], None] | None = None,
        on_deleted: Callable[[T], None] | None = None,
        watch_timeout_s: int = 240,
        name: str = "",
    ) -> None:
        self.client = client
        self.resource = resource
        self.namespace = namespace
        self.parse = parse
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.on_change = on_change or (lambda: None)
        self.on_deleted = on_deleted  # an object's last state, as its deletion carries it
        self.watch_timeout_s = watch_timeout_s
        self.name = name or resource.plural
        self._items: dict[str, T] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None
        self.relists = 0
        self.version = 0  # changes whenever the cache does
        self.synced_at = 0.0  # monotonic time of the last successful list

    # --- reading ----------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        """The cache reflects the server (listed, and the watch has not broken since)."""
        return self._synced.is_set()

    def wait_synced(self, timeout: float) -> bool:
        """Block until synced (or timeout); whether it is."""
        return self._synced.wait(timeout)

    def items(self) -> dict[str, T]:
        """A copy of the cache."""
        with self._lock:
            return dict(self._items)

    def get(self, key: str) -> T | None:
        """One cached item."""
        with self._lock:
            return self._items.get(key)

    # --- running ----------------------------------------------------------------------

    def start(self) -> None:
        """Run in a daemon thread."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name=f"informer-{self.name}", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        """Stop (the current watch ends at its timeout or the next event)."""
        self._stop.set()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the thread."""
        if self._thread is not None:
            self._thread.join(timeout)

    def relist(self) -> str:
        """List now, replace the cache, and return the resourceVersion to watch from."""
        objs, rv = self.client.list(
            self.resource,
            self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
        )
        fresh: dict[str, T] = {}
        for obj in objs:
            item = self.parse(obj)
            if item is not None:
                fresh[_key(obj)] = item
        with self._lock:
            self._items = fresh
            self.version += 1
        self.relists += 1
        self.synced_at = time.monotonic()
        self.error = None
        self._synced.set()
        self.on_change()
        return rv

    def _apply(self, event: Obj) -> str | None:
        """Apply one watch event; the new resourceVersion, or None to relist."""
        kind = event.get("type")
        obj = event.get("object") or {}
        rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        if kind == "ERROR":
            log.info("%s watch: %s", self.name, obj.get("message"))
            return None  # 410 Gone (expired) or another error: relist
        if kind == "BOOKMARK":
            return rv
        key = _key(obj)
        parsed = self.parse(obj)
        if kind == "DELETED" and parsed is not None and self.on_deleted is not None:
            self.on_deleted(parsed)  # before it leaves the cache: a reader sees one or the other
        item = parsed if kind != "DELETED" else None
        with self._lock:
            if item is None:
                self._items.pop(key, None)
            else:
                self._items[key] = item
            self.version += 1
        return rv

    def _run(self) -> None:
        backoff = 0.2
        rv = ""
        while not self._stop.is_set():
            try:
                if not rv:
                    rv = self.relist()
                    backoff = 0.2
                for event in self.client.watch(
                    self.resource,
                    self.namespace,
                    rv,
                    label_selector=self.label_selector,
                    field_selector=self.field_selector,
                    timeout_s=self.watch_timeout_s,
                ):
                    new_rv = self._apply(event)
                    if new_rv is None:
                        rv = ""
                        break
                    rv = new_rv or rv
                    if event.get("type") != "BOOKMARK":
                        self.on_change()
                    if self._stop.is_set():
                        return
            except KubeError as exc:
                self._synced.clear()
                self.error = str(exc)
                rv = ""
                log.info("%s informer: %s (retry in %.1fs)", self.name, exc, backoff)
                self.on_change()
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
            except Exception:
                self._synced.clear()
                log.exception("%s informer failed", self.name)
                rv = ""
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
