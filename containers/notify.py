"""Run ends pushed to the gateway: a supervisor's datagram wakes the scheduling cycle.

The gateway learns that a run ended by reading the spool in `poll()`, which it calls every
`cycle_interval_s` (0.2 s) unless something wakes it; a short job then holds its CPUs for up
to that long after it ended. Each supervisor, once its `result.json` is in place, sends one
empty datagram to `<spool>/notify/sock`; the backend's listener thread turns a burst of
them into one wake-up of the cycle, which then polls as always.

Nothing is trusted from a datagram: it carries no data, only "read the spool now", so a
lost one (the gateway is down, the queue is full) costs only latency: the periodic poll still
finds the end, and a restarted gateway reconciles from the spool as before. The socket is
0600 in a 0700 directory of the backend's uid: job users cannot reach it.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import stat
import threading
from collections.abc import Callable
from pathlib import Path

from containers.proc import bind_private

__all__ = ["ChangeListener", "announce_change", "notify_dir"]

_ADDRESS_LIMIT = 100  # longer socket paths go through a descriptor of their directory


def notify_dir(spool: Path) -> Path:
    return spool / "notify"


def announce_change(spool: Path) -> None:
    """Best effort, never blocking: wake the spool's listener, if one is there."""
    path = notify_dir(spool) / "sock"
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.setblocking(False)
        if len(str(path)) < _ADDRESS_LIMIT:
            s.sendto(b"", str(path))
            return
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            s.sendto(b"", f"/proc/self/fd/{dir_fd}/sock")
        finally:
            os.close(dir_fd)


class ChangeListener:
    """The backend's side: one daemon thread that calls `wake` once per burst of datagrams
    (from that thread: `wake` must be thread-safe)."""

    def __init__(self, spool: Path, wake: Callable[[], None]) -> None:
        self.dir = notify_dir(spool)
        self.wake = wake
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._bound = self._bind()
        self._stop_r, self._stop_w = os.pipe2(os.O_CLOEXEC)  # close() wakes the thread
        self._thread = threading.Thread(target=self._run, name="caldera-local-ends", daemon=True)
        self._thread.start()

    def _bind(self) -> tuple[int, int]:
        """Bind `sock` (0600) in a 0700 directory of this uid, replacing a dead gateway's;
        its (device, inode)."""
        self.dir.mkdir(mode=0o700, exist_ok=True)
        dir_fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            st = os.fstat(dir_fd)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
                raise PermissionError(f"{self.dir} is not a directory of uid {os.geteuid()}")
            if st.st_mode & 0o077:
                os.fchmod(dir_fd, 0o700)
            bind_private(self.sock, dir_fd)
            bound = os.stat("sock", dir_fd=dir_fd, follow_symlinks=False)
        except BaseException:
            self.sock.close()
            raise
        finally:
            os.close(dir_fd)
        return bound.st_dev, bound.st_ino

    def _run(self) -> None:
        poller = select.poll()  # (not select(): the gateway may hold descriptors past 1024)
        poller.register(self.sock.fileno(), select.POLLIN)
        poller.register(self._stop_r, select.POLLIN)
        while True:
            ready = {fd for fd, _ in poller.poll()}
            if self._stop_r in ready:
                return
            if self._drain():
                self.wake()

    def _drain(self) -> bool:
        """Take every datagram already queued (one wake-up for the whole burst); whether
        there was one."""
        got = False
        with contextlib.suppress(OSError):
            while True:
                self.sock.recv(64, socket.MSG_DONTWAIT)
                got = True
        return got

    def close(self) -> None:
        """Stop listening; the socket is removed unless a newer listener replaced it."""
        os.write(self._stop_w, b"x")
        self._thread.join()
        for fd in (self._stop_r, self._stop_w):
            os.close(fd)
        self.sock.close()
        path = self.dir / "sock"
        with contextlib.suppress(OSError):
            st = os.stat(path, follow_symlinks=False)
            if (st.st_dev, st.st_ino) == self._bound:
                path.unlink()
