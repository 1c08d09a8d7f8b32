"""What the query commands share: fetching from the gateway, Slurm-like failures, output."""

from __future__ import annotations

import sys
from typing import Any

from gateway.cli.fastclient import FastClient, FastClientError, refusal_text
from gateway.cli.paths import socket_path
from gateway.compat.job_fields import site_from
from gateway.model.codec import job_from_dict
from gateway.model.job import Job

__all__ = [
    "GatewayError",
    "call",
    "fetch_jobs",
    "site_from",
    "write_out",
]


class GatewayError(Exception):
    """The gateway is unreachable or refused; `message` is printed after `prog: error: `."""


_CLIENT: FastClient | None = None


def call(method: str, url: str, body: Any = None) -> Any:
    """One API call; raises GatewayError with a Slurm-like message."""
    global _CLIENT
    if _CLIENT is None:
        _CLIENT = FastClient(socket_path())
    try:
        status, data = _CLIENT.request(method, url, body)
    except FastClientError as exc:
        if not exc.connect:  # it was reached, then failed: not "not running"
            raise GatewayError(f"Socket timed out on send/recv operation ({exc})") from exc
        raise GatewayError(
            "Unable to contact slurm controller (connect failure): the Caldera gateway is not "
            f"running ({exc}); start it with: caldera up"
        ) from exc
    if status >= 400:
        raise GatewayError(refusal_text(data.get("detail") if isinstance(data, dict) else data))
    return data


def fetch_jobs(url: str = "/v1/jobs") -> tuple[list[Job], float, dict[str, Any]]:
    """Jobs, the gateway's clock, and the raw document."""
    data = call("GET", url)
    return [job_from_dict(j) for j in data["jobs"]], float(data["now"]), data


def write_out(text: str) -> None:
    """Write as Slurm does: bytes, with names cut mid-character kept as they are."""
    sys.stdout.buffer.write(text.encode("utf-8", errors="surrogateescape"))
    sys.stdout.flush()
