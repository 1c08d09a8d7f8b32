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
- on that SIGTERM first writes slurmstepd's `*** JOB ... CANCELLED AT ... ***` line (`DUE
  TO TIME LIMIT` at the limit) into the script's stderr (say_ending);
- ends the job at its time limit as slurmctld and slurmstepd do (the `init` file of the
  job's root ConfigMap, launch.init_text; counted from this init's start): the `DUE TO
  TIME LIMIT` line, SIGCONT and SIGTERM to every process, SIGKILL after KillWait, and
  `TIME_LIMIT_RECORD` in the container's termination message, which lifecycle.py reads
  as TIMEOUT. The init enforces it, not the pod's activeDeadlineSeconds, because
  `scontrol update TimeLimit=` may raise it and a pod's deadline can only be lowered: the
  backend runs `launcher.py limit SECONDS` in the container (pod_signal.limit_main),
  which writes the new limit to `limit_path()` and sends `LIMIT_SIGNAL` to this init. The
  job's user can write that file too: the gateway still ends the job at the limit it
  knows (gang.py's backstop), so nothing is gained by it;
- sends `--signal`'s warning before the time limit, when slurmctld would: with `B:` to
  the batch shell alone, else to every srun step of the script's session (the launcher's
  srun passes it to its tasks on every node), not to the shell, as slurmstepd signals a
  job's steps;
- reaps every orphan that is reparented to it (an init's duty: zombies would pile up);
- exits with the script's status as a shell reports it (128+N when signal N ended it), the
  container's exit code that lifecycle.py reads. When the script ends by itself, the pod's
  other processes are killed with the namespace, as slurmstepd kills a batch job's
  leftovers; after a SIGTERM it first waits for every process of the pod to end, as the
  tasks of a job's steps get their KillWait to end (the kubelet's SIGKILL ends the wait).

Shipped in the launcher ConfigMap (launch.py) and run by `launcher.py init CMD...` when the
image has python3; standard library and the shipped modules only.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from containers.step_rules import JOB_ENDING, let_waiting_leave, warning_time
from k8s_bridge.pod_wire import STEP_LOG, TIME_LIMIT_RECORD

__all__ = [
    "BOOK",
    "LIMIT_SIGNAL",
    "SETTINGS_PATH",
    "Clock",
    "Settings",
    "WarnSignal",
    "append_message",
    "exit_code",
    "limit_path",
    "limit_reached",
    "mark_ending",
    "read_limit",
    "read_settings",
    "record_time_limit",
    "run",
    "running_steps",
    "say_ending",
    "signal_all",
    "step_dir",
    "steps_of",
]

SETTINGS_PATH = "/caldera/job/init"
BOOK = "book"  # under step_dir(): the sruns' step book (containers/step_book.py)
SRUN_NAME = "srun"  # the launcher's srun: /caldera/launch/bin/srun run by python3
LIMIT_DIR = "/dev/shm"  # the pod's shm emptyDir (render.py): a new time limit's file
LIMIT_SIGNAL = signal.SIGRTMIN + 1  # "read the limit file again" (queued, never lost)

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
    """`--signal` as launch.init_text writes it (real seconds)."""

    signal: int
    lead_s: float
    period_s: float
    batch_only: bool


@dataclass(frozen=True)
class Settings:
    """What the gateway tells rank 0's init (launch.init_text): the time limit in real
    seconds, `--signal`'s warning and KillWait (real seconds)."""

    limit_s: float | None = None
    warning: WarnSignal | None = None
    kill_wait_s: float = 30.0


def read_settings(path: str = SETTINGS_PATH) -> Settings:
    """The job's settings (none: an empty or missing file). A file this init cannot read
    as Caldera's is reported on stderr and ignored."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read().strip()
        if not text:
            return Settings()
        data = json.loads(text)
        limit = float(data["limit_s"]) if data.get("limit_s") is not None else None
        kill_wait = max(float(data.get("kill_wait_s", 30.0)), 0.0)
        warn, warning = data.get("warn"), None
        if warn is not None:
            warning = WarnSignal(
                int(warn["signal"]),
                float(warn["lead_s"]),
                float(warn["period_s"]),
                warn["batch_only"] is True,
            )
    except FileNotFoundError:
        return Settings()
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        sys.stderr.write(f"caldera init: {path}: not read: {exc}\n")
        return Settings()
    if warning is not None and not (0 < warning.signal < signal.NSIG and limit is not None):
        warning = None
    return Settings(limit, warning, kill_wait)


def limit_path(environ: Mapping[str, str] | None = None) -> str:
    """Where `launcher.py limit` leaves a new time limit for the init (real seconds from
    the job's start, `none` for no limit): the pod's own /dev/shm (an emptyDir: fresh for
    each run of the job, where TMPDIR may be a directory every job of the user shares)."""
    env = os.environ if environ is None else environ
    return env.get("CALDERA_LIMIT_FILE") or f"{LIMIT_DIR}/.caldera-limit-{os.getuid()}"


def read_limit(current: float | None, path: str | None = None) -> float | None:
    """The time limit `limit_path()` holds, else `current` (no file, or not a limit)."""
    try:
        with open(path or limit_path(), encoding="ascii") as f:
            text = f.read().strip()
        if text == "none":
            return None
        value = float(text)
    except (OSError, ValueError, UnicodeDecodeError):
        return current
    return max(value, 0.0) if math.isfinite(value) else current


@dataclass
class Clock:
    """The job's time limit and --signal's warning as wall-clock times: the deadline
    moves when the limit is updated; the warning goes out once, from its planned time."""

    started: float
    settings: Settings
    limit_s: float | None = None
    deadline: float | None = None
    warn_at: float | None = None
    warned: bool = False
    kill_at: float | None = None  # KillWait after the time limit's SIGTERM

    def set_limit(self, limit_s: float | None) -> None:
        """A limit counted from the start; one already passed ends the job at once."""
        self.limit_s = limit_s
        self.deadline = None if limit_s is None else self.started + limit_s
        warning = self.settings.warning
        self.warn_at = None
        if warning is not None and self.deadline is not None and not self.warned:
            lead, period = warning.lead_s, warning.period_s
            self.warn_at = warning_time(self.deadline, lead, period, time.time())

    def next_due(self, stopping: bool) -> float | None:
        """The next moment something is due (None: only a signal can wake the init)."""
        times = [self.kill_at] if stopping else [self.deadline, self.warn_at]
        due = [t for t in times if t is not None]
        return min(due) if due else None


def limit_reached(clock: Clock, now: float) -> bool:
    """Whether a SIGTERM from the kubelet at `now` is said to be the time limit's: one in
    the last 2-10 s before the deadline (kept from when the kubelet ended pods at their
    activeDeadlineSeconds, which counted from the pod's start, before this init's). The
    init now ends the job at its deadline itself, so this only names a pod deletion in
    that window (a scancel just before the limit says DUE TO TIME LIMIT)."""
    limit_s = clock.limit_s
    slack = min(10.0, max(2.0, 0.2 * limit_s)) if limit_s else 0.0
    return clock.deadline is not None and now >= clock.deadline - slack


def say_ending(child: int, due_to_limit: bool) -> None:
    """slurmstepd's lines in the job's stderr as the job is stopped: `*** JOB 12 ON node
    CANCELLED AT <time> ***` and `*** STEP 12.N ON <its first node> ... ***` for each
    running srun step, with ` DUE TO TIME LIMIT` at the limit. Written through a
    descriptor of its own at the end of the file (files.batch_command opens the job's
    files for appending)."""
    node = os.environ.get("SLURMD_NODENAME") or os.uname().nodename
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return
    now = time.time()
    why = " DUE TO TIME LIMIT" if due_to_limit else ""
    at = f"CANCELLED AT {time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(now))}{why}"
    lines = [f"slurmstepd-{node}: error: *** JOB {job} ON {node} {at} ***"]
    for step, (_, first) in sorted(running_steps(child, step_dir()).items()):
        where = first or node  # each running step's slurmstepd says it too
        lines.append(f"slurmstepd-{where}: error: *** STEP {job}.{step} ON {where} {at} ***")
    try:
        fd = os.open(f"/proc/{child}/fd/2", os.O_WRONLY | os.O_APPEND | os.O_NOCTTY)
    except OSError:  # the script has ended, or its stderr is closed
        return
    try:
        os.write(fd, "".join(f"{line}\n" for line in lines).encode())
    except OSError:
        pass
    finally:
        os.close(fd)


def append_message(env: Mapping[str, str], line: str) -> None:
    """One line at the end of the container's termination message (srun's step records,
    the init's time limit); a pod without one (or a file the user replaced) records
    nothing."""
    with contextlib.suppress(OSError):
        flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW
        fd = os.open(env.get("CALDERA_STEP_LOG", STEP_LOG), flags)
        try:
            os.write(fd, f"{line}\n".encode())
        finally:
            os.close(fd)


def record_time_limit() -> None:
    """`TIME_LIMIT_RECORD` in the termination message (lifecycle.py: TIMEOUT)."""
    append_message(os.environ, TIME_LIMIT_RECORD)


def mark_ending() -> None:
    """Tell an srun still waiting for its step's CPUs that the job ends (it then says only
    that the step was refused, as Slurm's srun does: containers/srun_claim.py)."""
    book = os.path.join(step_dir(), BOOK)
    with contextlib.suppress(OSError):
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW
        os.close(os.open(os.path.join(book, JOB_ENDING), flags, 0o600))
        fd = os.open(book, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            let_waiting_leave(fd)  # refused before the signals, as slurmctld refuses them
        finally:
            os.close(fd)


def step_dir(environ: Mapping[str, str] | None = None) -> str:
    """Where the sruns of this pod take their step ids (the same place for every process
    of the container's user that has the container's TMPDIR)."""
    env = os.environ if environ is None else environ
    return os.path.join(env.get("TMPDIR", "/tmp"), f".caldera-steps-{os.getuid()}")


def running_steps(session: int, base: str) -> dict[int, tuple[int, str]]:
    """Step id -> (its srun's pid, the step's first node) for the sruns running in the
    batch script's session: each writes `<base>/N/pid` (`PID NODE`, pod_launcher)."""
    sruns = set(steps_of(session))
    found: dict[int, tuple[int, str]] = {}
    with contextlib.suppress(OSError):
        for name in os.listdir(base):
            try:
                with open(os.path.join(base, name, "pid"), encoding="utf-8") as f:
                    pid, _, node = f.read().strip().partition(" ")
                if name.isdigit() and int(pid) in sruns:
                    found[int(name)] = (int(pid), node)
            except (OSError, ValueError):
                continue
    return found


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


def run(argv: Sequence[str], settings_path: str = SETTINGS_PATH) -> int:
    """Run `argv` as the pod's batch step; its exit code."""
    if not argv:
        sys.stderr.write("usage: launcher.py init COMMAND [ARG...]\n")
        return 2
    settings = read_settings(settings_path)
    # signals wait in the mask until the child exists; sigwait then takes them one by one
    watched = {signal.SIGTERM, signal.SIGCHLD, LIMIT_SIGNAL, *_PASSED}
    signal.pthread_sigmask(signal.SIG_BLOCK, watched)
    clock = Clock(time.time(), settings)
    child = _spawn(argv)
    clock.set_limit(read_limit(settings.limit_s))  # (one written before this init ran)
    code: int | None = None
    stopping = timed_out = False
    while True:
        due = clock.next_due(stopping)
        if due is None:
            signum = signal.sigwait(watched)
        else:
            info = signal.sigtimedwait(watched, max(due - time.time(), 0.0))
            signum = info.si_signo if info is not None else 0
        now = time.time() + 0.005  # (a timed wait may end a hair early)
        if signum == 0 and stopping:
            if clock.kill_at is not None and now >= clock.kill_at:  # KillWait is over
                clock.kill_at = None
                signal_all([child], signal.SIGKILL)
        elif signum == 0 and clock.deadline is not None and now >= clock.deadline:
            timed_out = stopping = True
            if code is None:
                mark_ending()
                say_ending(child, due_to_limit=True)
            signal_all([child], signal.SIGTERM)
            clock.kill_at = now + settings.kill_wait_s
        elif signum == 0 and clock.warn_at is not None and now >= clock.warn_at:
            clock.warn_at, clock.warned = None, True  # once; never while stopping
            if settings.warning is not None:
                _warn(child, settings.warning)
        elif signum == signal.SIGTERM:
            if not stopping and code is None:
                mark_ending()
                say_ending(child, limit_reached(clock, now))
            stopping = True
            signal_all([child], signal.SIGTERM)
        elif signum == LIMIT_SIGNAL:
            if not stopping:
                clock.set_limit(read_limit(clock.limit_s))
        elif signum != signal.SIGCHLD and code is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signum)
        while True:  # reap the child and every orphan
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:  # nothing left in the pod (the child was reaped)
                if timed_out:
                    record_time_limit()
                return code if code is not None else 1
            if pid == 0:
                break
            if pid == child:
                code = exit_code(status)
                if not stopping:  # the script's own end: the job ends with it
                    return code


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
