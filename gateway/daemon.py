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
from gateway.api.peercred import PeerCredProtocol
from gateway.control.backends import make_backends
from gateway.control.config import GatewayConfig, load_config
from gateway.control.gateway import Gateway
from gateway.store.sqlite import SqliteStore

__all__ = ["main", "serve"]

log = logging.getLogger("caldera.daemon")


async def serve(config: GatewayConfig) -> None:
    """Run the gateway until SIGTERM/SIGINT."""
    config.home.mkdir(parents=True, exist_ok=True)
    config.spool_dir.mkdir(parents=True, exist_ok=True)
    store = SqliteStore(config.db_path)
    backends, sites = make_backends(config)
    gw = Gateway(config, store, backends, sites=sites)
    await gw.start()
    hub = None
    if config.agents:
        from gateway.control.agents import AgentHub

        hub = AgentHub(config, gw)
        hub.start()
    app = sbatch_fast_path(build_app(gw), gw)
    if config.socket_path.exists():
        config.socket_path.unlink()
    uv = uvicorn.Config(
        app,
        uds=str(config.socket_path),
        http=PeerCredProtocol,
        loop="none",
        lifespan="off",
        log_level="warning",
        access_log=False,
        timeout_keep_alive=30,
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
        await serve_task
    finally:
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
    config = load_config(home)
    try:
        import uvloop

        uvloop.run(serve(config))
    except ImportError:
        asyncio.run(serve(config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
