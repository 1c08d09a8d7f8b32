"""PID 1 of a job's rank 0 pod: the batch script's signals as slurmstepd delivers them.

A container's first process is PID 1 of the pod's PID namespace. The kernel delivers to it
only the signals it handles, and the kubelet stops a pod (scancel, the time limit, a
preemption: the pod's deletion) by sending SIGTERM to that process alone, SIGKILL to all
once the grace is over. Slurm sends SIGCONT and SIGTERM to every process of the job
(slurmstepd signals each step's whole cgroup), SIGKILL after KillWait. With the batch
script as PID 1, a script without a trap ignored the SIGTERM until the SIGKILL, and the
tasks of its srun steps never saw it.

This init runs the command (the batch script, files opened by files.batch_command) as its
child in a session of its own, as slurmstepd starts it, and:
- on SIGTERM sends SIGCONT then SIGTERM to every other process of the pod: kill(-1) from
  the namespace's init reaches exactly the pod's processes (outside a PID namespace, where
  kill(-1) would reach the whole machine, only the child's process group: tests);
- passes any other signal it is sent (INT, HUP, QUIT, USR1, USR2) to the batch shell alone,
  as `scancel --batch` does;
- reaps every orphan that is reparented to it (an init's duty: zombies would pile up);
- exits with the script's status as a shell reports it (128+N when signal N ended it), the
  container's exit code that lifecycle.py reads. When the script ends by itself, the pod's
  other processes are killed with the namespace, as slurmstepd kills a batch job's
  leftovers; after a SIGTERM it first waits for every process of the pod to end, as the
  tasks of a job's steps get their KillWait to end (the kubelet's SIGKILL ends the wait).

Shipped in the launcher ConfigMap (launch.py) and run by `launcher.py init CMD...` when the
image has python3; standard library only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterable, Sequence

__all__ = ["exit_code", "run", "signal_all"]

_PASSED: tuple[int, ...] = (signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
_PASSED += (signal.SIGUSR1, signal.SIGUSR2)


def exit_code(status: int) -> int:
    """A wait status as the container's exit code (a shell's `$?`)."""
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def signal_all(groups: Iterable[int], signum: int) -> None:
    """SIGCONT (a stopped process must see it) then `signum` to every process of the pod
    when this is its init, else to the process `groups` (never kill(-1) outside a pod)."""
    targets = [(-1, os.kill)] if os.getpid() == 1 else [(g, os.killpg) for g in groups]
    for sig in (signal.SIGCONT, signum):
        for target, send in targets:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                send(target, sig)


def _spawn(argv: Sequence[str]) -> int:
    pid = os.fork()
    if pid == 0:  # the child: its own session, default signal dispositions, then exec
        try:
            os.setsid()
            for sig in (signal.SIGTERM, signal.SIGPIPE, signal.SIGXFSZ, *_PASSED):
                signal.signal(sig, signal.SIG_DFL)  # Python ignores SIGPIPE and SIGXFSZ
            signal.pthread_sigmask(signal.SIG_SETMASK, set())
            os.execvp(argv[0], list(argv))  # noqa: S606 - the batch step, as built
        except OSError as exc:
            os.write(2, f"caldera init: {argv[0]}: {exc.strerror}\n".encode())
            os._exit(127 if isinstance(exc, FileNotFoundError) else 126)
    return pid


def run(argv: Sequence[str]) -> int:
    """Run `argv` as the pod's batch step; its exit code."""
    if not argv:
        sys.stderr.write("usage: launcher.py init COMMAND [ARG...]\n")
        return 2
    # signals wait in the mask until the child exists; sigwait then takes them one by one
    watched = {signal.SIGTERM, signal.SIGCHLD, *_PASSED}
    signal.pthread_sigmask(signal.SIG_BLOCK, watched)
    child = _spawn(argv)
    code: int | None = None
    stopping = False
    while True:
        signum = signal.sigwait(watched)
        if signum == signal.SIGTERM:
            stopping = True
            signal_all([child], signal.SIGTERM)
        elif signum != signal.SIGCHLD and code is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signum)
        while True:  # reap the child and every orphan
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:  # nothing left in the pod (the child was reaped)
                return code if code is not None else 1
            if pid == 0:
                break
            if pid == child:
                code = exit_code(status)
                if not stopping:  # the script's own end: the job ends with it
                    return code


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
