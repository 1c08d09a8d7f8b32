"""The fork server: one pre-imported process per spool that starts job supervisors by fork.

Starting `python -m containers.supervisor` costs an interpreter start and its imports per
job (most of a short job's cost). The fork server pays that once: it imports the supervisor
and waits on a Unix socket; for each run it forks a child that double-forks (a new session)
into the run's supervisor, the same code `python -m containers.supervisor --detach` runs.
That child answers the request once the supervisor is forked, so the server takes the next
request meanwhile (the launches of one scheduling cycle arrive together).

Guarantees, the same as the exec path's:

- A supervisor is not the server's child: the intermediate child exits at once and the
  supervisor is reparented (to init, or the nearest subreaper), so a kill -9 of the server
  (or of the gateway) leaves every running job and its result alone. A supervisor started
  by a dead server is watched exactly as before: by its `supervisor.json` (containers.events).
- Only the server's own uid may ask it anything: the socket is in a 0700 directory of that
  uid, the socket is 0600, and each connection's SO_PEERCRED uid is checked. A request names
  only a run directory directly under the spool's `jobs/`.
- Nothing of the server leaks into a supervisor: the child closes every descriptor but its
  stdio (which it points at the run's `supervisor.log`), resets signal handlers and starts
  in `/` with umask 077; the supervisor then forks the job as it always did (cgroup join,
  setgroups/setgid/setuid, the user's umask and rlimits, exec).
- Never twice is not the server's business: the backend writes `spawned` before it asks, so
  a retried submit never asks again, and a request whose answer was lost is a run that the
  spawn grace (containers.attempts) reports lost if its supervisor never appears.

The server exits when told (`LocalBackend.close`), when its code changed on disk (a newer
backend replaces it), when its spool is gone, or after `IDLE_EXIT_S` without a request.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import os
import selectors
import signal
import socket
import stat
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

from containers.proc import bind_private, reap_exited
from containers.spool import read_json, write_json

__all__ = ["IDLE_EXIT_S", "ForkServerClient", "build_id", "main", "pythonpath"]

IDLE_EXIT_S = 600.0
_CONNECT_TIMEOUT_S = 30.0
_REQUEST_LIMIT = 4096
_RUN_NAME_CHARS = frozenset("0123456789.")
_REPO_ROOT = Path(__file__).resolve().parent.parent


def build_id() -> str:
    """The code a server runs: the names, sizes and mtimes of the modules it forks from."""
    digest = hashlib.sha256()
    for package in ("containers", "gateway/model"):
        for path in sorted((_REPO_ROOT / package).glob("*.py")):
            st = path.stat()
            digest.update(f"{path.name}:{st.st_size}:{st.st_mtime_ns};".encode())
    return digest.hexdigest()[:16]


def server_dir(spool: Path) -> Path:
    return spool / "forkserver"


# --- the client (in the gateway) ---------------------------------------------------------


class ForkServerClient:
    """The backend's side: asks the spool's server to start a run's supervisor, starting
    (or replacing) the server when there is none with the backend's code."""

    def __init__(self, spool: Path, python: str) -> None:
        self.spool = spool
        self.dir = server_dir(spool)
        self.sock_path = self.dir / "sock"
        self.python = python
        self._checked = False
        self._lock = threading.Lock()  # launches come from several threads: one starter

    def spawn(self, jobdir: Path) -> int:
        """The supervisor's pid, once it was forked. OSError when the server could not be
        reached or refused; the request may then have reached it (see the module's note)."""
        with self._lock:
            if not self._checked:
                self._ensure()
        try:
            answer = self._ask({"op": "spawn", "jobdir": str(jobdir)})
        except (ConnectionRefusedError, FileNotFoundError):  # gone since: a new one, once
            with self._lock:
                self._ensure()  # (found running if another thread just started it)
            answer = self._ask({"op": "spawn", "jobdir": str(jobdir)})
        if not answer.get("ok"):
            raise OSError(f"fork server: {answer.get('error', 'refused')}")
        pid = answer.get("pid")
        return pid if isinstance(pid, int) else 0

    def stop(self) -> None:
        """Ask the server to exit (running jobs are not its children: they go on)."""
        with contextlib.suppress(OSError, ValueError):
            self._ask({"op": "exit"}, timeout=2.0)
        self._checked = False

    def server_pid(self) -> int | None:
        info = read_json(self.dir / "server.json")
        pid = info.get("pid") if isinstance(info, dict) else None
        return pid if isinstance(pid, int) else None

    def _ensure(self) -> None:
        """A server with this code answers on the socket (started or replaced if not)."""
        want = build_id()
        try:
            answer = self._ask({"op": "ping"}, timeout=5.0)
        except (OSError, ValueError):
            answer = {}
        if answer.get("build") != want:
            if answer:
                self.stop()
            self._start()
        self._checked = True

    def _start(self) -> None:
        self.dir.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(self.dir)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            raise PermissionError(f"{self.dir} is not a directory of uid {os.geteuid()}")
        if st.st_mode & 0o077:
            os.chmod(self.dir, 0o700)
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": pythonpath()}
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        log = os.open(self.dir / "server.log", flags, 0o600)
        try:
            code = subprocess.call(
                [self.python, "-m", "containers.supervisor", "--fork-server", str(self.spool)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                cwd="/",
                env=env,
                start_new_session=True,
                timeout=_CONNECT_TIMEOUT_S,
            )
        finally:
            os.close(log)
        if code != 0:
            raise OSError(f"the fork server did not start (exit {code})")
        deadline = time.monotonic() + _CONNECT_TIMEOUT_S
        while True:
            try:
                if self._ask({"op": "ping"}, timeout=5.0).get("build"):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.01)

    def _ask(
        self, request: dict[str, object], timeout: float = _CONNECT_TIMEOUT_S
    ) -> dict[str, object]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout)
            _connect(conn, self.sock_path)
            conn.sendall(json.dumps(request).encode() + b"\n")
            data = _read_line(conn)
        answer = json.loads(data)
        if not isinstance(answer, dict):
            raise ValueError("fork server: a malformed answer")
        return answer


def _connect(conn: socket.socket, path: Path) -> None:
    """Connect to `path`; one too long for a socket address through a descriptor of its
    directory."""
    if len(str(path)) < 100:
        conn.connect(str(path))
        return
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        conn.connect(f"/proc/self/fd/{dir_fd}/{path.name}")
    finally:
        os.close(dir_fd)


def _read_line(conn: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(_REQUEST_LIMIT)
        if not chunk:
            break
        data += chunk
        if len(data) > _REQUEST_LIMIT:
            raise ValueError("request too long")
    return data


def pythonpath() -> str:
    current = os.environ.get("PYTHONPATH", "")
    return f"{_REPO_ROOT}:{current}" if current else str(_REPO_ROOT)


# --- the server --------------------------------------------------------------------------


class ForkServer:
    """Serves one spool: a single thread (fork-safe), one request per connection."""

    def __init__(self, spool: Path) -> None:
        self.spool = spool
        self.jobs_dir = spool / "jobs"
        self.dir = server_dir(spool)
        self.build = build_id()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.stopping = False

    def bind(self) -> None:
        """Bind `sock` (0600) in the server's 0700 directory, through a descriptor of it
        (nothing followed; no limit of a socket path's length)."""
        dir_fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            st = os.fstat(dir_fd)
            if st.st_uid != os.geteuid() or st.st_mode & 0o077:
                raise SystemExit(f"forkserver: {self.dir} must be a 0700 directory of this uid")
            # a running server's socket is replaced only by a listening one
            bind_private(self.listener, dir_fd, lambda: self.listener.listen(128))
        finally:
            os.close(dir_fd)

    def announce(self) -> None:
        """Record the serving process (after detaching: its final pid)."""
        write_json(self.dir / "server.json", {"pid": os.getpid(), "build": self.build})

    def serve(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self.listener, selectors.EVENT_READ)
        signal.signal(signal.SIGTERM, self._stop)
        last = time.monotonic()
        while not self.stopping:
            if not sel.select(timeout=5.0):
                reap_exited()  # the intermediates, once each forked its supervisor
                if time.monotonic() - last > IDLE_EXIT_S or not self._still_ours():
                    break
                continue
            with contextlib.suppress(OSError):
                conn, _ = self.listener.accept()
                last = time.monotonic()
                with conn:
                    self._handle(conn)
            reap_exited()  # the intermediates, once each forked its supervisor
        self._unlink_socket()

    def _stop(self, signum: int, frame: object) -> None:
        self.stopping = True

    def _still_ours(self) -> bool:
        """The socket still is this server's (a newer one may have replaced it)."""
        info = read_json(self.dir / "server.json")
        return isinstance(info, dict) and info.get("pid") == os.getpid()

    def _unlink_socket(self) -> None:
        if self._still_ours():
            with contextlib.suppress(FileNotFoundError):
                (self.dir / "sock").unlink()

    def _handle(self, conn: socket.socket) -> None:
        conn.settimeout(5.0)
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _, uid, _ = struct.unpack("3i", creds)
        try:  # read before any answer: a close with unread data resets the peer's connection
            request = json.loads(_read_line(conn))
        except (ValueError, OSError):
            request = None
        if uid != os.geteuid():
            _answer(conn, {"ok": False, "error": f"uid {uid} may not use this fork server"})
            return
        if request is None:
            _answer(conn, {"ok": False, "error": "malformed request"})
            return
        op = request.get("op") if isinstance(request, dict) else None
        if op == "ping":
            _answer(conn, {"ok": True, "build": self.build, "pid": os.getpid()})
        elif op == "exit":
            self.stopping = True
            _answer(conn, {"ok": True})
        elif op == "spawn":
            refused = self._spawn(conn, request.get("jobdir"))
            if refused is not None:
                _answer(conn, refused)
        else:
            _answer(conn, {"ok": False, "error": f"unknown request {op!r}"})

    def _spawn(self, conn: socket.socket, jobdir: object) -> dict[str, object] | None:
        """Fork the run's intermediate, which answers on `conn` once the supervisor is
        forked (None), or the refusal to answer. The server goes on at once: the next
        request does not wait for this one's second fork."""
        if not isinstance(jobdir, str):
            return {"ok": False, "error": "no run directory"}
        path = Path(jobdir)
        name = path.name
        if path.parent != self.jobs_dir or not name or not set(name) <= _RUN_NAME_CHARS:
            return {"ok": False, "error": f"{jobdir} is not a run directory of this spool"}
        try:
            pid = os.fork()
        except OSError as exc:
            return {"ok": False, "error": f"cannot start the supervisor of {name}: {exc}"}
        if pid == 0:  # the intermediate child: never returns
            _intermediate(path, conn.fileno())
        return None


def _answer(conn: socket.socket, answer: dict[str, object]) -> None:
    with contextlib.suppress(OSError):
        conn.sendall(json.dumps(answer).encode() + b"\n")


def _intermediate(jobdir: Path, conn_fd: int) -> None:
    """In the server's child: a new session, then the supervisor in a second child (so it
    is nobody's child but init's or a subreaper's); this one answers the request on
    `conn_fd` (the supervisor's pid, or why not) and exits at once."""
    code = 1
    answer: dict[str, object] = {
        "ok": False,
        "error": f"the supervisor of {jobdir.name} did not start",
    }
    try:
        os.setsid()
        _reset_inherited(jobdir, (conn_fd,))
        pid = os.fork()
        if pid == 0:
            _supervise(jobdir, conn_fd)
        answer = {"ok": True, "pid": pid}
        code = 0
    except BaseException as exc:  # noqa: BLE001 - the client is told, whatever it was
        answer["error"] = f"cannot start the supervisor of {jobdir.name}: {exc}"
    finally:
        with contextlib.suppress(BaseException):
            os.write(conn_fd, json.dumps(answer).encode() + b"\n")
        os._exit(code)


def _reset_inherited(jobdir: Path, keep: tuple[int, ...]) -> None:
    """What the server holds is not the supervisor's: descriptors (but stdio, pointed at
    the run's log, and `keep`), signal handlers, cwd, umask."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    log = os.open(jobdir / "supervisor.log", flags, 0o600)
    null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    for fd in _open_fds():
        if fd > 2 and fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)
    os.chdir("/")
    os.umask(0o077)


def _open_fds() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        return list(range(3, 1024))


def _supervise(jobdir: Path, conn_fd: int) -> None:
    """The run's supervisor, as `python -m containers.supervisor --detach` would run it."""
    code = 1
    try:
        os.close(conn_fd)
        from containers.supervisor import Supervisor

        code = Supervisor(jobdir).run()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException as exc:  # noqa: BLE001 - report anything in the run's log
        with contextlib.suppress(BaseException):
            sys.stderr.write(f"supervisor: {jobdir.name}: {exc!r}\n")
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def main(argv: list[str]) -> int:
    """`python -m containers.supervisor --fork-server SPOOL` (so `ps` names every process
    of the runner `containers.supervisor`): bind, detach, serve."""
    if len(argv) != 1:
        sys.stderr.write("usage: python -m containers.supervisor --fork-server SPOOL\n")
        return 2
    import containers.supervisor  # noqa: F401 - what every fork runs, imported once (not __main__)

    server = ForkServer(Path(argv[0]))
    server.bind()  # before detaching: the starter's wait means "bound" (or failed)
    if os.fork() > 0:
        os._exit(0)
    with contextlib.suppress(OSError):
        os.setsid()
    if os.fork() > 0:
        os._exit(0)
    os.chdir("/")
    os.umask(0o077)
    server.announce()
    # what every fork inherits leaves the collector's generations: a supervisor's collections
    # then never touch (and copy) the server's pages (a third fewer page faults per fork)
    gc.freeze()
    server.serve()
    return 0
