"""The optional TCP listeners' address (`listen = "HOST:PORT"` in caldera.toml) and their
socket: one reader and one binder for /metrics and the dashboard alike. The socket is bound
before uvicorn starts, so that a taken or bad address is an OSError the caller reports
(`caldera up` says why), not uvicorn's exit."""

from __future__ import annotations

import ipaddress
import socket

__all__ = ["bind_listen", "parse_listen"]


def parse_listen(text: str) -> tuple[str, int]:
    """`host:port` or `[v6]:port` -> (host, port); ValueError says what is wrong."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not host:
        raise ValueError(f"listen must be host:port, not {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"listen: bad port {port_text!r}") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"listen: port {port} out of range")
    return host, port


def bind_listen(host: str, port: int) -> socket.socket:
    """A listening, non-blocking TCP socket on host:port (a name: what it resolves to first)."""
    try:
        family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock
