"""PID 1 of a job's pods (k8s_bridge/pod_init.py, pod_agent.py): SIGTERM reaches every
process of the job as slurmstepd's does, other signals the batch shell alone, orphans are
reaped, and the exit code is the script's as a shell reports it. Real processes: as PID 1 of
a PID namespace of their own (`unshare`, as root, which is how CI runs) and outside one."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from k8s_bridge import pod_wire as wire
from k8s_bridge.pod_init import exit_code

REPO = Path(__file__).resolve().parents[2]
LAUNCHER = REPO / "k8s_bridge" / "pod_launcher.py"
TOKEN = b"0123456789abcdef" * 4
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def test_the_exit_code_is_the_shells() -> None:
    assert exit_code(0) == 0
    assert exit_code(3 << 8) == 3
    assert exit_code(signal.SIGKILL) == 137
    assert exit_code(signal.SIGTERM) == 143


def _wait_for(path: Path, text: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while text not in (path.read_text() if path.exists() else ""):
        assert time.monotonic() < deadline, f"{text!r} never in {path}"
        time.sleep(0.05)


def _init(argv: list[str], *, namespace: bool) -> subprocess.Popen[bytes]:
    prefix = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"] if namespace else []
    return subprocess.Popen([*prefix, sys.executable, str(LAUNCHER), "init", *argv], env=ENV)


def _pid_one(unshare: subprocess.Popen[bytes]) -> int:
    """The init's pid as this machine sees it (unshare's only child)."""
    children = Path(f"/proc/{unshare.pid}/task/{unshare.pid}/children")
    deadline = time.monotonic() + 10
    while not children.read_text().split():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    return int(children.read_text().split()[0])


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="a PID namespace needs root (CI is)")

# the batch script: a task in a session of its own (as srun starts its tasks), which only
# the pod-wide SIGTERM reaches and which takes a while to end (the init waits for it, as a
# step's tasks get KillWait), and one in the script's own process group
# (`ready` once both tasks have set their traps: a loaded machine may start them late)
SCRIPT = """
log=$1
setsid sh -c 'trap "sleep 0.5; echo TERM session >>$0; exit 0" TERM; : >$0.session
    while :; do sleep 0.05; done' $log &
sh -c 'trap "echo TERM group >>$0; exit 0" TERM; : >$0.group; while :; do sleep 0.05; done' $log &
group=$!
trap 'echo TERM batch >>$log; wait $group; exit 7' TERM
while [ ! -e $log.session ] || [ ! -e $log.group ]; do sleep 0.02; done
echo ready >>$log
while :; do sleep 0.05; done
"""


@needs_root
def test_as_pid_one_sigterm_reaches_every_process_of_the_pod(tmp_path: Path) -> None:
    log = tmp_path / "log"
    unshare = _init(["sh", "-c", SCRIPT, "sh", str(log)], namespace=True)
    try:
        _wait_for(log, "ready")
        os.kill(_pid_one(unshare), signal.SIGTERM)  # what the kubelet sends
        assert unshare.wait(timeout=20) == 7  # the script's trap's code
    finally:
        unshare.kill()
    lines = log.read_text().splitlines()
    assert sorted(lines) == ["TERM batch", "TERM group", "TERM session", "ready"]


def test_outside_a_namespace_only_the_scripts_process_group_is_signalled(
    tmp_path: Path,
) -> None:
    """Never kill(-1) on a machine: without a PID namespace of its own the init signals the
    script's process group only (the task in its own session is left alone)."""
    log = tmp_path / "log"
    init = _init(["sh", "-c", SCRIPT, "sh", str(log)], namespace=False)
    try:
        _wait_for(log, "ready")
        init.send_signal(signal.SIGTERM)
        assert init.wait(timeout=20) == 7
    finally:
        init.kill()
    lines = log.read_text().splitlines()
    assert sorted(lines) == ["TERM batch", "TERM group", "ready"]
    subprocess.run(["pkill", "-f", f"TERM session >>\\$0.* {log}"], check=False)


def test_other_signals_go_to_the_batch_shell_alone_and_the_status_is_the_shells(
    tmp_path: Path,
) -> None:
    log = tmp_path / "log"
    script = (
        "sh -c 'trap \"echo USR1 task >>$0\" USR1; sleep 2' $1 & "
        "trap 'echo USR1 batch >>$1' USR1; echo ready >>$1; wait; kill -KILL $$"
    )
    init = _init(["sh", "-c", script, "sh", str(log)], namespace=False)
    _wait_for(log, "ready")
    time.sleep(0.2)
    init.send_signal(signal.SIGUSR1)
    assert init.wait(timeout=20) == 137  # the script killed itself: 128 + SIGKILL
    assert log.read_text().splitlines() == ["ready", "USR1 batch"]


def test_a_command_that_cannot_run_says_why(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(LAUNCHER), "init", str(tmp_path / "missing")],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert done.returncode == 127
    assert done.stderr == f"caldera init: {tmp_path / 'missing'}: No such file or directory\n"


@needs_root
def test_as_pid_one_orphans_are_reaped(tmp_path: Path) -> None:
    """A daemonised grandchild that ends is reparented to the init, which reaps it."""
    log = tmp_path / "log"
    script = (
        "sh -c 'sleep 0.2 &' ; sleep 1; "
        "grep -l '^State:.*zombie' /proc/[0-9]*/status 2>/dev/null | wc -l >$1"
    )
    unshare = _init(["sh", "-c", script, "sh", str(log)], namespace=True)
    assert unshare.wait(timeout=20) == 0
    assert log.read_text().strip() == "0"


# --- the agent of ranks > 0 --------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    (tmp_path / "token").write_bytes(TOKEN)
    port = _free_port()
    env = {**ENV, "CALDERA_AGENT_PORT": str(port), "CALDERA_TOKEN_FILE": str(tmp_path / "token")}
    proc = subprocess.Popen([sys.executable, str(LAUNCHER), "agent"], env=env)
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline, "the agent never listened"
            time.sleep(0.05)
    yield proc, port
    proc.kill()


def test_the_agents_sigterm_reaches_its_tasks_and_their_end_reaches_srun(
    agent: tuple[subprocess.Popen[bytes], int], tmp_path: Path
) -> None:
    """The pod's deletion: the running task gets SIGTERM (it used to be SIGKILLed with the
    pod), its last output and status still go back to srun, then the agent ends."""
    proc, port = agent
    task = "trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.05; done"
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        rfile = sock.makefile("rb")
        _, nonce = wire.read_frame(rfile)
        body = json.dumps({"argv": ["sh", "-c", task], "env": {}, "cwd": str(tmp_path)}).encode()
        sock.sendall(
            wire.frame(wire.AUTH, wire.proof(TOKEN, nonce, body)) + wire.frame(wire.REQUEST, body)
        )
        assert wire.read_frame(rfile) == (wire.OUT, b"ready\n")
        proc.send_signal(signal.SIGTERM)
        frames = []
        while True:
            try:
                frames.append(wire.read_frame(rfile))
            except EOFError:
                break
    # (and sh's "Terminated" on stderr for its sleep: the task's process group got it too)
    outs = [f for f in frames if f[0] != wire.ERR]
    assert outs == [(wire.OUT, b"got-term\n"), (wire.EXIT, b'{"status": 1792}')]
    assert proc.wait(timeout=20) == 0
