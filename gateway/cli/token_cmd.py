"""`caldera token [--lifespan S] [--user NAME]`: a bearer token for the dashboard's TCP
listener, printed as `scontrol token` prints Slurm's (`SLURM_JWT=...`).

The gateway signs it after checking who asks through the Unix socket's peer credentials, so
the command needs no secret of its own; only operators may ask for another user's token.
Standard library only, like the Slurm commands: users run it with the shims' interpreter,
which does not see the gateway's own dependencies.
"""

from __future__ import annotations

import argparse
import sys

from gateway.cli.client import ApiError, Client, GatewayUnavailable

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="caldera token",
        description="Print a dashboard token for you (as `scontrol token`): SLURM_JWT=...",
    )
    p.add_argument("--lifespan", type=int, default=1800, help="seconds it stays valid (1800)")
    p.add_argument("--user", default=None, help="whose token (operators only)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Ask the gateway for a token and print it; 1 with the gateway's reason otherwise."""
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.lifespan < 1:
        print("caldera token: --lifespan must be at least 1 second", file=sys.stderr)
        return 1
    body: dict[str, object] = {"lifespan": args.lifespan}
    if args.user is not None:
        body["user"] = args.user
    try:
        answer = Client(timeout=30).post("/v1/token", body)
    except GatewayUnavailable as exc:
        print(f"caldera token: the gateway does not answer on {exc}", file=sys.stderr)
        return 1
    except ApiError as exc:
        print(f"caldera token: {exc.message}", file=sys.stderr)
        return 1
    print(f"SLURM_JWT={answer['token']}")
    return 0
