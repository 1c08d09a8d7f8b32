"""`salloc` and `srun` outside a job: an allocation held while a command runs.

Slurm's salloc asks slurmctld for an allocation, runs a command (the user's shell by
default) with the allocation's SLURM_* environment, and gives the allocation back when the
command ends, with the command's exit code as the job's. srun outside a job does the same
around one step. Caldera's allocation is a job submitted through sbatch whose batch script
holds the allocation: it writes its environment for the client, then waits until the
client writes the command's exit status, and exits with it (so sacct shows COMPLETED or
FAILED with the code, as Slurm does). The files are in a private directory of the caller's.

Limits: the allocation's holder must run on this machine (the local backend); on another
cluster the client cannot hand the exit status over, and the job is cancelled instead.
sacct lists the holder as the job's batch step (Slurm has none for salloc).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from containers.srun_layout import SrunExit, parse

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
}
# srun options that are also the allocation's (sbatch reads them): the rest are the step's
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
}
_HOLDER = (
    'd={dir}; env -0 > "$d/env.tmp" && mv "$d/env.tmp" "$d/env"; '
    'while [ ! -e "$d/status" ]; do sleep 0.1; done; exit "$(cat "$d/status")"'
)


def _sbatch(args: Sequence[str], prog: str) -> tuple[int, str, str]:
    """sbatch --parsable with these words, its messages as `prog`'s."""
    code = (
        f"import sys; sys.path[:0] = {sys.path!r}; "
        "from gateway.cli.sbatch_cmd import main; sys.exit(main())"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-c", code, "--parsable", *args],
        capture_output=True,
        text=True,
        check=False,
    )
    err = done.stderr.replace("sbatch: ", f"{prog}: ")
    return done.returncode, done.stdout.strip().split(";")[0], err


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


def run_allocation(
    options: Sequence[str], command: Sequence[str], prog: str, name: str, quiet: bool = False
) -> int:
    """Hold an allocation with `options` (named `name` unless they name it) while
    `command` runs in it; the command's exit status."""
    home = Path(tempfile.mkdtemp(prefix="caldera-alloc-"))
    try:
        home.chmod(0o700)
        holder = _HOLDER.format(dir=shlex.quote(str(home)))
        named = any(o.startswith(("-J", "--job-name")) for o in options)
        name_args = [] if named else ["--job-name", name]
        rc, job_id, err = _sbatch([*name_args, *options, "-o", "/dev/null", "--wrap", holder], prog)
        if rc != 0:
            sys.stderr.write(err)
            return 1
        say = (lambda text: None) if quiet else (lambda text: sys.stderr.write(f"{prog}: {text}\n"))
        env_file, waited, asked = home / "env", False, time.monotonic()
        while not env_file.exists():
            state, reason = _record(job_id)
            if state not in ("PENDING", "RUNNING", "CONFIGURING"):
                say(f"error: Job allocation {job_id} has been revoked.")
                return 1
            # slurmctld answers salloc's request at once when it can allocate; Caldera's
            # answer is its next scheduling cycle: "pending" only once a cycle left the job
            # waiting (it then has a reason), or after a second without one
            decided = reason != "None" or time.monotonic() - asked > 1.0
            if state == "PENDING" and decided and not waited:
                say(f"Pending job allocation {job_id}")
                say(f"job {job_id} queued and waiting for resources")
                waited = True
            time.sleep(0.1)
        if waited:
            say(f"job {job_id} has been allocated resources")
        say(f"Granted job allocation {job_id}")
        pairs = (item.partition("=") for item in env_file.read_text().split("\0") if item)
        env = {**os.environ, **{k: v for k, _, v in pairs if k in _KEPT}}
        try:
            status = subprocess.run(list(command), env=env, check=False).returncode
        except OSError as exc:
            sys.stderr.write(f"{prog}: error: {command[0]}: {exc.strerror}\n")
            status = 127 if isinstance(exc, FileNotFoundError) else 126
        except KeyboardInterrupt:
            status = 130
        code = status if status >= 0 else 128 - status
        say(f"Relinquishing job allocation {job_id}")
        (home / "status.tmp").write_text(str(min(code, 255)))
        (home / "status.tmp").rename(home / "status")
        deadline = time.monotonic() + 10
        while _state(job_id) in ("RUNNING", "COMPLETING") and time.monotonic() < deadline:
            time.sleep(0.1)
        if _state(job_id) in ("RUNNING", "COMPLETING"):  # a holder elsewhere never saw it
            _cancel(job_id)
        return code
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
    step = [sys.executable, "-I", "-c", _SRUN_STEP, *argv]
    return run_allocation(allocation, step, "srun", Path(command[0]).name, quiet=True)


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
