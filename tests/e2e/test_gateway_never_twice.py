"""Never twice, through the real gateway (`caldera up`) and the local runner: scontrol
requeue, kill -9 of a job's supervisor (alone, and with the gateway), requeue during the
launch and node-down fail-over each end the whole run before the next one starts. Each job
records its runs with flock (tests/support/attempt_log): no two runs of a job overlap, each
run is recorded, and scontrol shows the restarts.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import zmq

from gateway.inventory.keys import load_keypair, load_public_key
from gateway.inventory.messages import Heartbeat, Inventory, encode
from tests.support.attempt_log import AttemptLog
from tests.support.gateway_env import CALDERA, Gateway, discard_gateway, start_gateway

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="runs jobs as another user")


def _submit(gw: Gateway, log: AttemptLog, final: int, *directives: str) -> int:
    script = gw.workdir / f"job{time.monotonic_ns()}.sh"
    script.write_text(log.script(final, "--requeue", *directives))
    script.chmod(0o644)
    return gw.sbatch(str(script), user="tester")


def _spool(gw: Gateway, job: int, run: int = 0) -> Path:
    return gw.home / "spool" / "jobs" / (str(job) if run == 0 else f"{job}.{run}")


def _supervisor(gw: Gateway, job: int, run: int = 0) -> int:
    return int(json.loads((_spool(gw, job, run) / "supervisor.json").read_text())["pid"])


def _restarts(gw: Gateway, job: int) -> int:
    show = gw.ok(["scontrol", "show", "job", str(job)])
    return int(show.split("Restarts=")[1].split()[0])


def _finished_once_more(gw: Gateway, log: AttemptLog, job: int, restarts: int = 1) -> None:
    assert gw.wait(job, timeout=60)["state"] == "COMPLETED"
    assert _restarts(gw, job) == restarts
    log.assert_never_twice(job, restarts + 1)
    log.assert_all_gone(job)
    acct = gw.ok(["sacct", "-X", "-n", "-P", "-o", "JobID,State", "-j", str(job)])
    assert acct.split() == [f"{job}|COMPLETED"]


def _gone(pid: int) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_scontrol_requeue_ends_the_whole_run_first(gateway: Gateway) -> None:
    log = AttemptLog(gateway.workdir)
    job = _submit(gateway, log, 1)
    log.wait_for(job, 0)
    gateway.ok(["scontrol", "requeue", str(job)])
    _finished_once_more(gateway, log, job)


def test_a_killed_supervisor_is_requeued_without_overlap_and_logged(gateway: Gateway) -> None:
    log = AttemptLog(gateway.workdir)
    job = _submit(gateway, log, 1)
    log.wait_for(job, 0)
    os.kill(_supervisor(gateway, job), signal.SIGKILL)
    _finished_once_more(gateway, log, job)
    text = (gateway.home / "gateway.log").read_text()
    line = next(x for x in text.splitlines() if f"of job {job} died" in x)
    assert "WARNING" in line
    assert "orphaned processes killed" in line
    assert "; 0 orphaned" not in line


def test_supervisor_and_gateway_killed_together_then_restarted(gateway: Gateway) -> None:
    log = AttemptLog(gateway.workdir)
    job = _submit(gateway, log, 1)
    log.wait_for(job, 0)
    gateway_pid = int((gateway.home / "gateway.pid").read_text())
    os.kill(_supervisor(gateway, job), signal.SIGKILL)
    os.kill(gateway_pid, signal.SIGKILL)
    _gone(gateway_pid)
    time.sleep(0.5)  # the orphaned daemon keeps beating with nobody watching
    assert any(r.time > time.time() - 0.4 for r in log.records(job))
    up = subprocess.run(
        [*CALDERA, "up"], env=gateway.env(), capture_output=True, text=True, timeout=60
    )
    assert up.returncode == 0, up.stderr
    _finished_once_more(gateway, log, job)


def test_requeue_during_the_launch(gateway: Gateway) -> None:
    log = AttemptLog(gateway.workdir)
    job = _submit(gateway, log, 1)
    deadline = time.monotonic() + 30
    while gateway.run(["scontrol", "requeue", str(job)]).returncode != 0:
        assert time.monotonic() < deadline  # refused while pending: ask again at once
    assert gateway.wait(job, timeout=60)["state"] == "COMPLETED"
    assert _restarts(gateway, job) == 1
    attempts = {r.attempt for r in log.records(job)}
    if 0 in attempts:  # its script had started before the requeue: ended first
        log.assert_never_twice(job, 2)
    else:
        assert attempts == {1}
    log.assert_all_gone(job)


@pytest.fixture
def agent_gateway() -> Iterator[tuple[Path, Gateway]]:
    base = Path(tempfile.mkdtemp(prefix="h1a-failover-", dir="/tmp"))
    config = "time_scale = 0.016666\nkill_wait_s = 2\nagent_period_s = 0.3\nagent_missed = 2\n"
    gw = start_gateway(base, config)
    try:
        yield base, gw
    finally:
        discard_gateway(gw, base)


def test_node_down_fail_over_ends_the_run_before_it_runs_again(
    agent_gateway: tuple[Path, Gateway],
) -> None:
    """A real agent (CURVE-authenticated, as `caldera agent-key` authorises it) reports the
    gateway's own node, then falls silent: the node goes DOWN and its job is requeued."""
    base, gw = agent_gateway
    node = socket.gethostname().split(".")[0] or "localhost"
    subprocess.run(
        [*CALDERA, "agent-key", node, "--out", str(base / "agent")],
        env=gw.env(),
        check=True,
        capture_output=True,
        timeout=60,
    )
    endpoint = (gw.home / "agents.endpoint").read_text().strip()
    inventory = Inventory(node=node, cpus=os.cpu_count() or 1, memory_bytes=2**33)
    gwlog = gw.home / "gateway.log"
    ups = f"node {node} up"
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        pair = load_keypair(base / "agent" / f"{node}.key_secret")

        def connect() -> zmq.Socket[bytes]:
            sock = ctx.socket(zmq.DEALER)
            sock.linger = 0
            sock.curve_secretkey = pair.secret or b""
            sock.curve_publickey = pair.public
            sock.curve_serverkey = load_public_key(gw.home / "keys" / "gateway.key")
            sock.connect(endpoint)
            return sock

        # refused until the gateway re-reads the authorised keys (every 3 s): a refused
        # CURVE handshake is not retried, so connect again until the node registers
        deadline = time.monotonic() + 30
        while True:
            agent = connect()
            agent.send_multipart(encode(inventory), zmq.NOBLOCK)
            time.sleep(0.5)
            if ups in gwlog.read_text():
                break
            assert time.monotonic() < deadline, gwlog.read_text()[-3000:]
            agent.close()
        seq = 0

        def beat(with_inventory: bool = False) -> None:
            nonlocal seq
            seq += 1
            with contextlib.suppress(zmq.Again):  # never block the test on a full queue
                if with_inventory:
                    agent.send_multipart(encode(inventory), zmq.NOBLOCK)
                beat_msg = Heartbeat(node=node, seq=seq, sent=time.time())
                agent.send_multipart(encode(beat_msg), zmq.NOBLOCK)
            time.sleep(0.1)

        def until(done: Callable[[], bool], what: str, timeout: float = 30) -> None:
            deadline = time.monotonic() + timeout
            while not done():
                assert time.monotonic() < deadline, f"{what}\n{gwlog.read_text()[-3000:]}"
                beat(with_inventory=True)

        log = AttemptLog(gw.workdir)
        job = _submit(gw, log, 1)
        until(lambda: any(r.attempt == 0 for r in log.records(job)), "run 0 starts")
        log.wait_for(job, 0, timeout=5)
        # silence: DOWN after (agent_missed + 0.5) * agent_period_s; the job is requeued
        deadline = time.monotonic() + 20
        while f"node {node} down: job {job} requeued" not in gwlog.read_text():
            assert time.monotonic() < deadline, gwlog.read_text()[-3000:]
            time.sleep(0.1)
        log.assert_all_gone(job, timeout=0)  # ended before the requeue was committed
        until(lambda: gwlog.read_text().count(ups) >= 2, "the node comes back")
        until(lambda: gw.job(job)["state"] == "COMPLETED", "run 1 completes", timeout=60)
        _finished_once_more(gw, log, job)
    finally:
        ctx.destroy(linger=0)
