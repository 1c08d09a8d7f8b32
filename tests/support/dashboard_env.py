"""A real gateway with the dashboard's TCP listener on, and helpers to call the dashboard
as a given user: over the Unix socket (curl run as that user, so SO_PEERCRED names them) or
over TCP with a bearer token minted by `caldera token` run as that user.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from containers.interpreter import shared_python
from gateway.cli.main import _import_roots
from tests.support.gateway_env import Gateway, discard_gateway, start_gateway

__all__ = ["DashGateway", "dash_gateway", "free_port"]


def free_port() -> int:
    """A TCP port nobody listens on now (the kernel's choice)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class DashGateway:
    """A gateway whose dashboard listens on 127.0.0.1:`port` too."""

    gw: Gateway
    port: int

    @property
    def base(self) -> str:
        """The TCP listener's URL."""
        return f"http://127.0.0.1:{self.port}"

    def token_run(self, user: str | None, *args: str) -> subprocess.CompletedProcess[str]:
        """`caldera token ARGS` run as `user` (None: root), through the interpreter the
        shims use (root's own may not be readable by other users)."""
        code = (
            f"import sys; sys.path[:0] = {_import_roots()!r}; "
            "from gateway.cli.token_cmd import main; sys.exit(main())"
        )
        return self.gw.run([shared_python(sys.executable), "-IS", "-c", code, *args], user=user)

    def token(self, user: str | None, *args: str) -> str:
        """The token `caldera token ARGS` prints for `user`."""
        r = self.token_run(user, *args)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("SLURM_JWT="), r.stdout
        return r.stdout.strip().removeprefix("SLURM_JWT=")

    def tcp(
        self, path: str, token: str | None = None, method: str = "GET", header: str = "bearer"
    ) -> tuple[int, Any]:
        """(status, JSON or text) of a request to the TCP listener."""
        req = urllib.request.Request(self.base + path, method=method)
        if token is not None:
            if header == "bearer":
                req.add_header("Authorization", f"Bearer {token}")
            else:
                req.add_header("X-SLURM-USER-TOKEN", token)
        if method == "POST":
            req.data = b"{}"
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, _decode(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, _decode(exc.read())

    def unix(self, path: str, user: str | None = None, method: str = "GET") -> tuple[int, Any]:
        """(status, JSON or text) of a request over the Unix socket, made as `user`."""
        argv = ["curl", "-s", "-X", method, "-w", "\n%{http_code}", "--unix-socket"]
        argv += [str(self.gw.socket), f"http://caldera{path}"]
        if method == "POST":
            argv += ["-H", "Content-Type: application/json", "-d", "{}"]
        out = self.gw.ok(argv, user=user)
        body, _, status = out.rpartition("\n")
        return int(status), _decode(body.encode())


def _decode(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")


@pytest.fixture
def dash_gateway() -> Iterator[DashGateway]:
    """A fresh gateway with `[dashboard] listen` on a free loopback port."""
    base = Path(tempfile.mkdtemp(prefix="caldera-dash-", dir="/tmp"))
    port = free_port()
    config = (
        "time_scale = 0.016666\nkill_wait_s = 2\n"
        f'[dashboard]\nlisten = "127.0.0.1:{port}"\nsample_interval_s = 0.5\n'
    )
    gw = start_gateway(base, config)
    try:
        yield DashGateway(gw, port)
    finally:
        discard_gateway(gw, base)
