"""Process tracking for the local runner, as Slurm's proctrack: every process of one job
attempt, however it was started (srun tasks, double-forked daemons, `setsid`), is found and
ended, and its end is confirmed before the next attempt of the job may start.

One tracker is chosen when the backend starts (`select_tracker`):

- cgroup v2 (the cgroup2 mount from /proc/self/mounts): one cgroup per attempt,
  `<mount>/caldera/<namespace>/job_<id>.<run>`; `cgroup.kill` when the kernel has it, else
  freeze, SIGKILL every process, thaw;
- cgroup v1 freezer: the same tree under the freezer hierarchy; freeze, SIGKILL every task,
  thaw (proctrack/cgroup's way);
- sessions (not root, or no writable cgroup): the attempt's processes carry a marker in
  their environment and live in the batch script's session under the supervisor, a child
  subreaper; weaker (a process that execs with a clean environment after leaving the
  session escapes), as proctrack/pgid is.

A process joins its attempt's group in the forked child before exec (`add`), so nothing it
starts can be outside. Which tracker and group an attempt uses is recorded in the spool
(`record`/`from_record`), so the supervisor and a restarted gateway act on the same group.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import signal
import time
from pathlib import Path
from typing import Protocol

import psutil

__all__ = [
    "ATTEMPT_VAR",
    "ENDED_FILE",
    "RECORD_FILE",
    "TRACKER_NAMES",
    "Cgroup2Tracker",
    "FreezerTracker",
    "ProcessTracker",
    "SessionTracker",
    "attempt_name",
    "end_attempt",
    "from_record",
    "namespace_for",
    "select_tracker",
]

ATTEMPT_VAR = "CALDERA_ATTEMPT"  # in every job process's environment: <namespace>/<attempt>
RECORD_FILE = "proctrack.json"  # in an attempt's spool directory: record() (root, 0600)
ENDED_FILE = "ended"  # in an attempt's spool directory: the backend ended this attempt
TRACKER_NAMES = ("auto", "cgroup2", "freezer", "session")  # what select_tracker accepts
_FREEZE_WAIT_S = 1.0


def attempt_name(job_id: int, run: int) -> str:
    """The group name of one run of a job."""
    return f"job_{job_id}.{run}"


def namespace_for(cluster: str, spool: Path) -> str:
    """One backend's part of the tree: its cluster name and a hash of its spool, so two
    gateways on one machine never touch each other's jobs."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", cluster)[:32] or "local"
    return f"{name}-{hashlib.sha256(str(spool).encode()).hexdigest()[:12]}"


class ProcessTracker(Protocol):
    """The processes of job attempts, one group each."""

    kind: str
    namespace: str
    lists_cheaply: bool  # pids() reads the group itself, not every process of the machine

    def create(self, attempt: str) -> None:
        """Make the attempt's group (idempotent)."""
        ...

    def add(self, attempt: str, pid: int) -> None:
        """Put `pid` in the group (in the forked child, before exec: its descendants follow)."""
        ...

    def pids(self, attempt: str) -> list[int]:
        """Every live process of the attempt."""
        ...

    def signal(self, attempt: str, sig: int) -> int:
        """Send `sig` to every process of the attempt; how many were signalled."""
        ...

    def kill_all(self, attempt: str) -> int:
        """SIGKILL every process of the attempt, forks racing the kill included."""
        ...

    def ended(self, attempt: str) -> bool:
        """Confirmed: no process of the attempt is left."""
        ...

    def remove(self, attempt: str) -> None:
        """Drop the (empty) group; a no-op while processes remain."""
        ...

    def record(self, attempt: str) -> dict[str, str]:
        """What the spool keeps so another process can act on this group (`from_record`)."""
        ...


def _kill(pids: list[int], sig: int) -> int:
    sent = 0
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
            sent += 1
    return sent


class _Cgroup:
    """What both cgroup versions share: a directory per attempt, `cgroup.procs` to join."""

    kind = "cgroup"
    lists_cheaply = True

    def __init__(self, mount: Path, namespace: str) -> None:
        self.mount = mount
        self.namespace = namespace
        self.root = mount / "caldera" / namespace

    def dir(self, attempt: str) -> Path:
        return self.root / attempt

    def create(self, attempt: str) -> None:
        for _ in range(3):  # another process may remove the empty namespace meanwhile
            try:
                self.dir(attempt).mkdir(parents=True, exist_ok=True)
                return
            except FileNotFoundError:
                continue
        self.dir(attempt).mkdir(parents=True, exist_ok=True)

    def add(self, attempt: str, pid: int) -> None:
        (self.dir(attempt) / "cgroup.procs").write_text(f"{pid}\n")

    def pids(self, attempt: str) -> list[int]:
        found: list[int] = []
        top = self.dir(attempt)
        with contextlib.suppress(OSError):
            for here, _dirs, _files in os.walk(top):
                with contextlib.suppress(OSError):
                    text = (Path(here) / "cgroup.procs").read_text()
                    found.extend(int(p) for p in text.split())
        return found

    def signal(self, attempt: str, sig: int) -> int:
        return _kill(self.pids(attempt), sig)

    def ended(self, attempt: str) -> bool:
        return not self.pids(attempt)

    def remove(self, attempt: str) -> None:
        top = self.dir(attempt)
        with contextlib.suppress(OSError):
            for here, _dirs, _files in os.walk(top, topdown=False):
                with contextlib.suppress(OSError):
                    os.rmdir(here)
        with contextlib.suppress(OSError):
            os.rmdir(self.root)  # the backend's last group: leave no empty namespace behind

    def record(self, attempt: str) -> dict[str, str]:
        return {
            "kind": self.kind,
            "mount": str(self.mount),
            "namespace": self.namespace,
            "attempt": attempt,
        }

    def _freeze_kill_thaw(self, attempt: str) -> int:
        top = self.dir(attempt)
        if not top.is_dir():
            return 0
        self._freeze(top, True)
        try:
            return _kill(self.pids(attempt), signal.SIGKILL)
        finally:
            self._freeze(top, False)

    def _freeze(self, top: Path, frozen: bool) -> None:
        raise NotImplementedError


class Cgroup2Tracker(_Cgroup):
    """cgroup v2: `cgroup.kill` (Linux 5.14), else `cgroup.freeze` around the kill."""

    kind = "cgroup2"

    def kill_all(self, attempt: str) -> int:
        top = self.dir(attempt)
        count = len(self.pids(attempt))
        if (top / "cgroup.kill").exists():
            with contextlib.suppress(OSError):
                (top / "cgroup.kill").write_text("1\n")
            return count
        return self._freeze_kill_thaw(attempt)

    def ended(self, attempt: str) -> bool:
        try:
            events = (self.dir(attempt) / "cgroup.events").read_text()
        except OSError:
            return not self.pids(attempt)
        return "populated 0" in events

    def _freeze(self, top: Path, frozen: bool) -> None:
        with contextlib.suppress(OSError):
            (top / "cgroup.freeze").write_text("1\n" if frozen else "0\n")
        deadline = time.monotonic() + _FREEZE_WAIT_S
        while frozen and time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                if "frozen 1" in (top / "cgroup.events").read_text():
                    return
            time.sleep(0.005)


class FreezerTracker(_Cgroup):
    """cgroup v1 freezer hierarchy: FROZEN, SIGKILL every task, THAWED (proctrack/cgroup)."""

    kind = "freezer"

    def kill_all(self, attempt: str) -> int:
        return self._freeze_kill_thaw(attempt)

    def _freeze(self, top: Path, frozen: bool) -> None:
        state = top / "freezer.state"
        with contextlib.suppress(OSError):
            state.write_text("FROZEN\n" if frozen else "THAWED\n")
        deadline = time.monotonic() + _FREEZE_WAIT_S
        while frozen and time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                if state.read_text().strip() == "FROZEN":
                    return
            time.sleep(0.005)


class SessionTracker:
    """No cgroup: the attempt's processes are those whose environment carries its marker
    (set by the runner before exec); stopped first, then killed, so forks cannot outrun it."""

    kind = "session"
    lists_cheaply = False

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace

    def marker(self, attempt: str) -> str:
        return f"{self.namespace}/{attempt}"

    def create(self, attempt: str) -> None:
        return None

    def add(self, attempt: str, pid: int) -> None:
        return None  # the runner puts ATTEMPT_VAR in the environment it execs with

    def pids(self, attempt: str) -> list[int]:
        want = self.marker(attempt)
        me = os.getpid()
        found: list[int] = []
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.Error, OSError):
                if proc.pid != me and proc.environ().get(ATTEMPT_VAR) == want:
                    found.append(proc.pid)
        return found

    def signal(self, attempt: str, sig: int) -> int:
        return _kill(self.pids(attempt), sig)

    def kill_all(self, attempt: str) -> int:
        stopped: set[int] = set()
        while True:  # stop until no new process appears, then kill them all
            new = [p for p in self.pids(attempt) if p not in stopped]
            if not new:
                break
            _kill(new, signal.SIGSTOP)
            stopped.update(new)
        return _kill(sorted(stopped), signal.SIGKILL)

    def ended(self, attempt: str) -> bool:
        return not self.pids(attempt)  # a zombie's environment cannot be read: not counted

    def remove(self, attempt: str) -> None:
        return None

    def record(self, attempt: str) -> dict[str, str]:
        return {"kind": self.kind, "namespace": self.namespace, "attempt": attempt}


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, file system type, options) from /proc/self/mounts."""
    out: list[tuple[str, str, set[str]]] = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) >= 4:
                point = parts[1].replace("\\040", " ")
                out.append((point, parts[2], set(parts[3].split(","))))
    return out


def _usable(tracker: _Cgroup, files: tuple[str, ...]) -> bool:
    """Whether groups can be made here (`<mount>/caldera`, kept; a backend's namespace is
    made with its first group and removed with its last) and have these files."""
    top = tracker.root.parent
    try:
        top.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return all((top / f).exists() for f in ("cgroup.procs", *files))


def select_tracker(namespace: str, prefer: str = "auto") -> ProcessTracker:
    """The best tracker this machine offers (`prefer`: auto, cgroup2, freezer or session):
    cgroup v2 when a writable cgroup2 mount with cgroup.kill or cgroup.freeze exists, else
    the v1 freezer, else sessions (also whenever not root). ValueError for another name,
    OSError when the one named is not available here."""
    if prefer not in TRACKER_NAMES:
        raise ValueError(
            f"unknown process tracking {prefer!r} (one of: {', '.join(TRACKER_NAMES)})"
        )
    if prefer == "session" or os.geteuid() != 0:
        return SessionTracker(namespace)
    mounts = _mounts()
    if prefer in ("auto", "cgroup2"):
        v2 = sorted(
            (p for p, fs, _ in mounts if fs == "cgroup2"), key=lambda p: p != "/sys/fs/cgroup"
        )
        for point in v2:
            tracker2 = Cgroup2Tracker(Path(point), namespace)
            if _usable(tracker2, ("cgroup.freeze",)):  # cgroup.kill (5.14) came after it
                return tracker2
    if prefer in ("auto", "freezer"):
        for point, fs, opts in mounts:
            if fs == "cgroup" and "freezer" in opts:
                tracker1 = FreezerTracker(Path(point), namespace)
                if _usable(tracker1, ("freezer.state",)):
                    return tracker1
    if prefer != "auto":
        raise OSError(f"process tracking {prefer!r} is not available on this machine")
    return SessionTracker(namespace)


def from_record(data: object) -> tuple[ProcessTracker, str] | None:
    """The tracker and attempt a spool record names (None: no valid record)."""
    if not isinstance(data, dict):
        return None
    kind, namespace, mount = data.get("kind"), data.get("namespace"), data.get("mount")
    attempt = data.get("attempt")
    if not isinstance(namespace, str) or not namespace or not isinstance(attempt, str):
        return None
    if "/" in attempt or attempt in ("", ".", ".."):
        return None
    tracker: ProcessTracker
    if kind == SessionTracker.kind:
        tracker = SessionTracker(namespace)
    elif not isinstance(mount, str) or not mount:
        return None
    elif kind == Cgroup2Tracker.kind:
        tracker = Cgroup2Tracker(Path(mount), namespace)
    elif kind == FreezerTracker.kind:
        tracker = FreezerTracker(Path(mount), namespace)
    else:
        return None
    return tracker, attempt


def end_attempt(tracker: ProcessTracker, attempt: str, timeout: float) -> tuple[int, bool]:
    """Kill every process of the attempt until none is left or `timeout` passes:
    (how many distinct processes were killed, whether the end is confirmed)."""
    deadline = time.monotonic() + timeout
    killed: set[int] = set()
    while True:
        found = tracker.pids(attempt)
        if not found and tracker.ended(attempt):
            return len(killed), True
        killed.update(found)
        tracker.kill_all(attempt)
        if time.monotonic() >= deadline:
            return len(killed), tracker.ended(attempt)
        time.sleep(0.02)
