"""`caldera why JOBID`: what a pending job waits for, in numbers (which resource is short
and by how much on each partition, when running jobs' ends make room, which dependency is
unmet). squeue's %R keeps Slurm's one-word reason; this is the detail behind it.

Standard library only, like the Slurm commands (the shims' interpreter runs it).
"""

from __future__ import annotations

import argparse
import sys

from gateway.cli.client import ApiError, Client, GatewayUnavailable

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Print the gateway's explanation of each job named; 1 if any is unknown."""
    p = argparse.ArgumentParser(
        prog="caldera why", description="Why a pending job waits: the detail behind %R."
    )
    p.add_argument("job_ids", nargs="+", metavar="JOBID")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    code = 0
    client = Client(timeout=30)
    for text in args.job_ids:
        head = text.split("_", 1)[0]
        if not head.isdigit():
            print(f"caldera why: invalid job id {text!r}", file=sys.stderr)
            code = 1
            continue
        try:
            answer = client.get(f"/v1/jobs/{int(head)}/why")
        except GatewayUnavailable as exc:
            print(f"caldera why: the gateway does not answer on {exc}", file=sys.stderr)
            return 1
        except ApiError as exc:
            print(f"caldera why: {text}: {exc.message}", file=sys.stderr)
            code = 1
            continue
        print("\n".join(answer["lines"]))
    return code
