"""The API socket is world-writable (every local user submits), so it is bounded: idle
connections are closed, one uid holds only so many, request heads and bodies are capped,
and a job's script and environment go only to its owner and operators.

Other users' connections are made by a helper running as that user (runuser) and handed to
the test over SCM_RIGHTS (tests/support/peer_sockets.py): the gateway sees that user's uid.
"""

from __future__ import annotations

import json
import resource
import selectors
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.gateway_env import Gateway, discard_gateway, start_gateway
from tests.support.peer_sockets import UserSockets, http_request

IDLE_S = 3.0
CAP = 64


@pytest.fixture(scope="module")
def bounded() -> Iterator[Gateway]:
    """A gateway with a short idle timeout, started with a low soft open-files limit (the
    daemon must raise it to the hard limit itself)."""
    base = Path(tempfile.mkdtemp(prefix="h2-limits-", dir="/tmp"))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))
    try:
        gw = start_gateway(
            base,
            "time_scale = 0.016666\nkill_wait_s = 2\n"
            f"api_idle_timeout_s = {IDLE_S}\napi_max_connections_per_user = {CAP}\n",
        )
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        yield gw
    finally:
        discard_gateway(gw, base)


def _daemon_nofile(gw: Gateway) -> tuple[int, int]:
    pid = int((gw.home / "gateway.pid").read_text())
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), int(hard)
    raise AssertionError("no open-files limit")


def _close_times(
    conns: dict[int, socket.socket], start: float, deadline: float
) -> dict[int, float]:
    """When (seconds after `start`) the gateway closed each connection; inf if it did not."""
    out = dict.fromkeys(conns, float("inf"))
    sel = selectors.DefaultSelector()
    for i, s in conns.items():
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, i)
    while sel.get_map() and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=0.05):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                data = b""
            if not data:
                out[key.data] = time.monotonic() - start
                sel.unregister(sock)
    sel.close()
    return out


def test_many_idle_connections_of_one_user_do_not_stop_another_users_sbatch(
    bounded: Gateway,
) -> None:
    soft, hard = _daemon_nofile(bounded)
    assert soft == hard
    assert f"API: {hard} open files allowed" in (bounded.home / "gateway.log").read_text()
    with UserSockets("tester", str(bounded.socket)) as tester:
        start = time.monotonic()
        conns = tester.connect(1100)
        pinged = {0, CAP + 5}
        watched = {i: c for i, c in enumerate(conns) if i not in pinged}
        closed: dict[int, float] = {}
        watcher = threading.Thread(
            target=lambda: closed.update(_close_times(watched, start, start + IDLE_S + 15))
        )
        watcher.start()
        # served up to the cap, told why past it, dropped at once past twice the cap (the
        # pings wait for the gateway to have accepted them all: a refused connection closed
        # by its answer frees a place)
        time.sleep(max(0.0, start + 1.0 - time.monotonic()))
        status, body = http_request(conns[0], "GET", "/v1/ping")
        assert status == 200
        assert json.loads(body)["user"] == "tester"
        status, body = http_request(conns[CAP + 5], "GET", "/v1/ping")
        assert status == 503
        message = json.loads(body)["detail"]["message"]
        assert "Too many open connections to the gateway from user tester (limit 64)" in message
        job_id = bounded.sbatch("--wrap", "true", user="tester2")
        assert bounded.wait(job_id)["state"] == "COMPLETED"
        watcher.join()
    served = [t for i, t in closed.items() if i < CAP]
    refused = [t for i, t in closed.items() if CAP <= i < 2 * CAP]
    flood = [t for i, t in closed.items() if i >= 2 * CAP]
    assert len(flood) == 1100 - 2 * CAP
    assert max(flood) < 1.0
    # the idle ones were held until the idle timeout, then closed (none left open)
    assert min(served) >= IDLE_S - 0.5
    assert max(served) <= IDLE_S + 4
    assert max(refused) <= IDLE_S + 4
    log = (bounded.home / "gateway.log").read_text()
    assert log.count("open API connections (limit 64)") == 1  # once a minute, not per refusal
    assert bounded.ok(["squeue", "-h"], user="tester") is not None


def test_a_user_at_the_cap_gets_a_clear_error_and_others_are_served(bounded: Gateway) -> None:
    with UserSockets("tester", str(bounded.socket)) as tester:
        held = tester.connect(CAP)
        r = bounded.run(["squeue"], user="tester")
        assert r.returncode == 1
        assert "Too many open connections to the gateway from user tester" in r.stderr
        assert "not running" not in r.stderr
        assert bounded.run(["squeue"], user="tester2").returncode == 0
        assert bounded.run(["squeue"]).returncode == 0  # root: the operators' cap
        for s in held:
            s.close()
        deadline = time.monotonic() + 5
        while bounded.run(["squeue"], user="tester").returncode != 0:
            assert time.monotonic() < deadline, "the closed connections were not released"
            time.sleep(0.1)


def test_silent_and_partial_requests_are_dropped_after_the_idle_timeout(
    bounded: Gateway,
) -> None:
    with UserSockets("tester", str(bounded.socket)) as tester:
        silent, head, body, second, active = tester.connect(5)
        start = time.monotonic()
        head.sendall(b"GET /v1/ping HTTP/1.1\r\nHost: caldera\r\n")
        body.sendall(
            b"POST /v1/jobs/hold HTTP/1.1\r\nHost: caldera\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"ids": ['
        )
        assert http_request(second, "GET", "/v1/ping")[0] == 200
        second.sendall(b"GET /v1/ping HTTP/1.1\r\n")
        # a connection in use is kept past the timeout
        while time.monotonic() - start < IDLE_S * 1.7:
            assert http_request(active, "GET", "/v1/ping")[0] == 200
            time.sleep(IDLE_S / 4)
        idle = dict(enumerate([silent, head, body, second]))
        closed = _close_times(idle, start, start + IDLE_S + 10)
        assert all(IDLE_S - 0.5 <= t <= IDLE_S + 4 for t in closed.values()), closed
        assert http_request(active, "GET", "/v1/ping")[0] == 200


def test_oversized_bodies_and_heads_are_refused(bounded: Gateway) -> None:
    with UserSockets("tester", str(bounded.socket)) as tester:
        a, b, c, d, e = tester.connect(5)
        big = b'{"ids": ["1"], "pad": "' + b"x" * (17 * 1024 * 1024) + b'"}'
        assert http_request(a, "POST", "/v1/jobs/hold", big)[0] == 413
        assert http_request(b, "POST", "/v1/sbatch", big)[0] == 413
        # announced, never sent: refused on the announcement
        c.sendall(
            b"POST /v1/jobs/hold HTTP/1.1\r\nHost: caldera\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000000000\r\n\r\n{"
        )
        c.settimeout(10)
        assert c.recv(100).startswith(b"HTTP/1.1 413 ")
        assert http_request(d, "GET", "/v1/ping", headers={"X-Big": "a" * 70_000})[0] == 431
        many = {f"X-{i}": "a" for i in range(150)}
        assert http_request(e, "GET", "/v1/ping", headers=many)[0] == 431
        # within the limits, the same user is served
        (ok,) = tester.connect(1)
        headers = {f"X-{i}": "a" * 100 for i in range(90)}
        assert http_request(ok, "GET", "/v1/ping", headers=headers)[0] == 200


def _marked_job(gw: Gateway, marker: str) -> int:
    """A job of tester2 whose script and environment carry `marker`."""
    script = gw.workdir / "private.sh"
    script.write_text(f"#!/bin/bash\n# script-{marker}\ntrue\n")
    script.chmod(0o644)
    return gw.sbatch(
        "-H", "-J", "private", str(script), user="tester2", env={"SECRET_TOKEN": f"env-{marker}"}
    )


def test_a_job_script_and_environment_reach_only_its_owner_and_operators(
    bounded: Gateway,
) -> None:
    marker = "h2secret7f3a"
    job_id = _marked_job(bounded, marker)
    routes = [
        "/v1/jobs",
        f"/v1/jobs/{job_id}",
        f"/v1/jobs/{job_id}/script",
        "/v1/accounting",
        f"/v1/accounting?ids={job_id}",
        "/v1/nodes",
        "/v1/topology",
        "/v1/ping",
        f"/v1/jobs/{job_id}/why",
        "/metrics",
        "/ui/api/whoami",
        "/ui/api/queue",
        f"/ui/api/jobs/{job_id}",
        "/ui/api/clusters",
        "/ui/api/history",
        "/ui/api/decisions",
        "/ui/api/fairshare",
        "/ui/api/topology",
    ]
    schema = bounded.api("/openapi.json")
    assert isinstance(schema, dict)
    get_routes = {p for p, ops in schema["paths"].items() if "get" in ops}
    assert get_routes == {
        "/v1/jobs",
        "/v1/jobs/{job_id}",
        "/v1/jobs/{job_id}/script",
        "/v1/jobs/{job_id}/why",
        "/v1/accounting",
        "/v1/nodes",
        "/v1/topology",
        "/v1/ping",
        "/metrics",
        "/ui/api/whoami",
        "/ui/api/queue",
        "/ui/api/jobs/{job_id}",
        "/ui/api/clusters",
        "/ui/api/history",
        "/ui/api/decisions",
        "/ui/api/fairshare",
        "/ui/api/topology",
    }, "a GET route this test does not check"
    with (
        UserSockets("tester", str(bounded.socket)) as tester,
        UserSockets("tester2", str(bounded.socket)) as owner,
    ):
        for route in routes:
            (conn,) = tester.connect(1)
            status, body = http_request(conn, "GET", route)
            assert status in (200, 403), (route, status)
            assert marker.encode() not in body, route
        (conn,) = tester.connect(1)
        status, body = http_request(conn, "GET", f"/v1/jobs/{job_id}/script")
        assert status == 403
        assert json.loads(body)["detail"]["message"] == "Access/permission denied"
        (conn,) = owner.connect(1)
        status, body = http_request(conn, "GET", f"/v1/jobs/{job_id}/script")
        assert status == 200
        mine = json.loads(body)
        assert f"# script-{marker}" in mine["script"]
        assert mine["environment"]["SECRET_TOKEN"] == f"env-{marker}"
    as_root = bounded.api(f"/v1/jobs/{job_id}/script")
    assert isinstance(as_root, dict)
    assert as_root["environment"]["SECRET_TOKEN"] == f"env-{marker}"
    bounded.ok(["scancel", str(job_id)])
