"""Any local user can send junk to the API socket; the gateway's log must not grow with it
(the log shares the disk with the job store). uvicorn writes one line per malformed request:
the gateway keeps that to one line a minute per message."""

from __future__ import annotations

import contextlib
import socket
import time

from tests.support.gateway_env import Gateway


def _junk(path: str) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        sock.connect(path)
        sock.sendall(b"\x16\x03\x01 not http at all\r\n\r\n")
        with contextlib.suppress(TimeoutError, ConnectionError):
            sock.recv(4096)


def test_a_flood_of_malformed_requests_writes_a_bounded_log(gateway: Gateway):
    log = gateway.home / "gateway.log"
    before = log.read_text(errors="replace").count("Invalid HTTP request")
    for _ in range(300):
        _junk(str(gateway.socket))
    time.sleep(0.5)
    text = log.read_text(errors="replace")
    assert text.count("Invalid HTTP request") == before + 1
    assert "Traceback" not in text
    # the gateway still serves
    job = gateway.sbatch("--wrap", "true")
    assert gateway.wait(job)["state"] == "COMPLETED"
