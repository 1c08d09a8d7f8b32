"""Process plumbing for the supervisor and srun: privileges, signals, process trees."""

from __future__ import annotations

import contextlib
import ctypes
import os
import pwd
import resource
import signal
import socket
from collections.abc import Callable, Iterator, Sequence

import psutil

__all__ = [
    "apply_rlimits",
    "as_user",
    "bind_private",
    "child_reset",
    "descendants",
    "drop_privileges",
    "fork_masked",
    "login_environment",
    "own_hostname",
    "pids_rss_kb",
    "reap_exited",
    "set_child_subreaper",
    "signal_processes",
    "tree_rss_kb",
]

_PR_SET_CHILD_SUBREAPER = 36
_CLONE_NEWUTS = 0x04000000
# Signals Python changes at start-up; a job must see the defaults.
_PYTHON_IGNORED = (signal.SIGPIPE, signal.SIGXFSZ)


def set_child_subreaper() -> bool:
    """Make orphaned descendants re-parent to this process (Linux), so none escapes."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def own_hostname(node: str) -> None:
    """Name this process's host after its virtual node, as a Slurm node answers `hostname`
    with its own name: a UTS namespace of its own (inherited by what it starts), when it
    may make one (root, before dropping privileges) and `node` is not this machine's name.
    Otherwise nothing changes."""
    machine = socket.gethostname()
    if os.geteuid() != 0 or not node or node in (machine, machine.split(".")[0]):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if int(libc.unshare(_CLONE_NEWUTS)) != 0:
            return
        socket.sethostname(node)
    except (OSError, AttributeError):
        return


def drop_privileges(uid: int, gid: int, groups: Sequence[int]) -> None:
    """Become uid:gid with these supplementary groups (a no-op when already them)."""
    if os.geteuid() == 0 and uid != 0:
        os.setgroups(list(groups))
        os.setgid(gid)
        os.setuid(uid)
    elif os.geteuid() == 0:
        os.setgroups(list(groups))
        os.setgid(gid)
    elif os.geteuid() != uid:
        raise PermissionError(f"cannot become uid {uid} as uid {os.geteuid()}")


@contextlib.contextmanager
def as_user(uid: int, gid: int, groups: Sequence[int]) -> Iterator[None]:
    """Temporarily take the user's effective ids (files opened here are checked as theirs)."""
    if os.geteuid() != 0 or uid == 0:
        yield
        return
    saved_groups = os.getgroups()
    os.setgroups(list(groups))
    os.setegid(gid)
    os.seteuid(uid)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)
        os.setgroups(saved_groups)


def fork_masked() -> int:
    """os.fork() with every signal blocked across it, restored in the parent: a signal
    sent to the child before its `child_reset` (a job TERMed as it starts) stays pending
    and meets the default action there, instead of the parent's Python handler, which
    would take it and leave the exec'd script unsignalled (KillWait's SIGKILL, not TERM)."""
    saved = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    pid = os.fork()
    if pid != 0:
        signal.pthread_sigmask(signal.SIG_SETMASK, saved)
    return pid


def child_reset() -> None:
    """In a forked child before exec: default signal dispositions, nothing blocked."""
    for sig in range(1, signal.NSIG):
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        with contextlib.suppress(OSError, ValueError, RuntimeError):
            signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    for sig in _PYTHON_IGNORED:
        signal.signal(sig, signal.SIG_DFL)


def descendants(pid: int | None = None) -> list[psutil.Process]:
    """Every live descendant of `pid` (default: this process)."""
    try:
        return psutil.Process(pid or os.getpid()).children(recursive=True)
    except psutil.Error:
        return []


def tree_rss_kb(pid: int | None = None) -> int:
    """Resident memory of the descendants of `pid`, in KiB (as jobacct_gather sums it)."""
    return _rss_kb(descendants(pid))


def pids_rss_kb(pids: Sequence[int]) -> int:
    """Resident memory of these processes, in KiB (those already gone count nothing)."""
    procs: list[psutil.Process] = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            procs.append(psutil.Process(pid))
    return _rss_kb(procs)


def _rss_kb(procs: Sequence[psutil.Process]) -> int:
    total = 0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            total += proc.memory_info().rss
    return total // 1024


def signal_processes(procs: Sequence[psutil.Process], sig: int) -> None:
    """Send `sig` to each process, ignoring those already gone."""
    for proc in procs:
        with contextlib.suppress(psutil.Error, ProcessLookupError, PermissionError):
            proc.send_signal(sig)


def login_environment(user: str) -> dict[str, str]:
    """What `su - user` gives without reading profiles: HOME, USER, LOGNAME, SHELL, PATH, MAIL."""
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return {}
    path = "/usr/local/bin:/usr/bin:/bin"
    if entry.pw_uid == 0:
        path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    return {
        "HOME": entry.pw_dir,
        "USER": user,
        "LOGNAME": user,
        "SHELL": entry.pw_shell or "/bin/sh",
        "PATH": path,
        "MAIL": f"/var/mail/{user}",
    }


_RLIMITS = {
    "CPU": resource.RLIMIT_CPU,
    "FSIZE": resource.RLIMIT_FSIZE,
    "DATA": resource.RLIMIT_DATA,
    "STACK": resource.RLIMIT_STACK,
    "CORE": resource.RLIMIT_CORE,
    "RSS": resource.RLIMIT_RSS,
    "NPROC": resource.RLIMIT_NPROC,
    "NOFILE": resource.RLIMIT_NOFILE,
    "MEMLOCK": resource.RLIMIT_MEMLOCK,
    "AS": resource.RLIMIT_AS,
}
_RLIM_INFINITY_TEXT = (1 << 64) - 1  # how sbatch prints RLIM_INFINITY


def apply_rlimits(limits: Sequence[tuple[str, int]]) -> list[str]:
    """Set these soft limits (the submitter's, as slurmstepd's set_user_limits does), keeping
    the hard ones; a limit above the hard limit stays as it is, as Slurm leaves it. Returns
    the names that could not be set."""
    refused: list[str] = []
    for name, value in limits:
        which = _RLIMITS.get(name)
        if which is None:
            continue
        soft = resource.RLIM_INFINITY if value >= _RLIM_INFINITY_TEXT else value
        _, hard = resource.getrlimit(which)
        try:
            resource.setrlimit(which, (soft, hard))
        except (ValueError, OSError):
            refused.append(name)
    return refused


def reap_exited() -> None:
    """Collect every child that has exited (none waits: a subreaper adopts many)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def bind_private(
    sock: socket.socket, dir_fd: int, before_use: Callable[[], None] | None = None
) -> None:
    """Bind `sock` as `sock` (0600) in the directory `dir_fd` (the caller checked it is a
    0700 directory of this uid), through the descriptor: nothing followed, no limit of a
    socket path's length. It is bound under a temporary name and renamed over `sock` once
    ready (`before_use`, e.g. listen), so a live socket is replaced only by a working one."""
    tmp = f".sock.{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp, dir_fd=dir_fd)
    old = os.umask(0o177)
    try:
        sock.bind(f"/proc/self/fd/{dir_fd}/{tmp}")
    finally:
        os.umask(old)
    os.chmod(tmp, 0o600, dir_fd=dir_fd)
    if before_use is not None:
        before_use()
    os.replace(tmp, "sock", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
