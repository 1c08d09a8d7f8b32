"""The fork server (containers.forkserver): supervisors forked from one pre-imported process
keep the runner's guarantees. A kill -9 of the server with jobs running loses nothing and
runs nothing twice (each run recorded under flock, tests/support/attempt_log); only root
can talk to it; nothing of the server leaks into a job. Real processes, the real `tester`.
"""

from __future__ import annotations

import os
import pwd
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from containers.backend import LocalBackend
from containers.interpreter import shared_python
from gateway.model.backend import EventKind
from gateway.model.state import JobState
from tests.integration.test_local_backend_support import (
    Env,
    make_launch,
    temporary_env,
    wait_until,
)
from tests.support.attempt_log import AttemptLog

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="runs jobs as another user")


@pytest.fixture
def env() -> Iterator[Env]:
    yield from temporary_env()


def _gated_script(log: AttemptLog, gate: Path) -> str:
    """Records its start, waits until `gate` exists, records its end (under flock)."""
    return (
        f"#!/bin/sh\nexport NT_LOG={log.path}\n{log.rec} start $$\n"
        f"while [ ! -e {gate} ]; do sleep 0.05; done\n{log.rec} end $$\n"
    )


def _server_pid(backend: LocalBackend) -> int:
    pid = backend.fork_server_pid()
    assert pid is not None
    assert "--fork-server" in psutil.Process(pid).cmdline()
    return pid


def _finished(backend: LocalBackend, ids: set[int], timeout: float = 30) -> dict[int, JobState]:
    ends: dict[int, JobState] = {}
    deadline = time.monotonic() + timeout
    while set(ends) != ids:
        assert time.monotonic() < deadline, f"not finished: {ids - set(ends)}"
        for event in backend.poll():
            if event.kind is EventKind.FINISHED and event.state is not None:
                ends[event.job_id] = event.state
        time.sleep(0.05)
    return ends


def test_kill_9_of_the_fork_server_leaves_running_jobs_and_their_results(env: Env) -> None:
    backend, log = env.backend(), AttemptLog(env.work)
    gate = env.work / "go"
    try:
        launches = [make_launch(env, _gated_script(log, gate), user="tester") for _ in range(3)]
        for launch in launches:
            backend.submit(launch)
        ids = {launch.job.job_id for launch in launches}
        for job_id in ids:
            log.wait_for(job_id, 0, kind="start")
        server = _server_pid(backend)
        supervisors = {job_id: backend.supervisor_pid(job_id) for job_id in ids}
        for pid in supervisors.values():  # nobody's child but init's or a subreaper's
            assert pid is not None
            assert psutil.Process(pid).ppid() != server

        os.kill(server, signal.SIGKILL)
        wait_until(lambda: not psutil.pid_exists(server) or _zombie(server))
        assert all(psutil.pid_exists(pid) for pid in supervisors.values() if pid is not None)
        assert not [r for r in log.records() if r.kind == "end"]  # all still running
        gate.touch()

        # the gateway restarts meanwhile: a new backend over the same spool gets every result
        fresh = env.backend()
        reconciled = fresh.reconcile([launch.job for launch in launches])
        ends = {e.job_id: e.state for e in reconciled if e.kind is EventKind.FINISHED}
        ends.update(_finished(fresh, ids - set(ends)))
        assert ends == dict.fromkeys(ids, JobState.COMPLETED)
        for job_id in ids:
            kinds = sorted(r.kind for r in log.records(job_id))
            assert kinds == ["end", "start"], (job_id, kinds)  # started once, ended once
            log.assert_never_twice(job_id, 1)

    finally:
        gate.touch()  # a failure must not leave the gated jobs waiting forever
    # the next launch starts a new fork server, and its job runs
    later = make_launch(env, _gated_script(log, gate), user="tester")
    fresh.submit(later)
    assert _finished(fresh, {later.job.job_id}) == {later.job.job_id: JobState.COMPLETED}
    assert _server_pid(fresh) != server
    fresh.close()


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


_CONNECT = """
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(sys.argv[1])
except OSError as exc:
    print("refused", exc.errno)
    sys.exit(0)
s.sendall(b'{"op": "spawn", "jobdir": "' + sys.argv[2].encode() + b'"}\\n')
print("answer", s.recv(4096).decode().strip())
"""


def _as_tester(sock: Path, jobdir: Path) -> str:
    proc = subprocess.run(
        [shared_python(sys.executable), "-I", "-c", _CONNECT, str(sock), str(jobdir)],
        user="tester",
        group="tester",
        extra_groups=[],
        cwd="/",
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return proc.stdout.strip()


def test_a_job_user_cannot_talk_to_the_fork_server(env: Env) -> None:
    backend = env.backend()
    launch = make_launch(env, "#!/bin/sh\ntrue\n", user="tester")
    backend.submit(launch)
    assert _finished(backend, {launch.job.job_id})[launch.job.job_id] is JobState.COMPLETED
    server = _server_pid(backend)
    directory = env.spool / "forkserver"
    sock = directory / "sock"
    for path, mode in ((directory, 0o700), (sock, 0o600)):
        st = os.lstat(path)
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, mode), path
    target = backend.job_dir(launch.job.job_id)
    assert _as_tester(sock, target).startswith("refused 13")  # EACCES: the directory

    # were the directory and socket opened up by mistake, the server still checks the peer
    directory.chmod(0o711)
    sock.chmod(0o666)
    try:
        answer = _as_tester(sock, target)
    finally:
        directory.chmod(0o700)
        sock.chmod(0o600)
    uid = pwd.getpwnam("tester").pw_uid
    assert answer.startswith("answer")
    assert '"ok": false' in answer
    assert f"uid {uid} " in answer
    assert psutil.pid_exists(server)  # still serving root
    again = make_launch(env, "#!/bin/sh\ntrue\n", user="tester")
    backend.submit(again)
    assert _finished(backend, {again.job.job_id})[again.job.job_id] is JobState.COMPLETED
    backend.close()


def test_a_job_holds_nothing_of_the_fork_server(env: Env) -> None:
    """No descriptor of the server (its socket, the spawn pipe, a root file) reaches the
    job; the job runs as its user with its groups, not in the server's session."""
    backend = env.backend()
    out = env.work / "fds.out"
    script = (
        "#!/bin/sh\nid -u; id -G; ps -o sid= -p $$\n"
        "for f in /proc/$$/fd/*; do readlink $f; done\nexit 0\n"
    )
    launch = make_launch(env, script, ["-o", str(out)], user="tester")
    backend.submit(launch)
    assert _finished(backend, {launch.job.job_id})[launch.job.job_id] is JobState.COMPLETED
    lines = out.read_text().splitlines()
    tester = pwd.getpwnam("tester")
    assert lines[0] == str(tester.pw_uid)
    assert lines[1] == str(tester.pw_gid)
    server = _server_pid(backend)
    assert int(lines[2]) != os.getsid(server)
    targets = lines[3:]
    assert targets, "the job lists its descriptors"
    leaks = [t for t in targets if t.startswith(("socket:", "pipe:")) or str(env.spool) in t]
    allowed = {str(backend.job_dir(launch.job.job_id) / "slurm_script")}
    assert [t for t in leaks if t not in allowed] == [], targets
    backend.close()
    wait_until(lambda: not psutil.pid_exists(server) or _zombie(server))
    with (
        pytest.raises(FileNotFoundError),  # close() stopped it: it removed its socket
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn,
    ):
        conn.connect(str(env.spool / "forkserver" / "sock"))
