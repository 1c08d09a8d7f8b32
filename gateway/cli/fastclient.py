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

__all__ = ["AnswerLost", "FastClient", "FastClientError", "refusal_text"]


class FastClientError(Exception):
    """The gateway could not be reached (`connect`: no connection was made) or answered
    something unexpected."""

    def __init__(self, message: str, connect: bool = False) -> None:
        super().__init__(message)
        self.connect = connect


class AnswerLost(FastClientError):
    """The request was sent (perhaps acted on) but the connection ended before the answer:
    the gateway stopped or restarted meanwhile."""


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
                raise FastClientError(f"{self.path}: {exc.strerror or exc}", True) from exc
            self._sock = sock
            self._buf = b""
        return self._sock

    def _read_until(self, sock: Socket, marker: bytes) -> bytes:
        while marker not in self._buf:
            chunk = sock.recv(65536)
            if not chunk:
                raise AnswerLost("connection closed by the gateway")
            self._buf += chunk
        head, _, self._buf = self._buf.partition(marker)
        return head

    def _read_n(self, sock: Socket, n: int) -> bytes:
        buf = bytearray(self._buf)  # appending to bytes copies: quadratic on a large body
        while len(buf) < n:
            chunk = sock.recv(max(65536, n - len(buf)))
            if not chunk:
                raise AnswerLost("connection closed by the gateway")
            buf += chunk
        data, self._buf = bytes(buf[:n]), bytes(buf[n:])
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
            # MSG_NOSIGNAL: a gateway gone mid-request is EPIPE here, never a SIGPIPE death
            # (the shims restore SIGPIPE's default action for `squeue | head`)
            sock.sendall(head + payload, _socket.MSG_NOSIGNAL)
            status_and_headers = self._read_until(sock, b"\r\n\r\n").decode("latin-1")
        except AnswerLost:
            self.close()
            raise
        except OSError as exc:
            self.close()
            raise AnswerLost(f"{self.path}: {exc.strerror or exc}") from exc
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
        try:
            data = self._read_n(sock, length)
        except OSError as exc:
            self.close()
            raise AnswerLost(f"{self.path}: {exc.strerror or exc}") from exc
        if not data:
            return status, None
        try:
            return status, minijson.loads(data.decode("utf-8"))
        except ValueError as exc:
            if status >= 500:  # a plain-text failure ("Internal Server Error")
                return status, {"detail": data[:200].decode("utf-8", "replace")}
            raise FastClientError(f"malformed answer from the gateway: {data[:80]!r}") from exc

    def close(self) -> None:
        """Close the connection."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def refusal_text(detail: Any) -> str:
    """The text of an error answer's `detail`: a Slurm refusal's message, or for a
    validation report (422) each field and its problem, never the input it echoes."""
    if isinstance(detail, dict):
        return str(detail.get("message", detail))
    if isinstance(detail, list):
        parts = []
        for d in detail:
            if isinstance(d, dict):
                loc = ".".join(str(p) for p in (d.get("loc") or ())[1:]) or "request"
                parts.append(f"{loc}: {d.get('msg') or 'invalid value'}")
        return "; ".join(parts) or "invalid request"
    return str(detail)
