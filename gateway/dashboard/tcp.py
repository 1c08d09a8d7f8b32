"""The dashboard's optional TCP listener (`[dashboard] listen = "HOST:PORT"`).

It serves the dashboard's routes only: none of the API that sbatch and scancel use, since a
TCP peer has no credentials the kernel vouches for. Every data route there needs a bearer
token (gateway/dashboard/auth.py). It speaks plain HTTP: put TLS in front with a reverse
proxy (docs/operating.md), and bind it to loopback unless the proxy is elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import uvicorn
from fastapi import FastAPI

from gateway.api.limits import ConnectionLimits
from gateway.api.peercred import bounded_protocol
from gateway.api.tcp_listen import bind_listen
from gateway.control.gateway import Gateway
from gateway.dashboard.routes import dashboard_router, dashboard_state

__all__ = ["DashboardListener", "start_dashboard_tcp"]

log = logging.getLogger("caldera.dashboard")


class DashboardListener:
    """A running TCP listener; `stop()` closes it."""

    def __init__(self, server: uvicorn.Server, task: asyncio.Task[None], port: int) -> None:
        self.server = server
        self.task = task
        self.port = port  # the port bound (the configured one, or the kernel's for 0)

    async def stop(self) -> None:
        """Stop accepting and wait for the server to end."""
        self.server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


def dashboard_app(gw: Gateway) -> FastAPI:
    """The app of the TCP listener: the dashboard's routes and nothing else."""
    from gateway.api.app import caller_from_scope  # the API imports this package's routes

    app = FastAPI(title="Caldera dashboard", docs_url=None, redoc_url=None, openapi_url=None)
    app.include_router(dashboard_router(gw, caller_from_scope))
    return app


async def start_dashboard_tcp(gw: Gateway) -> DashboardListener | None:
    """Start the TCP listener when configured (None when not); raises OSError when the
    address cannot be bound, so that `caldera up` says why."""
    settings = dashboard_state(gw).settings
    if settings.listen is None:
        return None
    dashboard_state(gw).key()  # a missing or unsafe key fails the start, not the first login
    host, port = settings.listen
    config = uvicorn.Config(
        dashboard_app(gw),
        host=host,
        port=port,
        http=bounded_protocol(ConnectionLimits(idle_timeout_s=gw.config.api_idle_timeout_s)),
        loop="none",
        lifespan="off",
        log_level="warning",
        access_log=False,
    )
    sock = bind_listen(host, port)  # bound here: an error is an OSError, not uvicorn's exit
    server = uvicorn.Server(config)
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
    task = asyncio.create_task(server.serve(sockets=[sock]), name="caldera-dashboard")
    while not server.started and not task.done():
        await asyncio.sleep(0.01)
    if task.done():
        raise OSError(f"dashboard: could not serve on {host}:{port}")
    listener = DashboardListener(server, task, sock.getsockname()[1])
    log.info("dashboard: listening on http://%s:%d/ui/ (bearer tokens)", host, listener.port)
    return listener
