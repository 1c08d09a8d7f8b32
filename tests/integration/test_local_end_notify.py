"""Run ends pushed by the supervisor (containers.notify): the backend's listener is woken
when a run's result is in place, only the backend's uid can reach it, and a newer listener
(a restarted gateway) takes the socket over. Real supervisors, real sockets.
"""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from containers.interpreter import shared_python
from containers.notify import ChangeListener, announce_change, notify_dir
from gateway.model.backend import EventKind
from gateway.model.state import JobState
from tests.integration.test_local_backend_support import Env, finish, make_launch, temporary_env

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="runs jobs as another user")


@pytest.fixture
def env() -> Iterator[Env]:
    for each in temporary_env():
        each.spool.mkdir(mode=0o711)  # as LocalBackend makes it
        yield each


class Wakes:
    """Counts wake-ups (called from the listener's thread)."""

    def __init__(self) -> None:
        self.count = 0
        self.event = threading.Event()

    def __call__(self) -> None:
        self.count += 1
        self.event.set()


def test_the_end_of_a_run_wakes_the_backend_once_its_result_is_readable(env: Env) -> None:
    backend = env.backend()
    seen: list[object] = []
    woken = threading.Event()
    launch = make_launch(env, "#!/bin/sh\nsleep 0.3\n", user="tester")

    def wake() -> None:  # what the gateway then does: poll
        seen.append(backend.result(launch.job.job_id))
        woken.set()

    backend.notify_changes(wake)
    try:
        backend.submit(launch)
        assert woken.wait(30), "no wake-up after the run ended"
        assert seen[0] is not None  # the result was in place before the wake-up
        ends = [e for e in backend.poll() if e.kind is EventKind.FINISHED]
        assert [(e.job_id, e.state) for e in ends] == [(launch.job.job_id, JobState.COMPLETED)]
    finally:
        backend.close()
    assert not (notify_dir(env.spool) / "sock").exists()  # closed: removed


def test_the_socket_is_private_to_the_backend_uid(env: Env) -> None:
    wakes = Wakes()
    listener = ChangeListener(env.spool, wakes)
    try:
        directory = notify_dir(env.spool)
        dir_st = os.stat(directory)
        sock_st = os.stat(directory / "sock")
        assert (dir_st.st_uid, stat.S_IMODE(dir_st.st_mode)) == (os.geteuid(), 0o700)
        assert stat.S_ISSOCK(sock_st.st_mode)
        assert (sock_st.st_uid, stat.S_IMODE(sock_st.st_mode)) == (os.geteuid(), 0o600)
        code = (
            "import socket, sys\n"
            "s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
            "try:\n    s.sendto(b'', sys.argv[1])\n"
            "except OSError as exc:\n    print('refused', exc.errno)\n"
            "else:\n    print('sent')\n"
        )
        proc = subprocess.run(
            [shared_python(sys.executable), "-I", "-c", code, str(directory / "sock")],
            user="tester",
            group="tester",
            extra_groups=[],
            cwd="/",
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        assert proc.stdout.startswith("refused"), proc.stdout
        assert not wakes.event.wait(0.5)
        announce_change(env.spool)  # its own uid: heard
        assert wakes.event.wait(10)
    finally:
        listener.close()


def test_a_newer_listener_takes_over_and_an_older_close_leaves_it(env: Env) -> None:
    old_wakes, new_wakes = Wakes(), Wakes()
    old = ChangeListener(env.spool, old_wakes)
    new = ChangeListener(env.spool, new_wakes)  # a restarted gateway over the same spool
    try:
        old.close()
        assert (notify_dir(env.spool) / "sock").exists()
        announce_change(env.spool)
        assert new_wakes.event.wait(10)
        assert old_wakes.count == 0
    finally:
        new.close()
    assert not (notify_dir(env.spool) / "sock").exists()
    announce_change(env.spool)  # nobody listens: neither an error nor a wait


def test_a_burst_of_ends_is_heard_through_a_long_spool_path(env: Env) -> None:
    spool = env.root / ("s" * 60) / ("p" * 60)  # the socket's path is past sun_path's limit
    spool.mkdir(parents=True)
    assert len(str(notify_dir(spool) / "sock")) > 108
    wakes = Wakes()
    listener = ChangeListener(Path(spool), wakes)
    try:
        for _ in range(50):
            announce_change(spool)
        assert wakes.event.wait(10)
        assert 1 <= wakes.count <= 50
    finally:
        listener.close()


def test_without_a_usable_socket_directory_ends_are_still_polled(env: Env) -> None:
    directory = notify_dir(env.spool)
    directory.mkdir(mode=0o700)
    tester = pwd.getpwnam("tester")
    os.chown(directory, tester.pw_uid, tester.pw_gid)  # not the backend's: never used
    backend = env.backend()
    wakes = Wakes()
    backend.notify_changes(wakes)  # a warning, not a gateway that does not start
    try:
        launch = make_launch(env, "#!/bin/sh\ntrue\n", user="tester")
        event = finish(backend, launch)
        assert event.state is JobState.COMPLETED
        assert wakes.count == 0
        assert not (directory / "sock").exists()
    finally:
        backend.close()
