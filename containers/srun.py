"""`srun` inside a job of the local backend: launches a step's tasks on this node.

Each task gets the batch environment plus its ranks (SLURM_PROCID, SLURM_LOCALID,
SLURM_NODEID, SLURM_GTIDS) and the step's view (SLURM_STEP_ID, SLURM_STEP_NUM_TASKS,
SLURM_STEP_NUM_NODES, SLURM_STEP_NODELIST, SLURM_STEP_TASKS_PER_NODE, SLURM_NTASKS). The
exit status is the highest of the tasks' (a task killed by signal N counts as 128+N), as
srun's; `-l` prefixes each output line with the task's rank. The step is recorded in the
job's spool (`$CALDERA_STEP_DIR/N.json`) for sacct.

Scope: one node (the local backend's). `--mpi=pmix` is accepted and exported as
SLURM_MPI_TYPE, but no PMIx server is started: MPI programs launched this way run as
singletons; use `mpirun` inside the job for a real MPI launch. Signals SIGINT, SIGTERM,
SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to srun are forwarded to every task.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from gateway.compat.job_env import TaskIds, task_environment
from gateway.model.job import wait_status
from gateway.model.state import JobState

__all__ = ["SrunError", "main", "parse_args", "run_step"]

_FORWARDED = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
_SIGNAL_NAMES = {
    signal.SIGKILL: "Killed",
    signal.SIGTERM: "Terminated",
    signal.SIGSEGV: "Segmentation fault",
    signal.SIGABRT: "Aborted",
    signal.SIGINT: "Interrupt",
    signal.SIGBUS: "Bus error",
}


class SrunError(Exception):
    """srun cannot run the step (outside a job, more nodes than the backend has...)."""


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="srun", add_help=True)
    p.add_argument("-n", "--ntasks", type=int)
    p.add_argument("-N", "--nodes", type=str)
    p.add_argument("--ntasks-per-node", type=int)
    p.add_argument("-c", "--cpus-per-task", type=int)
    p.add_argument("-l", "--label", action="store_true")
    p.add_argument("--mpi", default=None)
    p.add_argument("-J", "--job-name", default=None)
    p.add_argument("-u", "--unbuffered", action="store_true")
    p.add_argument("--export", default=None)
    p.add_argument("-K", "--kill-on-bad-exit", nargs="?", const="1", default=None)
    p.add_argument("command", nargs=argparse.REMAINDER)
    ns = p.parse_args(list(argv))
    if not ns.command:
        p.error("no command given")
    return ns


def _node_count(text: str | None) -> int:
    if text is None:
        return 1
    return int(text.split("-")[0] or 1)


def _allocate_step(step_dir: Path | None) -> tuple[int, Path | None]:
    if step_dir is None or not step_dir.is_dir():
        return int(os.environ.get("SLURM_STEP_ID", "-1")) + 1, None
    n = 0
    while True:
        path = step_dir / f"{n}.json"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            n += 1
            continue
        os.close(fd)
        return n, path


def _record(path: Path | None, data: dict[str, Any]) -> None:
    """Replace the step's record atomically. srun runs as the job's user in the user's own
    `steps/`; the supervisor and gateway read it as root (containers.steprecords)."""
    if path is None:
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with os.fdopen(os.open(tmp, flags, 0o600), "w") as fh:
        fh.write(json.dumps(data, sort_keys=True))
    os.replace(tmp, path)


def _pump(stream: IO[bytes], out: IO[bytes], prefix: bytes, lock: threading.Lock) -> None:
    for line in iter(stream.readline, b""):
        with lock:
            out.write(prefix + line)
            out.flush()
    stream.close()


def _describe_failures(node: str, statuses: list[int]) -> list[str]:
    """srun's `error: NODE: task(s) X: ...` lines, grouped as srun groups them."""
    groups: dict[str, list[int]] = {}
    for rank, status in enumerate(statuses):
        if status & 0x7F:
            text = _SIGNAL_NAMES.get(signal.Signals(status & 0x7F), f"Signal {status & 0x7F}")
        elif status:
            text = f"Exited with exit code {(status >> 8) & 0xFF}"
        else:
            continue
        groups.setdefault(text, []).append(rank)
    lines = []
    for text, ranks in groups.items():
        label = "task" if len(ranks) == 1 else "tasks"
        lines.append(f"srun: error: {node}: {label} {_ranks(ranks)}: {text}")
    return lines


def _ranks(ranks: list[int]) -> str:
    if len(ranks) > 1 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    return ",".join(map(str, ranks))


def run_step(ns: argparse.Namespace, env: dict[str, str]) -> int:
    """Run one step; returns srun's exit status."""
    if "SLURM_JOB_ID" not in env:
        raise SrunError(
            "srun outside a job is not supported by Caldera's local backend; "
            "submit a batch script with sbatch"
        )
    job_nodes = env.get("SLURM_JOB_NODELIST", env.get("SLURMD_NODENAME", "localhost"))
    if int(env.get("SLURM_JOB_NUM_NODES", "1")) > 1 or _node_count(ns.nodes) > 1:
        raise SrunError(
            "the local backend runs every step on one node; multi-node srun "
            "needs the slurm or kubernetes backend"
        )
    node = env.get("SLURMD_NODENAME", job_nodes)
    if ns.ntasks is not None:
        ntasks = ns.ntasks
    elif ns.ntasks_per_node is not None:
        ntasks = ns.ntasks_per_node
    else:
        ntasks = int(env.get("SLURM_NTASKS", "1"))
    if ntasks < 1:
        raise SrunError(f"Invalid number of tasks ({ntasks})")
    step_dir_text = env.get("CALDERA_STEP_DIR")
    step_id, record = _allocate_step(Path(step_dir_text) if step_dir_text else None)
    cpt = ns.cpus_per_task
    cpus = ntasks * (cpt or int(env.get("SLURM_CPUS_PER_TASK", "1")))
    name = ns.job_name or os.path.basename(ns.command[0])
    start = time.time()
    base_record: dict[str, Any] = {
        "step_id": str(step_id),
        "name": name,
        "nodes": [node],
        "ntasks": ntasks,
        "cpus": cpus,
        "start_time": start,
        "end_time": None,
        "exit_code": 0,
        "state": "RUNNING",
    }
    width = len(str(ntasks - 1))
    procs: list[subprocess.Popen[bytes]] = []
    lock = threading.Lock()
    pumps: list[threading.Thread] = []
    sys.stdout.flush()
    sys.stderr.flush()
    for rank in range(ntasks):
        task_env = task_environment(
            env,
            step_id=step_id,
            ntasks=ntasks,
            nodes=[node],
            tasks_on_nodes=[ntasks],
            task=TaskIds(rank, rank, 0),
            cpus_per_task=cpt,
            label=ns.label,
            mpi=ns.mpi,
        )
        pipe = subprocess.PIPE if ns.label else None
        try:
            proc = subprocess.Popen(
                ns.command, env=task_env, stdout=pipe, stderr=pipe, process_group=0
            )
        except OSError as exc:
            for p in procs:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
            raise SrunError(f"{node}: task {rank}: {ns.command[0]}: {exc.strerror}") from exc
        procs.append(proc)
        if ns.label:
            prefix = f"{rank:0{width}d}: ".encode()
            assert proc.stdout is not None
            assert proc.stderr is not None
            for stream, out in ((proc.stdout, sys.stdout.buffer), (proc.stderr, sys.stderr.buffer)):
                t = threading.Thread(target=_pump, args=(stream, out, prefix, lock), daemon=True)
                t.start()
                pumps.append(t)
    base_record["task_pids"] = [p.pid for p in procs]
    _record(record, base_record)

    def forward(signum: int, frame: Any) -> None:
        for p in procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signum)

    for sig in _FORWARDED:
        signal.signal(sig, forward)
    statuses: list[int] = []
    for p in procs:
        code = p.wait()
        statuses.append(wait_status(signal=-code) if code < 0 else wait_status(exit_code=code))
    for t in pumps:
        t.join(timeout=5)
    for line in _describe_failures(node, statuses):
        sys.stderr.write(line + "\n")
    sys.stderr.flush()
    signalled = [s & 0x7F for s in statuses if s & 0x7F]
    exits = [(s >> 8) & 0xFF for s in statuses if not s & 0x7F]
    step_status = max(statuses)
    if signalled:
        state = JobState.CANCELLED
        step_status = wait_status(signal=max(signalled))
    elif any(exits):
        state = JobState.FAILED
    else:
        state = JobState.COMPLETED
    base_record.update(end_time=time.time(), exit_code=step_status, state=state.long)
    _record(record, base_record)
    rc = max([*exits, *(128 + s for s in signalled)], default=0)
    return rc


def main(argv: Sequence[str] | None = None) -> int:
    """The `srun` command."""
    ns = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return run_step(ns, dict(os.environ))
    except SrunError as exc:
        sys.stderr.write(f"srun: error: {exc}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
