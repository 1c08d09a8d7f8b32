"""A small client of the gateway API over its Unix socket (stdlib only, for fast start-up)."""

from __future__ import annotations

import http.client
import json
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from gateway.cli.fastclient import refusal_text

__all__ = ["Client", "GatewayUnavailable", "socket_path"]


class GatewayUnavailable(Exception):
    """No gateway answers on the socket."""


def socket_path() -> Path:
    """`$CALDERA_SOCKET`, else the socket of `$CALDERA_HOME` (or its default)."""
    from gateway.cli.paths import socket_path as path

    return Path(path())


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


class Client:
    """JSON requests to the gateway; one keep-alive connection."""

    def __init__(self, path: Path | None = None, timeout: float = 120.0) -> None:
        self.path = str(path or socket_path())
        self.timeout = timeout
        self._conn: _UnixConnection | None = None

    def request(
        self, method: str, url: str, body: Any = None, query: dict[str, Any] | None = None
    ) -> tuple[int, Any]:
        """(HTTP status, decoded JSON) of one call."""
        if query:
            url += "?" + urlencode({k: v for k, v in query.items() if v is not None}, doseq=True)
        payload = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if payload is not None else {}
        for attempt in (0, 1):
            if self._conn is None:
                self._conn = _UnixConnection(self.path, self.timeout)
            try:
                self._conn.request(method, url, body=payload, headers=headers)
                resp = self._conn.getresponse()
                data = resp.read()
                return resp.status, json.loads(data) if data else None
            except (ConnectionRefusedError, FileNotFoundError) as exc:
                raise GatewayUnavailable(self.path) from exc
            except (http.client.HTTPException, ConnectionError, BrokenPipeError) as exc:
                self._conn.close()
                self._conn = None
                if attempt:
                    raise GatewayUnavailable(self.path) from exc
        raise GatewayUnavailable(self.path)

    def get(self, url: str, **query: Any) -> Any:
        """GET; raises GatewayUnavailable or RuntimeError on an HTTP error."""
        status, data = self.request("GET", url, query=query or None)
        return _checked(status, data)

    def post(self, url: str, body: Any) -> Any:
        """POST JSON."""
        status, data = self.request("POST", url, body)
        return _checked(status, data)


class ApiError(Exception):
    """An API refusal with Slurm's code and message."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def _checked(status: int, data: Any) -> Any:
    if status < 400:
        return data
    detail = data.get("detail") if isinstance(data, dict) else None
    if isinstance(detail, dict):
        raise ApiError(status, int(detail.get("code", 0)), str(detail.get("message", "")))
    raise ApiError(status, 0, refusal_text(detail if detail is not None else data))
