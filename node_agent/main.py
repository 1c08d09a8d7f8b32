"""`caldera agent`: the console entry of the node agent.

    caldera agent --gateway tcp://gw:5515 --key /etc/caldera/agent/node01.key_secret \
                  --server-key /etc/caldera/agent/gateway.key [--period 1] [--sysfs-root /]

`main(argv)` parses the options and runs until SIGTERM/SIGINT; the click command of the
gateway's CLI can pass its arguments straight through. `python -m node_agent` runs it too.
"""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from gateway.inventory.keys import KeyFileError
from gateway.inventory.receiver import DEFAULT_BIND
from node_agent.agent import AgentConfig, run_agent
from node_agent.inventory import Collector, CollectorConfig

__all__ = ["build_parser", "main"]


def build_parser(prog: str = "caldera agent") -> argparse.ArgumentParser:
    """The agent's options."""
    p = argparse.ArgumentParser(prog=prog, description="Report this node to the Caldera gateway.")
    p.add_argument("--gateway", default=DEFAULT_BIND, help="gateway endpoint (%(default)s)")
    p.add_argument(
        "--name",
        default=socket.gethostname().split(".")[0],
        help="node name to report as (default: short hostname)",
    )
    p.add_argument(
        "--key",
        required=True,
        type=Path,
        help="this agent's secret key file (<name>.key_secret, mode 0600)",
    )
    p.add_argument("--server-key", required=True, type=Path, help="the gateway's public key file")
    p.add_argument("--period", type=float, default=1.0, help="heartbeat period, s (%(default)s)")
    p.add_argument(
        "--sysfs-root",
        type=Path,
        default=Path("/"),
        help="read sysfs below this root (recorded trees in tests)",
    )
    p.add_argument(
        "--ibnetdiscover",
        default="auto",
        help="auto (run it when installed), off, or a file with captured output",
    )
    p.add_argument(
        "--report-fabric",
        action="store_true",
        help="also report switch-to-switch links (one agent per fabric suffices)",
    )
    p.add_argument(
        "--fabric-interval",
        type=float,
        default=600.0,
        help="re-run ibnetdiscover every this many seconds (%(default)s)",
    )
    p.add_argument("--no-nvml", action="store_true", help="do not query NVML")
    p.add_argument("--log-level", default="INFO")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the agent; returns the process exit status."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    collector = Collector(
        CollectorConfig(
            node=args.name,
            sysfs_root=args.sysfs_root,
            ibnetdiscover=args.ibnetdiscover,
            report_fabric=args.report_fabric,
            fabric_interval_s=args.fabric_interval,
            use_nvml=not args.no_nvml,
        )
    )
    config = AgentConfig(
        gateway=args.gateway,
        client_secret=args.key,
        server_public=args.server_key,
        period_s=args.period,
    )
    try:
        run_agent(config, collector, stop)
    except KeyFileError as exc:
        logging.getLogger("caldera.agent").error("%s", exc)
        return 2
    return 0
