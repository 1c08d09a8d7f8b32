"""Bounds on the API socket: what one local user may hold open, and for how long.

The socket is world-writable on purpose (every local user submits), so one user must not be
able to exhaust the daemon's file descriptors or starve another user's commands, as
slurmctld bounds its RPC threads. The protocol (gateway/api/peercred.py) applies these.
"""

from __future__ import annotations

import json
import logging
import resource
from dataclasses import dataclass

from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["ConnectionCounts", "ConnectionLimits", "raise_nofile", "too_many_connections"]

log = logging.getLogger("caldera.api")

WARN_EVERY_S = 60.0


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """Per-connection and per-uid bounds of the API socket."""

    idle_timeout_s: float = 30.0  # no complete request for this long: the connection is closed
    per_user: int = 64  # open connections one uid may hold
    per_operator: int = 1024  # the same for operators (root included)
    operators: frozenset[int] = frozenset({0})
    max_head_bytes: int = 64 * 1024  # request line and headers together
    max_headers: int = 100

    def cap(self, uid: int) -> int:
        """How many connections `uid` may hold open and be served on."""
        return self.per_operator if uid in self.operators else self.per_user


class ConnectionCounts:
    """Open connections per uid, across every connection of one server."""

    def __init__(self) -> None:
        self._open: dict[int, int] = {}
        self._warned: dict[int, float] = {}

    def warn_due(self, uid: int, now: float) -> bool:
        """Whether to log that `uid` is over its cap (once a minute per uid at most)."""
        if now - self._warned.get(uid, -WARN_EVERY_S) < WARN_EVERY_S:
            return False
        if len(self._warned) > 4096:
            self._warned.clear()
        self._warned[uid] = now
        return True

    def add(self, uid: int) -> int:
        """Count a new connection of `uid`; its number among that uid's open ones."""
        n = self._open.get(uid, 0) + 1
        self._open[uid] = n
        return n

    def remove(self, uid: int) -> None:
        """Forget a closed connection of `uid`."""
        n = self._open.get(uid, 0) - 1
        if n > 0:
            self._open[uid] = n
        else:
            self._open.pop(uid, None)

    def of(self, uid: int) -> int:
        """Open connections of `uid` now."""
        return self._open.get(uid, 0)


def too_many_connections(user: str, cap: int) -> ASGIApp:
    """An ASGI app answering 503 with a Slurm-like message, then closing the connection."""
    message = (
        f"Too many open connections to the gateway from user {user} (limit {cap}): "
        "Resource temporarily unavailable"
    )
    body = json.dumps({"detail": {"code": 11, "message": message}}).encode()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return app


def raise_nofile() -> int:
    """Raise RLIMIT_NOFILE's soft limit to its hard limit (as slurmctld does); the new limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open-files limit from %d to %d: %s", soft, hard, exc)
    return soft
