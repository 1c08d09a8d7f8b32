"""The gateway process: store, backends, scheduler loop and API on a Unix socket.

`caldera up` starts this module detached; it can also run in the foreground
(`python -m gateway.daemon`). It writes `gateway.pid` beside its socket and removes both on
a clean stop (SIGTERM/SIGINT). Running jobs are not stopped with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from pathlib import Path

import uvicorn

from gateway.api.app import build_app
from gateway.api.fastpath import sbatch_fast_path
from gateway.api.limits import ConnectionLimits, raise_nofile
from gateway.api.peercred import bounded_protocol
from gateway.control.backends import make_backends
from gateway.control.config import GatewayConfig, load_config
from gateway.control.gateway import Gateway
from gateway.dashboard.tcp import start_dashboard_tcp
from gateway.logutil import RepeatFilter
from gateway.metrics.listener import start_listener
from gateway.metrics.source import timed_api
from gateway.store.startup import Reporter, StartupError, open_store, secure_home

__all__ = ["main", "serve"]

log = logging.getLogger("caldera.daemon")


async def serve(config: GatewayConfig, ready: Reporter | None = None) -> None:
    """Run the gateway until SIGTERM/SIGINT; `ready` hears once it serves."""
    nofile = raise_nofile()  # every local user may connect: room for their connections
    secure_home(config.home)
    config.spool_dir.mkdir(parents=True, exist_ok=True)
    store = open_store(config.db_path)
    backends, sites = make_backends(config)
    gw = Gateway(config, store, backends, sites=sites)
    await gw.start()
    hub = None
    if config.agents:
        from gateway.control.agents import AgentHub

        hub = AgentHub(config, gw)
        hub.start()
        gw.metrics.agents = hub.registry  # report ages on /metrics
    api = build_app(gw)
    app = timed_api(api, sbatch_fast_path(api, gw), gw.metrics)  # request times on /metrics
    dashboard = await start_dashboard_tcp(gw)  # None unless [dashboard] listen is set
    metrics_tcp = await start_listener(config, gw)  # None unless [metrics] listen is set
    limits = ConnectionLimits(
        idle_timeout_s=config.api_idle_timeout_s,
        per_user=config.api_max_connections_per_user,
        per_operator=config.api_max_connections_operator,
        operators=config.operators,
    )
    log.info(
        "API: %d open files allowed; %d connections per user (%d per operator), idle ones "
        "closed after %gs",
        nofile,
        limits.per_user,
        limits.per_operator,
        limits.idle_timeout_s,
    )
    if config.socket_path.exists():
        config.socket_path.unlink()
    uv = uvicorn.Config(
        app,
        uds=str(config.socket_path),
        http=bounded_protocol(limits),
        loop="none",
        lifespan="off",
        log_level="warning",
        access_log=False,
        timeout_keep_alive=max(1, round(config.api_idle_timeout_s)),
    )
    server = uvicorn.Server(uv)
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: setattr(server, "should_exit", True))
    pid_file = config.home / "gateway.pid"
    try:
        serve_task = asyncio.create_task(server.serve())
        while not server.started and not serve_task.done():
            await asyncio.sleep(0.01)
        os.chmod(config.socket_path, config.socket_mode)
        pid_file.write_text(f"{os.getpid()}\n")
        if ready is not None and not serve_task.done():
            ready("ready")
        await serve_task
    finally:
        if metrics_tcp is not None:
            await metrics_tcp.stop()
        if dashboard is not None:
            await dashboard.stop()
        if hub is not None:
            hub.stop()
        await gw.stop()
        store.close()
        for path in (pid_file, config.socket_path):
            if path.exists():
                path.unlink()


def main(argv: list[str] | None = None) -> int:
    """Foreground entry: `python -m gateway.daemon [HOME]`."""
    args = sys.argv[1:] if argv is None else argv
    home = Path(args[0]) if args else None
    logging.basicConfig(
        level=os.environ.get("CALDERA_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    # any local user can send malformed requests: uvicorn's one line per request is kept
    # to one a minute (per message) so that nobody can fill the disk with the log
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).addFilter(RepeatFilter())
    ready = Reporter()
    try:
        config = load_config(home)
        try:
            import uvloop
        except ImportError:
            asyncio.run(serve(config, ready))
        else:
            uvloop.run(serve(config, ready))
    except StartupError as exc:
        log.error("the gateway does not start: %s", exc)
        ready(f"error: {exc}")
        return 1
    except Exception as exc:  # the reason goes to `caldera up`, the trace to the log
        log.exception("the gateway does not start")
        ready(f"error: {_reason(exc)}")
        return 1
    return 0


def _reason(exc: BaseException) -> str:
    """One line for `caldera up`: the operating system's words for an OSError."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    return f"{type(exc).__name__}: {exc}"


if __name__ == "__main__":
    sys.exit(main())
