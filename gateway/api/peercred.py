"""Caller identity from the Unix socket's peer credentials (SO_PEERCRED).

uvicorn's protocol object lives per connection, so wrapping its ASGI app at
`connection_made` puts the connecting process's uid/gid/pid in every request scope of that
connection. Nothing the client sends can change it.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["PEER_KEY", "PeerCredProtocol"]

PEER_KEY = "caldera.peer"
_CRED = struct.Struct("3i")


class PeerCredProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, adding (pid, uid, gid) of the peer to the scope."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        peer: tuple[int, int, int] | None = None
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family == socket.AF_UNIX:
            raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size)
            peer = _CRED.unpack(raw)
        app = self.app

        async def with_peer(scope: Any, receive: Any, send: Any) -> None:
            scope[PEER_KEY] = peer
            await app(scope, receive, send)

        self.app = with_peer
        super().connection_made(transport)
