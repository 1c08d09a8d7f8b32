"""Hostile and broken agent input over the real transport (ZeroMQ, CURVE keys on loopback).

- An authorised agent's malformed reports (a GPU index "zero", negative memory, a 10 MB
  string, wrong nesting, a bool for an int, NaN) are dropped and logged once per window,
  and the node keeps its last good inventory.
- A flood of junk (raw TCP garbage, unknown CURVE keys, junk frames from an authorised agent)
  writes a bounded number of log lines, and good agents still get through.
- A real gateway (`caldera up`) that receives a malformed report from an authorised agent
  for its own node still runs `sbatch --wrap true` to completion (before the fix, a GPU
  index "zero" next to a 0 made every cycle that placed a GPU job raise TypeError).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
import zmq

from gateway.inventory.keys import generate_keypair, load_keypair, load_public_key
from gateway.inventory.messages import GpuInfo, Heartbeat, Inventory, encode
from gateway.inventory.receiver import InventoryReceiver, ReceiverConfig
from gateway.logutil import RateLimitedLogger
from tests.support.gateway_env import CALDERA, Gateway, discard_gateway, start_gateway

GOOD = Inventory(
    node="gpu01",
    cpus=64,
    memory_bytes=512 * 2**30,
    gpus=(GpuInfo(index=0, memory_total=80 * 2**30), GpuInfo(index=1, memory_total=80 * 2**30)),
)


def _bad(**changes: object) -> bytes:
    raw = orjson.loads(encode(GOOD)[1])
    raw.update(changes)
    return orjson.dumps(raw)


BAD_REPORTS = [
    _bad(gpus=[{"index": "zero", "memory_total": 2**30}]),
    _bad(memory_bytes=-(2**30)),
    _bad(boot_id="x" * 10 * 2**20),
    _bad(gpus={"0": {"index": 0}}),
    _bad(cpus=True),
    encode(GOOD)[1].replace(b'"cpus":64', b'"cpus":NaN'),
]


def wait_until(check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


class Keys:
    def __init__(self, root: Path) -> None:
        self.root = root
        generate_keypair(root / "server", "gateway")
        (root / "authorized").mkdir(mode=0o700)
        for name in ("gpu01", "ib09", "intruder"):
            generate_keypair(root / "agents", name)
        for name in ("gpu01", "ib09"):
            shutil.copy(root / "agents" / f"{name}.key", root / "authorized" / f"{name}.key")


def dealer(
    ctx: zmq.Context[zmq.Socket[bytes]], endpoint: str, secret: Path, server: Path
) -> zmq.Socket[bytes]:
    pair = load_keypair(secret)
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.sndhwm = 100_000
    sock.sndtimeo = 5000  # a refused connection leaves no pipe: fail, do not hang
    sock.curve_secretkey = pair.secret or b""
    sock.curve_publickey = pair.public
    sock.curve_serverkey = load_public_key(server)
    sock.connect(endpoint)
    return sock


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[tuple[InventoryReceiver, Keys]]:
    keys = Keys(tmp_path / "keys")
    rx = InventoryReceiver(
        ReceiverConfig(
            server_secret=keys.root / "server" / "gateway.key_secret",
            authorized_dir=keys.root / "authorized",
            bind="tcp://127.0.0.1:*",
            period_s=0.25,
            missed=40,
        )
    )
    rx.start()
    try:
        yield rx, keys
    finally:
        rx.stop()


def _warnings(caplog: pytest.LogCaptureFixture, text: str = "") -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "caldera.inventory" and r.levelno >= logging.WARNING and text in r.getMessage()
    ]


class _Clock:
    """The limiter's clock, moved by the test so that "a minute later" takes no minute."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_malformed_reports_are_dropped_logged_once_and_the_good_inventory_stays(
    receiver: tuple[InventoryReceiver, Keys], caplog: pytest.LogCaptureFixture
) -> None:
    rx, keys = receiver
    caplog.set_level(logging.INFO, "caldera.inventory")
    clock = _Clock()
    rx.limited = RateLimitedLogger(logging.getLogger("caldera.inventory"), 60.0, clock=clock)
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    server = keys.root / "server" / "gateway.key"
    try:
        agent = dealer(ctx, rx.endpoint, keys.root / "agents" / "gpu01.key_secret", server)
        agent.send_multipart(encode(GOOD))
        wait_until(
            lambda: (r := rx.registry.record("gpu01")) is not None and r.inventory == GOOD,
            "the good inventory",
        )
        for _ in range(5):
            for body in BAD_REPORTS:
                agent.send_multipart([b"inv", body])
        agent.send_multipart([b"hb", b'{"node": "gpu01", "seq": "1", "sent": 0}'])
        stranger = dealer(ctx, rx.endpoint, keys.root / "agents" / "ib09.key_secret", server)
        stranger.send_multipart([b"inv", BAD_REPORTS[0].replace(b"gpu01", b"ib09")])
        wait_until(lambda: rx.stats.malformed == 5 * len(BAD_REPORTS) + 2, "the bad reports")

        lines = _warnings(caplog, "dropped a malformed report")
        assert len(lines) == 2, lines  # one per agent
        assert "from agent gpu01" in lines[0]
        assert "inventory.gpus[0].index: expected an integer, got 'zero'" in lines[0]
        assert all(len(line) < 400 for line in lines)  # the 10 MB string is not in the log
        rec = rx.registry.record("gpu01")
        assert rec is not None
        assert rec.inventory == GOOD
        assert rx.registry.record("ib09") is None  # a bad first report registers nothing
        assert rx.stats.inventories == 1

        # a minute later: the count of what was suppressed, and the next one logged again
        clock.now += 61
        agent.send_multipart([b"inv", BAD_REPORTS[1]])
        wait_until(lambda: rx.stats.malformed == 5 * len(BAD_REPORTS) + 3, "one more")
        lines = _warnings(caplog)
        assert sum("similar messages suppressed (malformed from gpu01)" in x for x in lines) == 1
        assert f"{5 * len(BAD_REPORTS)} similar messages suppressed" in lines[-2]
        assert "inventory.memory_bytes: out of range" in lines[-1]

        # heartbeats still keep the node up with its good inventory
        agent.send_multipart(encode(Heartbeat(node="gpu01", seq=2, sent=time.time())))
        wait_until(lambda: rx.stats.heartbeats == 1, "the heartbeat")
        rec = rx.registry.record("gpu01")
        assert rec is not None
        assert rec.up
        assert rec.inventory == GOOD
    finally:
        ctx.destroy(linger=0)


def _tcp_junk(endpoint: str, count: int) -> None:
    host, port = endpoint.removeprefix("tcp://").rsplit(":", 1)
    for i in range(count):
        with socket.create_connection((host, int(port)), timeout=5) as conn:
            conn.sendall(b"\xff" + os.urandom(64) if i % 2 else b"GET / HTTP/1.0\r\n\r\n")


def test_a_flood_of_junk_writes_a_bounded_number_of_log_lines(
    receiver: tuple[InventoryReceiver, Keys], caplog: pytest.LogCaptureFixture
) -> None:
    rx, keys = receiver
    caplog.set_level(logging.INFO, "caldera.inventory")
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    server = keys.root / "server" / "gateway.key"
    started = time.monotonic()
    try:
        _tcp_junk(rx.endpoint, 1500)  # port scanners, wrong protocols
        intruders = [
            dealer(ctx, rx.endpoint, keys.root / "agents" / "intruder.key_secret", server)
            for _ in range(200)
        ]
        for sock in intruders:  # unknown keys: each connection is refused
            with contextlib.suppress(zmq.Again):  # refused before this send
                sock.send_multipart(encode(GOOD), flags=zmq.NOBLOCK)
        agent = dealer(ctx, rx.endpoint, keys.root / "agents" / "gpu01.key_secret", server)
        for i in range(300):  # junk frames from an authorised agent
            agent.send_multipart([b"inv", os.urandom(32)] if i % 2 else [b"hb"])
        wait_until(lambda: rx.stats.malformed >= 300, "the junk frames")
        wait_until(lambda: rx.stats.refused >= 200, "the refusals")
        elapsed = time.monotonic() - started
        assert elapsed < 10, elapsed
        time.sleep(0.5)  # let the receiver catch up with handshake failures too

        # the receiver saw all of it, and still serves a good agent
        assert rx.stats.handshake_failures >= 200
        ok = dealer(ctx, rx.endpoint, keys.root / "agents" / "ib09.key_secret", server)
        ok.send_multipart(encode(Inventory(node="ib09", cpus=8, memory_bytes=2**34)))
        wait_until(lambda: rx.registry.record("ib09") is not None, "a good agent after the flood")
        lines = _warnings(caplog)
        assert len(lines) <= 5, lines
        assert any("refused agent connection from 127.0.0.1" in x for x in lines), lines
        assert any("dropped a message of 1 frames from agent gpu01" in x for x in lines), lines
        assert rx.limited.suppressed_total >= 700
    finally:
        ctx.destroy(linger=0)


@pytest.fixture
def e2e_gateway() -> Iterator[tuple[Path, Gateway]]:
    base = Path(tempfile.mkdtemp(prefix="h4-agent-e2e-", dir="/tmp"))
    gw = start_gateway(base, "time_scale = 0.016666\nkill_wait_s = 2\n")
    try:
        yield base, gw
    finally:
        discard_gateway(gw, base)


def test_a_malformed_report_for_the_gateways_own_node_does_not_stop_scheduling(
    e2e_gateway: tuple[Path, Gateway],
) -> None:
    base, gw = e2e_gateway
    node = socket.gethostname().split(".")[0] or "localhost"
    subprocess.run(
        [*CALDERA, "agent-key", node, "--out", str(base / "agent")],
        env=gw.env(),
        check=True,
        capture_output=True,
        timeout=60,
    )
    endpoint = (gw.home / "agents.endpoint").read_text().strip()
    server = gw.home / "keys" / "gateway.key"
    log = gw.home / "gateway.log"
    good = Inventory(
        node=node,
        cpus=os.cpu_count() or 1,
        memory_bytes=2**32,
        gpus=(GpuInfo(index=0, memory_total=16 * 2**30), GpuInfo(index=1, memory_total=16 * 2**30)),
    )
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        deadline = time.monotonic() + 15  # the gateway re-reads authorised keys every 3 s
        while f"node {node} up" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()
            agent = dealer(ctx, endpoint, base / "agent" / f"{node}.key_secret", server)
            with contextlib.suppress(zmq.Again):  # refused already (key not yet loaded)
                agent.send_multipart(encode(good), flags=zmq.NOBLOCK)
            time.sleep(0.5)
        bad = orjson.loads(encode(good)[1])
        bad["gpus"][1]["index"] = "zero"  # GPU indices 0 and "zero": sorting them fails
        for _ in range(20):
            agent.send_multipart([b"inv", orjson.dumps(bad)])
            agent.send_multipart(encode(Heartbeat(node=node, seq=1, sent=time.time())))
        wait_until(lambda: "dropped a malformed report" in log.read_text(), "the drop in the log")

        gpu_job = gw.sbatch("--gres=gpu:1", "--wrap", "true", user="tester")
        job = gw.sbatch("--wrap", "true", user="tester")
        assert gw.wait(job, timeout=60)["state"] == "COMPLETED"
        assert gw.wait(gpu_job, timeout=60)["state"] == "COMPLETED"
        text = log.read_text()
        assert text.count("dropped a malformed report") == 1, text
        assert "inventory.gpus[1].index: expected an integer, got 'zero'" in text
        assert "scheduling cycle failed" not in text
        assert "Traceback" not in text
    finally:
        ctx.destroy(linger=0)
