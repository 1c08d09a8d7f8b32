"""Node agents and the gateway's receiver as separate processes on loopback: real ZeroMQ,
real CURVE keys, the recorded sysfs trees and ibnetdiscover capture.

The receiver runs as `python -m gateway.inventory serve` (it prints one JSON line per node
event); each agent as `python -m node_agent`. Checks: an authorized agent registers; an
unknown key is refused and the refusal logged with the key; a key used for another node's
name is dropped and logged; an agent with the wrong server key fails the handshake; a
killed agent is marked DOWN after the missed heartbeats and the event names the node; a
restarted agent comes back up.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gateway.inventory.keys import generate_keypair

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
PERIOD = 0.25
MISSED = 4


@dataclass
class Gateway:
    proc: subprocess.Popen[str]
    endpoint: str
    events: queue.Queue[dict[str, object]]
    log: Path
    keys: Path
    seen: list[dict[str, object]] = field(default_factory=list)

    def wait(self, event: str, node: str, timeout: float = 10.0) -> dict[str, object]:
        for ev in self.seen:
            if ev.get("event") == event and ev.get("node") == node:
                self.seen.remove(ev)
                return ev
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {event} event for {node} within {timeout} s")
            try:
                ev = self.events.get(timeout=left)
            except queue.Empty:
                continue
            if ev.get("event") == event and ev.get("node") == node:
                return ev
            self.seen.append(ev)

    def drain(self) -> list[dict[str, object]]:
        out, self.seen = self.seen, []
        while not self.events.empty():
            out.append(self.events.get_nowait())
        return out


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Gateway]:
    keys = tmp_path / "keys"
    generate_keypair(keys / "server", "gateway")
    for name in ("gpu01", "ib09"):
        generate_keypair(keys / "agents", name)
        (keys / "authorized").mkdir(mode=0o700, exist_ok=True)
        (keys / "authorized" / f"{name}.key").write_bytes(
            (keys / "agents" / f"{name}.key").read_bytes()
        )
    generate_keypair(keys / "agents", "intruder")
    generate_keypair(keys / "other-server", "gateway")
    log = tmp_path / "receiver.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gateway.inventory",
                "serve",
                "--key",
                str(keys / "server" / "gateway.key_secret"),
                "--authorized",
                str(keys / "authorized"),
                "--bind",
                "tcp://127.0.0.1:*",
                "--period",
                str(PERIOD),
                "--missed",
                str(MISSED),
            ],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=_env(),
            cwd=ROOT,
        )
    events: queue.Queue[dict[str, object]] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            events.put(json.loads(line))

    threading.Thread(target=pump, daemon=True).start()
    first = events.get(timeout=15)
    assert first["event"] == "listening"
    gw = Gateway(proc, str(first["endpoint"]), events, log, keys)
    try:
        yield gw
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def agent(
    gw: Gateway, key: str, name: str, tree: str, server: str = "server"
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "node_agent",
            "--gateway",
            gw.endpoint,
            "--name",
            name,
            "--key",
            str(gw.keys / "agents" / f"{key}.key_secret"),
            "--server-key",
            str(gw.keys / server / "gateway.key"),
            "--period",
            str(PERIOD),
            "--sysfs-root",
            str(DATA / "sysfs" / tree),
            "--ibnetdiscover",
            str(DATA / "ibnetdiscover" / "fabric.txt"),
            "--no-nvml",
            "--log-level",
            "WARNING",
        ],
        env=_env(),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop(*procs: subprocess.Popen[bytes]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def wait_for_log(log: Path, text: str, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        content = log.read_text()
        if text in content:
            return content
        time.sleep(0.05)
    raise AssertionError(f"{text!r} not logged; log:\n{log.read_text()}")


def test_killed_agent_is_marked_down_after_missed_heartbeats_and_returns(gateway: Gateway) -> None:
    a = agent(gateway, "gpu01", "gpu01", "gpu8")
    b = agent(gateway, "ib09", "ib09", "portdown")
    try:
        gateway.wait("up", "gpu01")
        gateway.wait("up", "ib09")
        time.sleep(4 * PERIOD)
        killed = time.monotonic()
        a.send_signal(signal.SIGKILL)
        a.wait()
        down = gateway.wait("down", "gpu01")
        elapsed = time.monotonic() - killed
        assert elapsed >= MISSED * PERIOD * 0.9, elapsed
        assert elapsed < 5.0, elapsed
        assert f"{MISSED} heartbeats missed" in str(down["reason"])
        # the other node stays up
        assert all(e.get("node") != "ib09" for e in gateway.drain())
        a = agent(gateway, "gpu01", "gpu01", "gpu8")
        gateway.wait("up", "gpu01")
    finally:
        stop(a, b)


def test_unknown_key_is_refused_and_logged(gateway: Gateway) -> None:
    intruder = agent(gateway, "intruder", "intruder", "cpuonly")
    try:
        public = (gateway.keys / "agents" / "intruder.key").read_text()
        key = public.split('public-key = "')[1].split('"')[0]
        text = wait_for_log(gateway.log, "refused agent connection")
        assert f"unknown CURVE key {key}" in text
        assert "127.0.0.1" in text
        time.sleep(5 * PERIOD)
        assert all(e.get("node") != "intruder" for e in gateway.drain())
    finally:
        stop(intruder)


def test_a_key_cannot_report_for_another_node(gateway: Gateway) -> None:
    liar = agent(gateway, "gpu01", "ib09", "portdown")
    try:
        wait_for_log(gateway.log, "dropped a report for node ib09 sent with gpu01's key")
        assert all(e.get("node") != "ib09" for e in gateway.drain())
    finally:
        stop(liar)


def test_agent_with_the_wrong_server_key_fails_the_handshake(gateway: Gateway) -> None:
    lost = agent(gateway, "gpu01", "gpu01", "gpu8", server="other-server")
    try:
        wait_for_log(gateway.log, "agent handshake failed")
        assert all(e.get("node") != "gpu01" for e in gateway.drain())
    finally:
        stop(lost)
