"""Caller identity from the Unix socket's peer credentials (SO_PEERCRED), and the socket's
bounds (gateway/api/limits.py).

uvicorn's protocol object lives per connection, so wrapping its ASGI app at
`connection_made` puts the connecting process's uid/gid/pid in every request scope of that
connection. Nothing the client sends can change it. The same object enforces the bounds:
a connection with no complete request for `idle_timeout_s` (connected and silent, or a
request sent in part) is closed; a uid past its cap is answered 503, and past twice its cap
closed at once; an oversized request head is answered 431.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import pwd
import socket
import struct
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.api.limits import ConnectionCounts, ConnectionLimits, too_many_connections

__all__ = ["PEER_KEY", "PeerCredProtocol", "bounded_protocol"]

PEER_KEY = "caldera.peer"
_CRED = struct.Struct("3i")

log = logging.getLogger("caldera.api")

_HEAD_TOO_LARGE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
    b"content-type: text/plain; charset=utf-8\r\n"
    b"content-length: 31\r\n"
    b"connection: close\r\n\r\n"
    b"Request header fields too large"
)


class _HeadTooLarge(Exception):
    """Raised inside the parser's callback; httptools reports it as a parser error."""


class PeerCredProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, adding (pid, uid, gid) of the peer to the scope and
    applying `limits` (shared `counts` across the server's connections)."""

    limits: ClassVar[ConnectionLimits] = ConnectionLimits()
    counts: ClassVar[ConnectionCounts] = ConnectionCounts()

    _uid: int | None = None
    _idle: asyncio.TimerHandle | None = None
    _last_done = 0.0
    _in_head = True
    _head_event = False
    _head_bytes = 0  # raw bytes of reads that neither ended a head nor a request
    _head_parsed = 0  # url and header bytes the parser reported
    _head_fields = 0
    _head_too_large = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        peer: tuple[int, int, int] | None = None
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family == socket.AF_UNIX:
            raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size)
            peer = _CRED.unpack(raw)
        app = self.app
        flood = False
        if peer is not None:
            uid = self._uid = peer[1]
            opened = self.counts.add(uid)
            cap = self.limits.cap(uid)
            if opened > cap:
                if self.counts.warn_due(uid, self.loop.time()):
                    log.warning("uid %d holds %d open API connections (limit %d)", uid, opened, cap)
                flood = opened > 2 * cap
                if not flood:
                    app = too_many_connections(_user_name(uid), cap)

        async def with_peer(scope: Any, receive: Any, send: Any) -> None:
            scope[PEER_KEY] = peer
            await app(scope, receive, send)

        self.app = with_peer
        super().connection_made(transport)
        self._last_done = self.loop.time()
        if flood:
            transport.close()  # no answer: the descriptor is back at once
            return
        self._arm_idle(self.limits.idle_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        if self._uid is not None:
            self.counts.remove(self._uid)
            self._uid = None
        super().connection_lost(exc)

    # --- idle connections -------------------------------------------------------------

    def _arm_idle(self, delay: float) -> None:
        self._idle = self.loop.call_later(delay, self._idle_check)

    def _waiting_for_client(self) -> bool:
        """No request is being answered: the client owes us the next one (or its end)."""
        cycle = self.cycle
        return cycle is None or cycle.response_complete or cycle.more_body

    def _idle_check(self) -> None:
        self._idle = None
        if self.transport.is_closing():
            return
        limit = self.limits.idle_timeout_s
        if not self._waiting_for_client():
            self._arm_idle(limit)
            return
        left = self._last_done + limit - self.loop.time()
        if left > 0:
            self._arm_idle(left)
            return
        self.transport.close()

    def on_message_complete(self) -> None:
        self._last_done = self.loop.time()
        self._in_head = True  # what follows is the next request's head
        self._head_event = True
        self._head_bytes = self._head_parsed = self._head_fields = 0
        super().on_message_complete()

    def on_response_complete(self) -> None:
        self._last_done = self.loop.time()
        super().on_response_complete()

    # --- request head size --------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        """Bytes that arrive while a request head is still open count against the head's
        limit (httptools would otherwise buffer a never-ending header)."""
        self._head_event = False
        super().data_received(data)
        if self._head_event or not self._in_head or self.transport.is_closing():
            return
        self._head_bytes += len(data)
        if self._head_bytes > self.limits.max_head_bytes:
            self._head_too_large = True
            self.send_400_response("")

    def on_url(self, url: bytes) -> None:
        self._count_head(len(url), 0)
        super().on_url(url)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_event = True
        self._head_bytes = self._head_parsed = self._head_fields = 0
        super().on_headers_complete()

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_head(len(name) + len(value), 1)
        super().on_header(name, value)

    def _count_head(self, size: int, fields: int) -> None:
        """The parsed parts of a head: what arrived in one read with the head's end."""
        self._head_parsed += size
        self._head_fields += fields
        if (
            self._head_parsed > self.limits.max_head_bytes
            or self._head_fields > self.limits.max_headers
        ):
            self._head_too_large = True
            raise _HeadTooLarge

    def send_400_response(self, msg: str) -> None:
        if not self._head_too_large:
            super().send_400_response(msg)
            return
        if not self.transport.is_closing():
            self.transport.write(_HEAD_TOO_LARGE)
            self.transport.close()


@functools.lru_cache(maxsize=256)
def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def bounded_protocol(limits: ConnectionLimits) -> type[PeerCredProtocol]:
    """The protocol class for one server: `limits`, and connection counts of its own."""
    return type(
        "BoundedPeerCredProtocol",
        (PeerCredProtocol,),
        {"limits": limits, "counts": ConnectionCounts()},
    )
