"""The gateway's start-up as it concerns its state: private files, a sound store, and a
report of the outcome to `caldera up` that does not depend on the disk.

`caldera up` passes the write end of a pipe (`CALDERA_READY_FD`); the daemon writes
`ready` once it serves, or `error: <reason>` when it cannot start. A full disk cannot
swallow that message, as it swallows the log.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from pathlib import Path

from gateway.store.base import StoreError
from gateway.store.sqlite import SqliteStore

__all__ = [
    "FORCE_ENV",
    "READY_ENV",
    "Reporter",
    "StartupError",
    "open_store",
    "secure_home",
]

log = logging.getLogger("caldera.daemon")

READY_ENV = "CALDERA_READY_FD"
FORCE_ENV = "CALDERA_FORCE_DAMAGED_STORE"  # "1": serve a store that fails its check
BUSY_ENV = "CALDERA_STORE_BUSY_TIMEOUT_MS"  # how long a write waits for a lock held elsewhere

# $CALDERA_HOME is 0711: other users may traverse it to reach gateway.sock (that is how
# they submit; the socket's peer credentials decide what each may do) but cannot list it
# or read anything in it. What they may read of a job goes through the API.
HOME_MODE = 0o711
_PRIVATE_FILES = ("gateway.log",)  # besides the database files (SqliteStore fixes those)
_PRIVATE_DIRS = ("keys",)


class StartupError(Exception):
    """The gateway must not serve; the message says why and what to do."""


def _tighten(path: Path, mode: int) -> None:
    """Give `path` at most `mode` (never through a symbolic link), and log a change."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise StartupError(f"{path} is a symbolic link; the gateway's state must not be")
    now = stat.S_IMODE(st.st_mode)
    if now & ~mode:
        path.chmod(now & mode)
        log.warning("%s was mode %o; now %o (private to root)", path, now, now & mode)


def secure_home(home: Path) -> None:
    """Make the gateway's home private (see HOME_MODE) and fix an older install's modes."""
    home.mkdir(parents=True, exist_ok=True)
    now = stat.S_IMODE(home.stat().st_mode)
    if now != HOME_MODE:
        home.chmod(HOME_MODE)
        log.warning("%s was mode %o; now %o (others may only reach the socket)", home, now, 0o711)
    for name in _PRIVATE_FILES:
        _tighten(home / name, 0o600)
    for name in _PRIVATE_DIRS:
        _tighten(home / name, 0o700)


def open_store(path: Path) -> SqliteStore:
    """The store, checked page by page (`PRAGMA quick_check`); StartupError when it cannot
    be opened or is damaged, unless FORCE_ENV says to serve it anyway."""
    busy_ms = int(os.environ.get(BUSY_ENV) or 10_000)
    try:
        store = SqliteStore(path, busy_timeout_ms=busy_ms)
    except StoreError as exc:
        raise StartupError(
            f"cannot open the job store {path}: {exc.cause}. If it is damaged, restore it "
            "from a backup or move it aside (the gateway then starts with no jobs)"
        ) from exc
    started = time.monotonic()
    problems = store.check_integrity(quick=True)
    took = time.monotonic() - started
    if not problems:
        log.info("job store %s: quick_check ok in %.3f s", path, took)
        return store
    said = "; ".join(problems[:5])
    if os.environ.get(FORCE_ENV) == "1":
        log.error("job store %s is damaged (%s); served anyway as asked", path, said)
        return store
    store.close()
    raise StartupError(
        f"the job store {path} is damaged (PRAGMA quick_check: {said}); refusing to serve it. "
        "Restore it from a backup (or move it aside to start with no jobs), or serve it as it "
        "is with: caldera up --force-damaged-store"
    )


class Reporter:
    """The pipe to `caldera up` (READY_ENV), taken at once so that no job process started
    later inherits it (a held write end would hide the daemon's death from `caldera up`)."""

    def __init__(self) -> None:
        text = os.environ.pop(READY_ENV, "")
        self._fd: int | None = int(text) if text.isdigit() else None
        if self._fd is not None:
            try:
                os.set_inheritable(self._fd, False)
            except OSError:
                self._fd = None

    def __call__(self, message: str) -> None:
        """Say how the start went ("ready" or "error: ..."), once."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.write(fd, message.encode("utf-8", "replace")[:4000] + b"\n")
        except OSError:  # `caldera up` gave up waiting: nothing to tell
            pass
        finally:
            os.close(fd)
