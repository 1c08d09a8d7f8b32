"""`python -m gateway.inventory`: key generation and a standalone receiver.

    python -m gateway.inventory keygen --dir /etc/caldera/keys --name gateway
    python -m gateway.inventory serve --key gateway.key_secret --authorized DIR \
        [--bind tcp://127.0.0.1:5515] [--period 1] [--missed 3]

`serve` prints one JSON line per node event on stdout (`{"event": "down", "node": ...}`)
and its bound endpoint first (`{"event": "listening", "endpoint": ...}`): useful to watch a
fleet, and what the integration tests run as the gateway process.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from gateway.inventory.keys import KeyFileError, generate_keypair
from gateway.inventory.receiver import DEFAULT_BIND, InventoryReceiver, ReceiverConfig
from gateway.inventory.registry import NodeEvent, NodeRegistry


def _print(obj: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")
    sys.stdout.flush()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    p = argparse.ArgumentParser(prog="python -m gateway.inventory")
    sub = p.add_subparsers(dest="cmd", required=True)
    kg = sub.add_parser("keygen", help="make a CURVE key pair (0600 files)")
    kg.add_argument("--dir", type=Path, required=True)
    kg.add_argument("--name", required=True)
    kg.add_argument("--force", action="store_true")
    sv = sub.add_parser("serve", help="receive agent reports and print node events")
    sv.add_argument("--key", type=Path, required=True, help="the gateway's .key_secret")
    sv.add_argument("--authorized", type=Path, required=True, help="directory of agents' .key")
    sv.add_argument("--bind", default=DEFAULT_BIND)
    sv.add_argument("--period", type=float, default=1.0)
    sv.add_argument("--missed", type=int, default=3)
    sv.add_argument("--log-level", default="INFO")
    args = p.parse_args(argv)
    if args.cmd == "keygen":
        try:
            pair = generate_keypair(args.dir, args.name, force=args.force)
        except KeyFileError as exc:
            print(exc, file=sys.stderr)
            return 1
        print(pair.public.decode())
        return 0
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    registry = NodeRegistry(args.period, args.missed)

    def on_event(ev: NodeEvent) -> None:
        _print({"event": ev.kind.value, "node": ev.node, "reason": ev.reason, "at": ev.at})

    registry.subscribe(on_event)
    config = ReceiverConfig(
        server_secret=args.key,
        authorized_dir=args.authorized,
        bind=args.bind,
        period_s=args.period,
        missed=args.missed,
    )
    try:
        receiver = InventoryReceiver(config, registry)
    except KeyFileError as exc:
        print(exc, file=sys.stderr)
        return 2
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    _print({"event": "listening", "endpoint": receiver.endpoint})
    receiver.run(stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
