"""The rank agent of a gang's pods (ranks > 0): runs srun's tasks on its node.

Every rank but 0 runs `launcher.py agent` (launch.WORKER_COMMAND) instead of a sleep. It
listens on CALDERA_AGENT_PORT (6818, slurmd's port) of the pod and runs one task per
connection: the client first proves it knows the job's token (HMAC-SHA256 over a fresh nonce
and the request's digest, compared in constant time; the token file is 0400 in the pod and
never crosses the network), so an unauthenticated peer can send the agent 64 bytes, no more;
then it sends argv + environment + directory as JSON, which must match that digest. argv is
executed directly (never a shell), stdout/stderr stream back in frames, then the status.
The pod's SIGTERM (its deletion) reaches every task as slurmstepd's would, and the agent
ends once they have (`_Server.stop`).

Shipped beside pod_launcher.py (launch.py); standard library and the shipped modules only.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
from typing import BinaryIO

from k8s_bridge.pod_init import signal_all
from k8s_bridge.pod_launch_plan import task_umask
from k8s_bridge.pod_wire import (
    AUTH,
    AUTH_SIZE,
    ERR,
    EXIT,
    FAIL,
    HELLO,
    OUT,
    REQUEST,
    SIGNAL,
    ProtocolError,
    authentic,
    frame,
    matches,
    parse_request,
    read_frame,
)

__all__ = ["PORT", "TOKEN_PATH", "agent", "killpg", "read_token", "server"]

JOB_DIR = "/caldera/job"
TOKEN_PATH = f"{JOB_DIR}/token"
PORT = 6818


def read_token(path: str = TOKEN_PATH) -> bytes:
    with open(path, "rb") as f:
        return f.read().strip()


# --- the agent --------------------------------------------------------------------------


class _Task(socketserver.StreamRequestHandler):
    """One connection: authenticate, run one task, stream it, report its end."""

    token = b""
    node = ""
    tasks: set[int]  # the pids (= process groups) of the agent's running tasks

    def send(self, kind: bytes, payload: bytes = b"") -> None:
        with self.lock:
            self.wfile.write(frame(kind, payload))
            self.wfile.flush()

    def handle(self) -> None:
        self.lock = threading.Lock()
        nonce = os.urandom(32)
        try:
            self.connection.settimeout(30)  # a peer that says nothing does not hold a thread
            self.send(HELLO, nonce)
            kind, answer = read_frame(self.rfile, AUTH_SIZE)  # nothing larger unauthenticated
            if kind != AUTH or not authentic(self.token, nonce, answer):
                self.send(FAIL, b"authentication failed")
                return
            kind, payload = read_frame(self.rfile)
            if kind != REQUEST or not matches(answer, payload):
                raise ProtocolError("the request is not the one authenticated")
            argv, env, cwd = parse_request(payload)
            self.connection.settimeout(None)
        except (EOFError, ProtocolError, OSError) as exc:
            with_message = str(exc) or "connection closed"
            with contextlib.suppress(OSError):
                self.send(FAIL, with_message.encode())
            return
        self.run(argv, env, cwd)

    def run(self, argv: list[str], env: dict[str, str], cwd: str) -> None:
        if not os.path.isdir(cwd):
            note = f"slurmstepd: error: couldn't chdir to `{cwd}': No such file or directory:"
            self.send(ERR, f"{note} going to /tmp instead\n".encode())
            cwd = "/tmp"
        try:
            proc = subprocess.Popen(
                argv,
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                umask=task_umask(env),
            )
        except OSError as exc:
            line = f"slurmstepd-{self.node}: error: execve(): {argv[0]}: {exc.strerror}\n"
            self.send(ERR, line.encode())
            self.send(EXIT, json.dumps({"status": (exc.errno or 1) << 8}).encode())
            return
        tasks = self.tasks
        tasks.add(proc.pid)
        try:
            pumps = [
                threading.Thread(target=self.pump, args=(proc.stdout, OUT), daemon=True),
                threading.Thread(target=self.pump, args=(proc.stderr, ERR), daemon=True),
            ]
            for t in pumps:
                t.start()
            threading.Thread(target=self.control, args=(proc,), daemon=True).start()
            code = proc.wait()
            for t in pumps:
                t.join()
            status = (-code) & 0x7F if code < 0 else (code & 0xFF) << 8
            with contextlib.suppress(OSError):
                self.send(EXIT, json.dumps({"status": status}).encode())
                self.connection.shutdown(socket.SHUT_RDWR)  # ends control()'s read
        finally:
            tasks.discard(proc.pid)

    def pump(self, pipe: BinaryIO, kind: bytes) -> None:
        for chunk in iter(lambda: pipe.read1(65536), b""):  # type: ignore[attr-defined]
            with contextlib.suppress(OSError):
                self.send(kind, chunk)
        pipe.close()

    def control(self, proc: subprocess.Popen[bytes]) -> None:
        """Signals srun forwards; srun gone (the connection closed) kills the task."""
        try:
            while True:
                kind, payload = read_frame(self.rfile)
                if kind == SIGNAL and payload.isdigit():
                    killpg(proc.pid, int(payload))
        except (EOFError, ProtocolError, OSError, ValueError):
            if proc.poll() is None:
                killpg(proc.pid, signal.SIGKILL)


def killpg(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


class _Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[_Task]) -> None:
        super().__init__(address, handler)
        self.tasks = handler.tasks

    def stop(self) -> None:
        """The pod's SIGTERM, as slurmstepd's: SIGCONT + SIGTERM to every task (the whole
        pod when the agent is its init), then wait until each has ended and its status
        went to srun; the kubelet's SIGKILL ends a task that ignores it."""
        signal_all(set(self.tasks), signal.SIGTERM)
        while self.tasks:
            time.sleep(0.05)
        os._exit(0)


def server(port: int, token: bytes, node: str) -> _Server:
    """The agent's listening server (port 0: any free port, for tests)."""
    handler = type("Handler", (_Task,), {"token": token, "node": node, "tasks": set()})
    return _Server(("0.0.0.0", port), handler)  # noqa: S104 - the pod's own address


def agent(port: int = PORT, token_path: str = TOKEN_PATH) -> int:
    """Serve tasks until SIGTERM (the pod's end)."""
    token = read_token(token_path)
    if not token:
        sys.stderr.write(f"caldera agent: no token in {token_path}\n")
        return 1
    srv = server(port, token, os.uname().nodename)
    signal.signal(signal.SIGTERM, lambda *_: srv.stop())
    srv.serve_forever()
    return 0
