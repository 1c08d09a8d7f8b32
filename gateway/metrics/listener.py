"""/metrics on TCP, when caldera.toml asks for it:

    [metrics]
    listen = "127.0.0.1:9464"     # host:port; port 0 picks a free one

Off by default: the page names users and accounts, so it leaves the machine only when an
operator says where it may be read (Slurm likewise serves its metrics only without
PrivateData). The listener serves GET /metrics and nothing else: none of the API is
reachable through it, and it asks for no credentials. The address actually bound is
written to `$CALDERA_HOME/metrics.endpoint` (as agents.endpoint is), for port 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
from dataclasses import dataclass
from typing import Any

import uvicorn
from starlette.types import Receive, Scope, Send

from gateway.api.tcp_listen import bind_listen, parse_listen
from gateway.control.config import ConfigError, GatewayConfig
from gateway.control.gateway import Gateway
from gateway.metrics.expo import CONTENT_TYPE
from gateway.metrics.source import gateway_page

__all__ = ["MetricsListener", "MetricsSettings", "parse_listen", "settings_from", "start_listener"]

log = logging.getLogger("caldera.metrics")

_KEYS = frozenset({"listen"})


@dataclass(frozen=True, slots=True)
class MetricsSettings:
    """The `[metrics]` table: where /metrics is served on TCP (None: nowhere)."""

    listen: tuple[str, int] | None = None


def settings_from(config: GatewayConfig) -> MetricsSettings:
    """The `[metrics]` table of caldera.toml, checked."""
    table: Any = config.metrics
    where = f"{config.home / 'caldera.toml'}: [metrics]"
    if table is None:
        return MetricsSettings()
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table")
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown setting(s) {', '.join(map(repr, unknown))}")
    listen = table.get("listen")
    if listen is None or listen == "":
        return MetricsSettings()
    if not isinstance(listen, str):
        raise ConfigError(f"{where}: listen must be a string (host:port)")
    try:
        return MetricsSettings(parse_listen(listen))
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None


class MetricsListener:
    """The TCP server of /metrics, running on the gateway's event loop."""

    def __init__(self, gw: Gateway, sock: socket.socket) -> None:
        self.gw = gw
        self.sock = sock
        address = sock.getsockname()
        host = address[0] if sock.family == socket.AF_INET else f"[{address[0]}]"
        self.endpoint = f"{host}:{address[1]}"
        config = uvicorn.Config(
            self._app,
            interface="asgi3",
            proxy_headers=False,
            loop="none",
            lifespan="off",
            log_level="warning",
            access_log=False,
            timeout_keep_alive=30,
            limit_concurrency=64,
        )
        self.server = uvicorn.Server(config)
        self.server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
        self._task: asyncio.Task[None] | None = None

    async def _app(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] != "/metrics":
            status, body, kind = 404, b"not found: try /metrics\n", "text/plain"
        elif scope["method"] not in ("GET", "HEAD"):
            status, body, kind = 405, b"method not allowed\n", "text/plain"
        else:
            status, body, kind = 200, gateway_page(self.gw).encode(), CONTENT_TYPE
        headers = [(b"content-type", kind.encode()), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        if scope["method"] == "HEAD":
            body = b""
        await send({"type": "http.response.body", "body": body})

    async def start(self) -> None:
        """Serve until `stop`."""
        self._task = asyncio.create_task(
            self.server.serve(sockets=[self.sock]), name="caldera-metrics"
        )
        while not self.server.started and not self._task.done():
            await asyncio.sleep(0.01)
        if self._task.done():
            self._task.result()  # the reason it could not start

    async def stop(self) -> None:
        """Stop serving and close the socket."""
        self.server.should_exit = True
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.sock.close()


async def start_listener(config: GatewayConfig, gw: Gateway) -> MetricsListener | None:
    """Start /metrics on TCP when `[metrics] listen` is set; None otherwise."""
    settings = settings_from(config)
    endpoint_file = config.home / "metrics.endpoint"
    endpoint_file.unlink(missing_ok=True)
    if settings.listen is None:
        return None
    host, port = settings.listen
    try:
        sock = bind_listen(host, port)
    except OSError as exc:
        raise ConfigError(f"[metrics] listen = {host}:{port}: {exc.strerror or exc}") from exc
    listener = MetricsListener(gw, sock)
    await listener.start()
    endpoint_file.write_text(listener.endpoint + "\n")
    if not ipaddress.ip_address(sock.getsockname()[0]).is_loopback:
        log.warning("/metrics is served on %s, beyond this machine", listener.endpoint)
    else:
        log.info("/metrics is served on %s", listener.endpoint)
    return listener
