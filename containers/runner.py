"""How a supervisor runs a batch script: as a process (like slurmstepd) or in a container."""

from __future__ import annotations

import contextlib
import errno
import os
import select
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import psutil

from containers.proc import (
    apply_rlimits,
    as_user,
    child_reset,
    descendants,
    drop_privileges,
    fork_masked,
    own_hostname,
    pids_rss_kb,
    reap_exited,
    signal_processes,
    tree_rss_kb,
)
from containers.proctrack import ATTEMPT_VAR, ProcessTracker, end_attempt
from containers.spool import JobPlan
from gateway.model.job import wait_status

__all__ = [
    "BatchRunner",
    "IOSetupError",
    "OpenedIO",
    "ProcessRunner",
    "StartError",
    "Tracking",
    "open_job_io",
]


class StartError(Exception):
    """The batch script could not be started (files, privileges, image...)."""


class IOSetupError(StartError):
    """The job's stdin/stdout/stderr could not be opened: slurmstepd's failed IO setup, which
    Slurm records apart from the other start failures (see containers.supervisor)."""


class OpenedIO:
    """The job's stdin/stdout/stderr, opened with the user's permissions."""

    def __init__(self, stdin: int, stdout: int, stderr: int) -> None:
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr

    def close(self) -> None:
        for fd in {self.stdin, self.stdout, self.stderr}:
            with contextlib.suppress(OSError):
                os.close(fd)


def open_job_io(plan: JobPlan) -> OpenedIO:
    """Open the files as slurmstepd does: as the user, create or append/truncate, 0666 & ~umask."""
    mode = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK
    mode |= os.O_APPEND if plan.open_append else os.O_TRUNC
    old_umask = os.umask(plan.umask)
    opened: list[int] = []
    try:
        # As the user (effective ids), so their permissions decide what may be opened and
        # symlinks lead only where the user could go; never blocking (a FIFO without a
        # peer would hang root's supervisor: it fails or reads EOF instead).
        with as_user(plan.uid, plan.gid, plan.groups):
            flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK
            stdin = _blocking(os.open(plan.stdin, flags))
            opened.append(stdin)
            stdout = _blocking(os.open(plan.stdout, mode, 0o666))
            opened.append(stdout)
            stderr = stdout
            if plan.stderr is not None and plan.stderr != plan.stdout:
                stderr = _blocking(os.open(plan.stderr, mode, 0o666))
    except OSError as exc:
        for fd in opened:
            os.close(fd)
        raise IOSetupError(
            f"Could not open {_which(plan, exc)} file {exc.filename}: {exc.strerror}"
        ) from exc
    finally:
        os.umask(old_umask)
    return OpenedIO(stdin, stdout, stderr)


def _which(plan: JobPlan, exc: OSError) -> str:
    """Which of the job's files `exc` is about, in slurmstepd's words."""
    if exc.filename == plan.stdin:
        return "stdin"
    return "stdout" if exc.filename == plan.stdout else "stderr"


def _blocking(fd: int) -> int:
    """The job gets ordinary blocking descriptors."""
    os.set_blocking(fd, True)
    return fd


class BatchRunner(Protocol):
    """One running batch script."""

    def start(self) -> None: ...

    def poll(self) -> int | None:
        """The wait status once the batch script has ended, else None."""
        ...

    def wait(self, timeout: float) -> None:
        """Return after `timeout` seconds, or as soon as the batch script has ended."""
        ...

    def signal_batch(self, sig: int) -> None: ...

    def signal_all(self, sig: int) -> None: ...

    def rss_kb(self) -> int: ...

    def out_of_memory(self) -> bool:
        """Whether the runtime itself killed the job for memory (container cgroup)."""
        ...

    def cleanup(self) -> None:
        """Kill whatever the batch script left behind and release resources."""
        ...


@dataclass(frozen=True, slots=True)
class Tracking:
    """The attempt's process group, and the file whose presence means the attempt was ended
    by the backend (a script that joins after that must not run)."""

    tracker: ProcessTracker
    attempt: str
    ended_file: Path


def _group_of(pid: int) -> int | None:
    """The process group of `pid` (None once it is gone)."""
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


class ProcessRunner:
    """The script as a process in its own session, as the job's user (slurmstepd's way),
    inside the attempt's process group (cgroup) when `tracking` is given."""

    def __init__(self, plan: JobPlan, io: OpenedIO, tracking: Tracking | None = None) -> None:
        self.plan = plan
        self.io = io
        self.tracking = tracking
        self.pid = 0
        self._status: int | None = None
        self._pidfd: int | None = None

    def start(self) -> None:
        plan = self.plan
        env = dict(plan.env)
        argv = [plan.script, *plan.args]
        tracking = self.tracking
        if tracking is not None:
            env[ATTEMPT_VAR] = f"{tracking.tracker.namespace}/{tracking.attempt}"
        pid = fork_masked()
        if pid == 0:  # child: never returns
            if tracking is not None:
                _join(tracking)
            try:
                os.setsid()
                child_reset()
                os.dup2(self.io.stdin, 0)
                os.dup2(self.io.stdout, 1)
                os.dup2(self.io.stderr, 2)
                os.umask(plan.umask)
                apply_rlimits(plan.rlimits)  # not the daemon's raised limits: the user's
                own_hostname(plan.node)  # `hostname` says the batch host, as on Slurm
                drop_privileges(plan.uid, plan.gid, plan.groups)
                try:
                    os.chdir(plan.workdir)
                except OSError as exc:
                    os.write(
                        2,
                        (
                            f"slurmstepd: error: couldn't chdir to `{plan.workdir}': "
                            f"{exc.strerror}: going to /tmp instead\n"
                        ).encode(),
                    )
                    os.chdir("/tmp")
                env["SLURM_TASK_PID"] = str(os.getpid())
                try:
                    os.execve(plan.script, argv, env)  # noqa: S606 - the job's own script
                except OSError as exc:
                    _exec_failed(plan, exc)
            except BaseException as exc:  # noqa: BLE001 - report anything, then leave
                with contextlib.suppress(BaseException):
                    os.write(2, f"slurmstepd: error: execve(): {plan.script}: {exc}\n".encode())
                os._exit(127)
        self.pid = pid
        with contextlib.suppress(OSError):  # Linux 5.3+: readable once the process ended
            self._pidfd = os.pidfd_open(pid)

    def wait(self, timeout: float) -> None:
        if self._pidfd is None or self._status is not None:
            time.sleep(timeout)
            return
        with contextlib.suppress(OSError):
            select.select([self._pidfd], [], [], timeout)

    def poll(self) -> int | None:
        # The supervisor is a subreaper: reap orphans too, keep the batch shell's status.
        while self._status is None:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if pid == self.pid:
                self._status = _to_slurm_status(status)
        return self._status

    def signal_batch(self, sig: int) -> None:
        if self.pid and self._status is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def signal_all(self, sig: int) -> None:
        """`sig` to every process of the job: the script's process group, the attempt's
        group (what escaped the session too) and the supervisor's descendants. These
        overlap, and a catchable signal goes once to each process, as slurmstepd sends
        it once to each process of the step's cgroup: a script's `trap ... TERM` ran
        twice at a scancel where Slurm runs it once."""
        tracking = self.tracking
        if sig == signal.SIGKILL:  # no handler runs: kill everything every way it is found
            if tracking is not None:
                tracking.tracker.kill_all(tracking.attempt)  # forks racing the kill too
            self._killpg(sig)
            signal_processes(descendants(), sig)
            return
        others = {p.pid for p in descendants()}
        if tracking is not None:
            others.update(tracking.tracker.pids(tracking.attempt))
        if self._killpg(sig):
            others = {pid for pid in others if _group_of(pid) != self.pid}
        for pid in sorted(others):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def _killpg(self, sig: int) -> bool:
        """`sig` to the script's process group (never pid 0: the supervisor's own); whether
        it was sent."""
        if not self.pid:
            return False
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def rss_kb(self) -> int:
        tracking = self.tracking
        if tracking is None or not tracking.tracker.lists_cheaply:
            return tree_rss_kb()
        return pids_rss_kb(tracking.tracker.pids(tracking.attempt))

    def out_of_memory(self) -> bool:
        return False

    def _left(self) -> list[psutil.Process]:
        """The job's processes still alive: its group's (read from the cgroup itself, not
        from every process of the machine) or, without one, the supervisor's descendants."""
        tracking = self.tracking
        if tracking is None or not tracking.tracker.lists_cheaply:
            return descendants()
        left: list[psutil.Process] = []
        for pid in tracking.tracker.pids(tracking.attempt):
            with contextlib.suppress(psutil.Error):
                left.append(psutil.Process(pid))
        return left

    def cleanup(self) -> None:
        deadline = time.monotonic() + 5.0
        tracking = self.tracking
        gone = tracking is None
        while time.monotonic() < deadline:
            if tracking is not None and not gone:
                _, gone = end_attempt(tracking.tracker, tracking.attempt, 0.0)
            left = self._left()
            if not left and gone:
                break
            signal_processes(left, signal.SIGKILL)
            reap_exited()
            time.sleep(0.02)
        reap_exited()
        if tracking is not None and tracking.tracker.ended(tracking.attempt):
            tracking.tracker.remove(tracking.attempt)
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        self.io.close()


def _join(tracking: Tracking) -> None:
    """In the forked child, still root: join the attempt's group before anything else, then
    make sure the attempt was not ended meanwhile (ended first, joined after: never run)."""
    try:
        tracking.tracker.add(tracking.attempt, os.getpid())
    except BaseException as exc:  # noqa: BLE001 - never run untracked
        with contextlib.suppress(BaseException):
            os.write(2, f"slurmstepd: error: cannot join the job's cgroup: {exc}\n".encode())
        os._exit(127)
    if tracking.ended_file.exists():
        os.kill(os.getpid(), signal.SIGKILL)


def _exec_failed(plan: JobPlan, exc: OSError) -> None:
    """In the forked child: the script could not be executed. slurmstepd's words and exit
    status (22.05 task.c `_exec_task`): the errno; a script whose `#!` interpreter is
    missing is named by that line (`#!/bin/zsh` on the test cluster, which has no zsh:
    `execve(): bad interpreter(/bin/zsh): No such file or directory`, FAILED 2:0)."""
    code = exc.errno or 1
    what = plan.script
    with contextlib.suppress(OSError):
        if code == errno.ENOENT:
            with open(plan.script, "rb") as fh:
                head = fh.read(255)
            if len(head) >= 3 and head.startswith(b"#!"):
                interpreter = head[2:].split(b"\n")[0].decode(errors="replace")
                what = f"bad interpreter({interpreter})"
    with contextlib.suppress(BaseException):
        line = f"slurmstepd-{plan.node}: error: execve(): {what}: {os.strerror(code)}\n"
        os.write(2, line.encode())
    os._exit(code)


def _to_slurm_status(status: int) -> int:
    if os.WIFSIGNALED(status):
        return wait_status(signal=os.WTERMSIG(status))
    return wait_status(exit_code=os.WEXITSTATUS(status))
