"""`salloc` and `srun` outside a job: an allocation held while a command runs.

Slurm's salloc asks slurmctld for an allocation, runs a command (the user's shell by
default) with the allocation's SLURM_* environment, and gives the allocation back when the
command ends, with the command's exit code as the job's. srun outside a job does the same
around one step. Caldera's allocation is a job submitted through sbatch whose batch script
holds the allocation: it writes its environment for the client, then waits until the
client writes the command's wait status, and ends with it (so the job ends COMPLETED or
FAILED with the code, as Slurm does). The files are in a private directory of the caller's.
The job is submitted as an allocation: slurmctld's record of a salloc job (BatchFlag=0,
Command=(null), no batch step in sacct; the holder is Caldera's, not the user's).

Limits: the allocation's holder must run on this machine (the local backend); on another
cluster the client cannot hand the exit status over, and the job is cancelled instead.
"""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from containers.srun_io import KILL_WAIT_VAR
from containers.srun_layout import SrunExit, parse
from containers.srun_revoke import ALLOCATION_VAR, revocation

__all__ = ["main", "run_allocation", "split_command", "srun_outside_a_job"]

# the variables salloc 22.05 gives its command (seen on the test cluster), plus the
# option-derived ones sbatch also exports
_KEPT = {
    "SLURM_CLUSTER_NAME",
    "SLURM_CONF",
    "SLURM_JOBID",
    "SLURM_JOB_ACCOUNT",
    "SLURM_JOB_CPUS_PER_NODE",
    "SLURM_JOB_ID",
    "SLURM_JOB_NAME",
    "SLURM_JOB_NODELIST",
    "SLURM_JOB_NUM_NODES",
    "SLURM_JOB_PARTITION",
    "SLURM_JOB_QOS",
    "SLURM_NNODES",
    "SLURM_NODELIST",
    "SLURM_NODE_ALIASES",
    "SLURM_NPROCS",
    "SLURM_NTASKS",
    "SLURM_SUBMIT_DIR",
    "SLURM_SUBMIT_HOST",
    "SLURM_TASKS_PER_NODE",
    "SLURM_CPUS_PER_TASK",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_MEM_PER_CPU",
    "SLURM_MEM_PER_NODE",
    "SLURM_GPUS",
    "SLURM_JOB_GPUS",
    "CUDA_VISIBLE_DEVICES",
    "CALDERA_STEP_DIR",  # steps run from the command are recorded for sacct
    KILL_WAIT_VAR,  # how long srun waits before SIGKILL when the allocation is revoked
}
# srun options that are also the allocation's (sbatch reads them): the rest are the step's
# srun's options that only its job takes (the step's srun would refuse them inside it:
# `--begin is ignored because nodes are already allocated.`)
_ALLOCATION_ONLY = frozenset({"begin", "hold", "dependency", "nice", "comment", "deadline"})
_ALLOCATION_OPTIONS = {
    "account",
    "chdir",
    "cpus-per-task",
    "exclude",
    "exclusive",
    "gpus",
    "gres",
    "job-name",
    "mem",
    "mem-per-cpu",
    "nodelist",
    "nodes",
    "ntasks",
    "ntasks-per-node",
    "partition",
    "qos",
    "time",
    "constraint",
    "licenses",
    "gpus-per-node",
    "gpus-per-task",
    "cpus-per-gpu",
    "mem-per-gpu",
    "overcommit",
    "contiguous",
    "mincpus",
    "tmp",
    "spread-job",
} | _ALLOCATION_ONLY
# the allocation's holder: hands the client its environment, waits for the command's wait
# status (`N`: exit N; `-S`: killed by signal S), and ends the same way, so the job's
# ExitCode and state are slurmctld's for salloc's slurm_complete_job(status)
_HOLDER = (
    'd={dir}; env -0 > "$d/env.tmp" && mv "$d/env.tmp" "$d/env"; '
    'while [ ! -e "$d/status" ]; do sleep 0.1; done; s="$(cat "$d/status")"; '
    'case "$s" in -*) trap - "${{s#-}}"; kill -s "${{s#-}}" $$; exit 1;; esac; exit "$s"'
)
# signals that make salloc give the allocation back (slurmctld cancels it: sig_array)
_TERMINAL = (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)
_ALIVE = ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED")


def _sbatch(args: Sequence[str], prog: str, command: str) -> tuple[int, str, str, str]:
    """sbatch --parsable with these words for an allocation recording `command`: its exit
    code, the job id, and its stdout and stderr as `prog`'s."""
    from gateway.cli.sbatch_cmd import allocate

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = allocate(["--parsable", *args], command)
    return (
        code,
        out.getvalue().strip().split(";")[0],
        out.getvalue().replace("sbatch", prog),
        err.getvalue().replace("sbatch: ", f"{prog}: "),
    )


def _record(job_id: str) -> tuple[str, str]:
    """The job's state and pending reason."""
    from gateway.cli.common import call

    jobs = call("GET", f"/v1/jobs/{job_id}")["jobs"]
    return (str(jobs[0]["state"]), str(jobs[0].get("reason") or "None")) if jobs else ("", "")


def _state(job_id: str) -> str:
    return _record(job_id)[0] or "UNKNOWN"


def _cancel(job_id: str) -> None:
    from gateway.cli.common import GatewayError, call

    body = {"ids": [job_id], "signal": None, "batch_only": False}
    with contextlib.suppress(GatewayError):  # the gateway is gone: nothing holds it then
        call("POST", "/v1/jobs/signal", body)


class _Signals:
    """salloc's signal handling: the terminal signals are noted (the caller cancels the
    allocation, as salloc's `_signal_while_allocating` completes the job with NO_VAL);
    SIGHUP goes on to the command's process group once it runs. srun outside a job
    (`forward`) passes every one of them to its step once the step runs, as srun does."""

    def __init__(self, forward: bool) -> None:
        self.caught = False
        self.forward = forward
        self.command: int | None = None
        for sig in _TERMINAL:
            signal.signal(sig, self._note)
        signal.signal(signal.SIGHUP, self._hangup)

    def _note(self, signum: int, frame: object) -> None:
        if self.forward and self.command is not None:
            self._hangup(signum, frame)
        else:
            self.caught = True

    def _hangup(self, signum: int, frame: object) -> None:
        if self.command is not None:
            with contextlib.suppress(OSError):
                os.killpg(self.command, signum)
        else:
            self.caught = True


# slurmctld's answer to an allocation it cannot grant at once, said before the pending
# lines (the test cluster: `-n9` on 8 CPUs, `-N5` on 4 nodes, `--hold`)
_PENDING_WHY = {
    "PartitionConfig": "Requested partition configuration not available now",
    "PartitionNodeLimit": "Requested partition configuration not available now",
    "JobHeldUser": "Job is in held state, pending scheduler release",
}


def _granted(
    job_id: str, env_file: Path, tell: Callable[[str], None], sig: _Signals, step: bool
) -> bool:
    """Wait until the holder runs (its environment is written), with salloc's (or, for
    `step`, srun's) lines while the job pends; False when the job ended or a signal made
    it give the job up."""
    waited, asked = False, time.monotonic()
    say = (lambda text: None) if step else tell
    while not env_file.exists():
        if sig.caught:
            _cancel(job_id)
            if step:  # srun's words (allocate.c), without salloc's period
                tell(f"Job allocation {job_id} has been revoked")
                tell(f"Force Terminated JobId={job_id}")
            else:
                tell(f"Job allocation {job_id} has been revoked.")
                tell("Job aborted due to signal")
            return False
        state, reason = _record(job_id)
        if state not in _ALIVE:
            say(f"error: Job allocation {job_id} has been revoked.")
            return False
        # slurmctld answers salloc's request at once when it can allocate; Caldera's
        # answer is its next scheduling cycle: "pending" only once a cycle left the job
        # waiting (it then has a reason), or after a second without one
        decided = reason != "None" or time.monotonic() - asked > 1.0
        if state == "PENDING" and decided and not waited:
            if reason in _PENDING_WHY:
                tell(_PENDING_WHY[reason])
            say(f"Pending job allocation {job_id}")
            tell(f"job {job_id} queued and waiting for resources")
            waited = True
        time.sleep(0.1)
    if waited:
        tell(f"job {job_id} has been allocated resources")
    say(f"Granted job allocation {job_id}")
    return True


def _spawn(
    command: Sequence[str], env: dict[str, str], prog: str
) -> subprocess.Popen[bytes] | None:
    """The command in a process group of its own, given the terminal when salloc has one
    (salloc's `_fork_command` and tcsetpgrp), SIGINT and SIGQUIT at their defaults."""
    try:
        proc = subprocess.Popen(list(command), env=env, process_group=0, restore_signals=True)
    except OSError:
        sys.stderr.write(f'{prog}: error: _fork_command: Unable to find command "{command[0]}"\n')
        return None
    _foreground(proc.pid)
    return proc


def _foreground(pgid: int) -> None:
    """Give the terminal (if standard input is one) to process group `pgid`."""
    if not os.isatty(0):
        return
    old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        with contextlib.suppress(OSError):
            os.tcsetpgrp(0, pgid)
    finally:
        signal.signal(signal.SIGTTOU, old)


def _watch(
    proc: subprocess.Popen[bytes], job_id: str, say: Callable[[str], None], sig: _Signals
) -> bool:
    """Wait for the command; cancel the allocation on a terminal signal and say when it is
    revoked (scancel, the time limit), as salloc's job-complete handler does. The command
    runs on either way (salloc sends it nothing). True if the allocation was revoked."""
    revoked, next_look = False, time.monotonic() + 0.5
    while True:
        try:
            proc.wait(timeout=0.2)
            ended = True
        except subprocess.TimeoutExpired:
            ended = False
        if not revoked:
            if sig.caught:
                _cancel(job_id)
                next_look = 0.0
            # once the command ended, a last look: its srun may have ended a step because
            # the allocation was revoked before salloc's next look
            if ended or time.monotonic() >= next_look:
                next_look = time.monotonic() + 0.5
                state = revocation(job_id)
                if state:
                    revoked = True
                    if state == "TIMEOUT":
                        say(
                            f"Job {job_id} has exceeded its time limit and its allocation "
                            "has been revoked."
                        )
                    else:
                        say(f"Job allocation {job_id} has been revoked.")
        if ended:
            return revoked


def _exit_code(status: int, step: bool) -> int:
    """The exit code for the command's wait status (Popen's: -S when killed by S): its exit
    code; killed by a signal, srun's 128+S, or salloc's 0 for a signal the user likely sent
    (SIGHUP, SIGINT, SIGQUIT, SIGKILL) and 1 for any other."""
    if status >= 0:
        return status
    if step:
        return 128 - status
    return 0 if -status in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGKILL) else 1


def run_allocation(
    options: Sequence[str],
    command: Sequence[str],
    prog: str,
    name: str,
    recorded: str = "(null)",
    step: bool = False,
) -> int:
    """Hold an allocation with `options` (named `name` unless they name it, its Command
    `recorded`) while `command` runs in it; the exit code. `step`: srun outside a job,
    whose allocation is silent and whose signals go to its step."""
    home = Path(tempfile.mkdtemp(prefix="caldera-alloc-"))
    try:
        home.chmod(0o700)
        holder = _HOLDER.format(dir=shlex.quote(str(home)))
        named = any(o.startswith(("-J", "--job-name")) for o in options)
        name_args = [] if named else ["--job-name", name]
        sig = _Signals(forward=step)
        rc, job_id, out, err = _sbatch(
            [*name_args, *options, "-o", "/dev/null", "--wrap", holder], prog, recorded
        )
        if rc != 0:
            sys.stderr.write(err)
            return 1
        if not job_id.isdigit():  # --version, --help, --usage: answered, nothing allocated
            sys.stdout.write(out)
            sys.stderr.write(err)
            return 0

        def tell(text: str) -> None:
            sys.stderr.write(f"{prog}: {text}\n")

        def say(text: str) -> None:  # (salloc's own lines: srun's allocation is silent)
            if not step:
                tell(text)

        env_file = home / "env"
        if not _granted(job_id, env_file, tell, sig, step):
            return 1
        pairs = (item.partition("=") for item in env_file.read_text().split("\0") if item)
        env = {**os.environ, **{k: v for k, _, v in pairs if k in _KEPT}}
        env[ALLOCATION_VAR] = job_id  # srun watches this allocation (not a batch job's)
        proc = _spawn(command, env, prog)
        revoked = False
        if proc is None:
            status = 1
        else:
            sig.command = proc.pid
            revoked = _watch(proc, job_id, say, sig)
            _foreground(os.getpgrp())
            status = proc.returncode
        if not revoked:
            say(f"Relinquishing job allocation {job_id}")
            (home / "status.tmp").write_text(str(status))
            (home / "status.tmp").rename(home / "status")
            deadline = time.monotonic() + 10
            while _state(job_id) in ("RUNNING", "COMPLETING") and time.monotonic() < deadline:
                time.sleep(0.1)
            if _state(job_id) in ("RUNNING", "COMPLETING"):  # a holder elsewhere never saw it
                _cancel(job_id)
        return _exit_code(status, step)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def srun_outside_a_job(argv: Sequence[str]) -> int:
    """`srun` with no allocation: one for this step, as srun creates it."""
    try:
        options, command = parse(argv)
    except SrunExit as exc:
        for line in exc.lines:
            sys.stderr.write(line + "\n")
        return exc.status
    allocation: list[str] = []
    for name, value in options.items():
        if name in _ALLOCATION_OPTIONS:
            allocation.append(f"--{name}" if value is None else f"--{name}={value}")
    step = list(argv)
    if _ALLOCATION_ONLY & options.keys():  # the job's alone: the step's srun would refuse
        kept = ((k, v) for k, v in options.items() if k not in _ALLOCATION_ONLY)  # them
        step = [*(f"--{k}" if v is None else f"--{k}={v}" for k, v in kept), *command]
    launch = [sys.executable, "-I", "-c", _SRUN_STEP, *step]
    name = Path(command[0]).name
    return run_allocation(allocation, launch, "srun", name, recorded=command[0], step=True)


_SRUN_STEP = (
    f"import sys; sys.path[:0] = {sys.path!r}; from containers.srun import main; sys.exit(main())"
)


def main(argv: Sequence[str] | None = None) -> int:
    """The `salloc` command: `salloc [options] [command [args]]`."""
    options, command = split_command(list(sys.argv[1:] if argv is None else argv))
    if not command:
        command = [os.environ.get("SHELL") or "/bin/sh"]
    return run_allocation(options, command, "salloc", "interactive")


def split_command(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """salloc's options and its command: the first word that is neither an option nor an
    option's separate value (`salloc -N 2 -p real hostname`), as salloc's getopt stops."""
    i = 0
    while i < len(args) and args[i].startswith("-") and args[i] != "-":
        if args[i] == "--":
            return list(args[:i]), list(args[i + 1 :])
        i += 2 if _takes_value(args[i]) else 1
    return list(args[:i]), list(args[i:])


def _takes_value(word: str) -> bool:
    """Whether an option word takes the next word as its value (`-N 2`, `--nodes 2`), by
    sbatch's option table (salloc's options are sbatch's)."""
    from gateway.compat.options import BY_LONG, BY_SHORT
    from gateway.compat.optypes import Arg

    if word.startswith("--"):
        name = word[2:]
        if "=" in name:
            return False
        found = BY_LONG.get(name) or next(
            (o for long, o in BY_LONG.items() if long.startswith(name)), None
        )
        return found is not None and found.arg is Arg.REQUIRED
    found = BY_SHORT.get(word[-1:]) if len(word) == 2 else None
    return found is not None and found.arg is Arg.REQUIRED
