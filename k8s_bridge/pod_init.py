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
- sends `--signal`'s warning before the time limit, when slurmctld would (the `warn` file
  of the job's root ConfigMap, launch.warning_text; the limit counted from this init's
  start, which follows the pod's by the container's set-up): with `B:` to the batch shell
  alone, else to every srun step of the script's session (the launcher's srun passes it to
  its tasks on every node), not to the shell, as slurmstepd signals a job's steps;
- reaps every orphan that is reparented to it (an init's duty: zombies would pile up);
- exits with the script's status as a shell reports it (128+N when signal N ended it), the
  container's exit code that lifecycle.py reads. When the script ends by itself, the pod's
  other processes are killed with the namespace, as slurmstepd kills a batch job's
  leftovers; after a SIGTERM it first waits for every process of the pod to end, as the
  tasks of a job's steps get their KillWait to end (the kubelet's SIGKILL ends the wait).

Shipped in the launcher ConfigMap (launch.py) and run by `launcher.py init CMD...` when the
image has python3; standard library and the shipped containers/step_rules.py only.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from containers.step_rules import warning_time

__all__ = ["WARN_PATH", "WarnSignal", "exit_code", "read_warning", "run", "signal_all", "steps_of"]

WARN_PATH = "/caldera/job/warn"
SRUN_NAME = "srun"  # the launcher's srun: /caldera/launch/bin/srun run by python3

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


@dataclass(frozen=True)
class WarnSignal:
    """`--signal` as launch.warning_text writes it (real seconds)."""

    signal: int
    lead_s: float
    period_s: float
    limit_s: float
    batch_only: bool


def read_warning(path: str = WARN_PATH) -> WarnSignal | None:
    """The job's warning, None when it has none (an empty or missing file). A file this init
    cannot read as one (not Caldera's) is reported on stderr and ignored."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read().strip()
        if not text:
            return None
        data = json.loads(text)
        warning = WarnSignal(
            int(data["signal"]),
            float(data["lead_s"]),
            float(data["period_s"]),
            float(data["limit_s"]),
            data["batch_only"] is True,
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, KeyError) as exc:
        sys.stderr.write(f"caldera init: {path}: no --signal warning: {exc}\n")
        return None
    return warning if 0 < warning.signal < signal.NSIG else None


def steps_of(session: int, proc: str = "/proc") -> list[int]:
    """The srun processes (the job's steps in this pod) of the batch script's session: a
    process whose command is the launcher's srun, run by its interpreter or directly."""
    found = []
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            if os.getsid(pid) != session or pid == session:
                continue
            with open(f"{proc}/{name}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")[:2]
        except OSError:  # ended meanwhile, or not ours to look at
            continue
        if any(os.path.basename(a.decode(errors="replace")) == SRUN_NAME for a in argv):
            found.append(pid)
    return found


def _warn(child: int, warning: WarnSignal) -> None:
    """Send the warning: the batch shell alone (B:), else every step, never the shell."""
    targets = [child] if warning.batch_only else steps_of(child)
    for pid in targets:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, warning.signal)


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


def run(argv: Sequence[str], warn_path: str = WARN_PATH) -> int:
    """Run `argv` as the pod's batch step; its exit code."""
    if not argv:
        sys.stderr.write("usage: launcher.py init COMMAND [ARG...]\n")
        return 2
    warning = read_warning(warn_path)
    # signals wait in the mask until the child exists; sigwait then takes them one by one
    watched = {signal.SIGTERM, signal.SIGCHLD, *_PASSED}
    signal.pthread_sigmask(signal.SIG_BLOCK, watched)
    started = time.time()
    child = _spawn(argv)
    warn_at = None
    if warning is not None:
        deadline = started + warning.limit_s
        warn_at = warning_time(deadline, warning.lead_s, warning.period_s, started)
    code: int | None = None
    stopping = False
    while True:
        if warn_at is None:
            signum = signal.sigwait(watched)
        else:
            info = signal.sigtimedwait(watched, max(warn_at - time.time(), 0.0))
            signum = info.si_signo if info is not None else 0
            if info is None:  # due: once, unless the job is already being stopped
                warn_at = None
                if warning is not None and not stopping:
                    _warn(child, warning)
        if signum == signal.SIGTERM:
            stopping = True
            signal_all([child], signal.SIGTERM)
        elif signum not in (0, signal.SIGCHLD) and code is None:
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
