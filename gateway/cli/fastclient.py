"""A minimal HTTP/1.1 JSON client over the gateway's Unix socket, for command start-up.

`http.client` alone costs ~20 ms to import (it pulls in email parsing and ssl), and even
`socket` and `json` cost ~10 ms together (enum, re); Slurm's commands start in ~10 ms, so
the commands users type talk to the gateway with this instead, on the C modules `_socket`
and `_json` (through minijson). It speaks just what the gateway answers: Content-Length
bodies, keep-alive.
"""

from __future__ import annotations

import _socket

from gateway.cli import minijson

TYPE_CHECKING = False  # typing costs ~5 ms to import; mypy is told it is True

if TYPE_CHECKING:
    from typing import Any

    Socket = _socket.socket

__all__ = ["FastClient", "FastClientError"]


class FastClientError(Exception):
    """The gateway could not be reached or answered something unexpected."""


class FastClient:
    """One connection, sequential JSON requests."""

    def __init__(self, path: str, timeout: float = 120.0) -> None:
        self.path = path
        self.timeout = timeout
        self._sock: Socket | None = None
        self._buf = b""

    def _connect(self) -> Socket:
        if self._sock is None:
            sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            try:
                sock.connect(self.path)
            except OSError as exc:
                sock.close()
                raise FastClientError(f"{self.path}: {exc.strerror or exc}") from exc
            self._sock = sock
            self._buf = b""
        return self._sock

    def _read_until(self, sock: Socket, marker: bytes) -> bytes:
        while marker not in self._buf:
            chunk = sock.recv(65536)
            if not chunk:
                raise FastClientError("connection closed by the gateway")
            self._buf += chunk
        head, _, self._buf = self._buf.partition(marker)
        return head

    def _read_n(self, sock: Socket, n: int) -> bytes:
        while len(self._buf) < n:
            chunk = sock.recv(max(65536, n - len(self._buf)))
            if not chunk:
                raise FastClientError("connection closed by the gateway")
            self._buf += chunk
        data, self._buf = self._buf[:n], self._buf[n:]
        return data

    def request(self, method: str, url: str, body: Any = None) -> tuple[int, Any]:
        """(status, decoded JSON body)."""
        payload = b"" if body is None else minijson.dumps(body).encode()
        head = (
            f"{method} {url} HTTP/1.1\r\nHost: caldera\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n"
        ).encode()
        sock = self._connect()
        try:
            sock.sendall(head + payload)
            status_and_headers = self._read_until(sock, b"\r\n\r\n").decode("latin-1")
        except OSError as exc:
            self.close()
            raise FastClientError(f"{self.path}: {exc}") from exc
        lines = status_and_headers.split("\r\n")
        try:
            status = int(lines[0].split()[1])
        except (IndexError, ValueError) as exc:
            raise FastClientError(f"bad response line {lines[0]!r}") from exc
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        data = self._read_n(sock, length)
        if not data:
            return status, None
        try:
            return status, minijson.loads(data.decode("utf-8"))
        except ValueError as exc:
            raise FastClientError(f"malformed answer from the gateway: {data[:80]!r}") from exc

    def close(self) -> None:
        """Close the connection."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
