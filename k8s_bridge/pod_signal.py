"""scancel's signals inside a job's rank 0 pod: `launcher.py signal [--batch|--step N] SIG`.

A pod cannot be sent a signal through the API, but a command can be run in its container
(the API server's `exec`, which the kubelet serves with authentication): the backend runs
this one there (pod_exec.py), as the pod's own user, and it signals the job's processes as
slurmstepd would for `scancel -s SIG`:
- the job (no option): every srun step of the batch script's session, not the batch shell
  (scancel's default for a signal other than KILL); srun passes it to its tasks on every
  node;
- `--batch` (scancel -b): the batch shell alone;
- `--step N` (scancel -s SIG ID.N): the srun of step N alone, if it runs (a signal to a
  step that does not run does nothing, as on Slurm).

The batch shell is the init's child (pod_init.py): a session leader whose parent is the
pod's PID 1, the earliest started of them (an orphaned daemon that made a session of its
own starts later). Each srun names its step: `<step dir>/N/pid` (pod_init.running_steps).

Exit status: 0 done (or nothing to signal), 1 no batch shell (the job is ending), 2 usage,
3 a signal srun cannot pass to its tasks (KILL, STOP, ...) while steps run.

`launcher.py limit SECONDS|none` (limit_main) gives the init a new time limit (scontrol
update TimeLimit=): written to pod_init.limit_path(), then LIMIT_SIGNAL to the init.
Shipped beside pod_launcher.py; standard library and the shipped modules only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Sequence

from k8s_bridge.pod_init import LIMIT_SIGNAL, limit_path, running_steps, step_dir, steps_of

__all__ = ["ENDING", "FORWARDED", "NOT_PASSED", "batch_shell", "limit_main", "main", "step_pid"]

# the signals srun passes to its tasks (pod_launcher installs its handlers for these); others
# (KILL, STOP, ...) cannot reach a step's tasks on other nodes from here: NOT_PASSED
FORWARDED: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
FORWARDED += (signal.SIGCONT, signal.SIGALRM, signal.SIGUSR1, signal.SIGUSR2)
ENDING, NOT_PASSED = 1, 3  # exit statuses: no batch shell any more; a signal srun cannot pass


def batch_shell(init: int = 1, proc: str = "/proc") -> int | None:
    """The batch shell: the earliest started session leader among `init`'s children."""
    try:
        with open(f"{proc}/{init}/task/{init}/children", encoding="ascii") as f:
            children = [int(p) for p in f.read().split()]
    except (OSError, ValueError):
        return None
    leaders = []
    for pid in children:
        try:
            with open(f"{proc}/{pid}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rpartition(")")[2].split()
            if int(fields[3]) == pid:  # the session id (stat's 6th field)
                leaders.append((int(fields[19]), pid))  # its start time (22nd field)
        except (OSError, ValueError, IndexError):
            continue
    return min(leaders)[1] if leaders else None


def step_pid(step: int, batch: int, base: str) -> int | None:
    """The srun of step `step` if it runs in the batch script's session."""
    found = running_steps(batch, base).get(step)
    return found[0] if found else None


def main(argv: Sequence[str], init: int = 1) -> int:
    """`launcher.py signal [--batch|--step N] SIG`."""
    args = list(argv)
    batch_only = "--batch" in args
    args = [a for a in args if a != "--batch"]
    step: int | None = None
    try:
        if args[:1] == ["--step"]:
            step, args = int(args[1]), args[2:]
        (signum,) = (int(a) for a in args)
    except (ValueError, IndexError):
        sys.stderr.write("usage: launcher.py signal [--batch|--step N] SIGNAL\n")
        return 2
    if not 0 < signum < signal.NSIG or (step is not None and batch_only):
        sys.stderr.write(f"launcher.py signal: signal {signum} cannot be sent so\n")
        return 2
    batch = batch_shell(init)
    if batch is None:
        sys.stderr.write("launcher.py signal: the batch step does not run\n")
        return ENDING
    if batch_only:
        targets = [batch]
    elif step is not None:
        pid = step_pid(step, batch, step_dir())
        targets = [pid] if pid is not None else []
    else:
        targets = steps_of(batch)
    if targets and not batch_only and signum not in FORWARDED:
        sys.stderr.write(f"launcher.py signal: srun cannot pass signal {signum} to its tasks\n")
        return NOT_PASSED
    for pid in targets:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)
    return 0


def limit_main(argv: Sequence[str], init: int = 1) -> int:
    """`launcher.py limit SECONDS|none`: the job's new time limit in real seconds from its
    start (pod_init.read_limit), replaced whole so the init never reads half of it, then
    the init woken (a signal before it blocks it is lost, the file is not)."""
    text = argv[0] if len(argv) == 1 else ""
    try:
        if text != "none" and not 0 <= float(text) < float("inf"):
            raise ValueError(text)
    except ValueError:
        sys.stderr.write("usage: launcher.py limit SECONDS|none\n")
        return 2
    path = limit_path()  # first: an init that starts later reads it then
    partial = f"{path}.{os.getpid()}"
    with open(partial, "w", encoding="ascii") as f:
        f.write(text + "\n")
    os.replace(partial, path)
    try:
        os.kill(init, LIMIT_SIGNAL)
    except ProcessLookupError:
        return ENDING
    return 0
