"""`srun` inside a job of the local backend: runs a step's tasks on the job's nodes.

The step's options and layout are srun's (containers/srun_layout.py: getopt_long, the
nodes and tasks of the allocation, srun's warnings and refusals). A local job's nodes are
virtual nodes of this machine, so every task runs here, with its own node's
SLURMD_NODENAME and its ranks (SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID, SLURM_GTIDS) and
the step's view (SLURM_STEP_*). That is also what OpenMPI's `mpirun` needs: under Slurm it
starts one daemon per node with `srun --ntasks-per-node=1 --nodes=N --nodelist=...`.

The exit status is the highest of the tasks' (a task killed by signal N counts as 128+N),
as srun's; `-l` labels output lines with the task's rank; `-o/-e/-i` name per-task files;
`--multi-prog` runs a program per rank. The step is recorded in the job's spool
(`$CALDERA_STEP_DIR/N.json`) for sacct. `--mpi=pmix` is exported as SLURM_MPI_TYPE, but no
PMIx server is started. Signals SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent
to srun are forwarded to every task.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from containers.srun_io import (
    MultiProgError,
    allocate_step,
    describe_failures,
    multi_prog,
    pump,
    record_step,
    task_file,
)
from containers.srun_layout import SrunExit, Step, plan_step
from gateway.compat.job_env import TaskIds, task_environment
from gateway.model.job import wait_status
from gateway.model.state import JobState

__all__ = ["SrunError", "main", "run_step"]

_FORWARDED = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)


class SrunError(Exception):
    """srun cannot run the step (outside a job, a task that cannot be started...)."""


class _Streams:
    """The files a step's -o/-e/-i name, opened once each and shared by the tasks."""

    def __init__(self, step: Step, step_id: int, env: dict[str, str]) -> None:
        self.step, self.step_id, self.env = step, step_id, env
        self.opened: dict[str, IO[bytes]] = {}

    def open(self, option: str, rank: int, mode: str) -> IO[bytes] | None:
        name = task_file(self.step.options.get(option), self.step, self.step_id, rank, self.env)
        if name is None:
            return None
        if name not in self.opened:
            self.opened[name] = open(name, mode)  # noqa: SIM115 - closed with the step
        return self.opened[name]

    def close(self) -> None:
        for f in self.opened.values():
            f.close()


def resolved(command: str, path: str, cwd: str) -> str:
    """The program as srun hands it to slurmstepd (its search_path): a name with a slash
    is taken relative to the working directory (`./prog` -> `/dir/./prog`), a bare name is
    looked up in PATH; tasks then see that path as argv[0] (`/usr/bin/ls: cannot access`).
    A name found nowhere stays as it is (execve's error names it so)."""
    if "/" in command:
        return command if command.startswith("/") else f"{cwd}/{command}"
    for entry in path.split(":"):
        base = entry or cwd
        candidate = f"{base}/{command}" if base.startswith("/") else f"{cwd}/{base}/{command}"
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return command


def _start_tasks(
    step: Step, step_id: int, env: dict[str, str], streams: _Streams
) -> tuple[list[_Task], list[threading.Thread]]:
    opts, ntasks = step.options, step.ntasks
    try:
        commands = (
            multi_prog(step.command[0], ntasks)
            if "multi-prog" in opts
            else [list(step.command)] * ntasks
        )
    except MultiProgError as exc:
        raise SrunError(str(exc)) from exc
    cwd = os.getcwd()
    commands = [[resolved(c[0], env.get("PATH", ""), cwd), *c[1:]] if c else c for c in commands]
    cpt = step.cpus_per_task if "cpus-per-task" in opts else None
    width = len(str(ntasks - 1))
    lock = threading.Lock()
    procs: list[_Task] = []
    pumps: list[threading.Thread] = []
    for rank in range(ntasks):
        nodeid, localid = step.node_of(rank)
        task_env = task_environment(
            env,
            step_id=step_id,
            ntasks=ntasks,
            nodes=list(step.nodes),
            tasks_on_nodes=list(step.tasks_per_node),
            task=TaskIds(rank, localid, nodeid),
            cpus_per_task=cpt,
            label="label" in opts,
            mpi=opts.get("mpi"),
        )
        task_env["SLURMD_NODENAME"] = step.nodes[nodeid]
        try:
            out = streams.open("output", rank, "wb")
            err = streams.open("error", rank, "wb") if opts.get("error") else out
            stdin = streams.open("input", rank, "rb")
        except OSError as exc:
            _kill_all(procs)
            raise SrunError(f"{exc.filename}: {exc.strerror}") from exc
        piped = "label" in opts and out is None
        proc: _Task
        try:
            proc = subprocess.Popen(
                commands[rank],
                env=task_env,
                stdin=stdin,
                stdout=subprocess.PIPE if piped else out,
                stderr=subprocess.PIPE if piped and err is None else err,
                process_group=0,
            )
        except OSError as exc:  # as slurmstepd's task: the error, then exit(errno)
            sys.stderr.write(
                f"slurmstepd-{step.nodes[nodeid]}: error: execve(): {commands[rank][0]}: "
                f"{exc.strerror}\n"
            )
            proc = _NotStarted(exc.errno or 1)
        procs.append(proc)
        if piped:
            prefix = f"{rank:0{width}d}: ".encode()
            for pipe, sink in ((proc.stdout, sys.stdout.buffer), (proc.stderr, sys.stderr.buffer)):
                if pipe is not None:
                    t = threading.Thread(target=pump, args=(pipe, sink, prefix, lock), daemon=True)
                    t.start()
                    pumps.append(t)
    return procs, pumps


def run_step(argv: Sequence[str], env: dict[str, str]) -> int:
    """Run one step; returns srun's exit status."""
    step = plan_step(argv, env)
    for line in step.warnings:
        sys.stderr.write(line + "\n")
    step_dir_text = env.get("CALDERA_STEP_DIR")
    step_id, record = allocate_step(Path(step_dir_text) if step_dir_text else None)
    ntasks = step.ntasks
    base_record: dict[str, Any] = {
        "step_id": str(step_id),
        "name": step.options.get("job-name") or os.path.basename(step.command[0]),
        "nodes": list(step.nodes),
        "ntasks": ntasks,
        "cpus": ntasks * step.cpus_per_task,
        "start_time": time.time(),
        "end_time": None,
        "exit_code": 0,
        "state": "RUNNING",
    }
    sys.stdout.flush()
    sys.stderr.flush()
    streams = _Streams(step, step_id, env)
    try:
        procs, pumps = _start_tasks(step, step_id, env, streams)
        base_record["task_pids"] = [p.pid for p in procs]
        record_step(record, base_record)

        def forward(signum: int, frame: Any) -> None:
            for p in procs:
                if p.pid:
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
    finally:
        streams.close()
    for index in reversed(range(len(step.nodes))):  # srun reports the last node first
        mine = {r: statuses[r] for r in range(ntasks) if step.node_of(r)[0] == index}
        for line in describe_failures(step.nodes[index], mine):
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
    record_step(record, base_record)
    return max([*exits, *(128 + s for s in signalled)], default=0)


class _NotStarted:
    """A task whose program could not be executed: it ended at once with errno."""

    pid = 0
    stdout: IO[bytes] | None = None
    stderr: IO[bytes] | None = None

    def __init__(self, status: int) -> None:
        self.status = status

    def wait(self) -> int:
        return self.status


_Task = subprocess.Popen[bytes] | _NotStarted


def _kill_all(procs: Sequence[_Task]) -> None:
    for p in procs:
        if p.pid:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)


def main(argv: Sequence[str] | None = None) -> int:
    """The `srun` command."""
    args = sys.argv[1:] if argv is None else list(argv)
    if "SLURM_JOB_ID" not in os.environ:  # allocate for this one step, as srun does
        from gateway.cli.salloc_cmd import srun_outside_a_job

        return srun_outside_a_job(args)
    try:
        return run_step(args, dict(os.environ))
    except SrunExit as exc:
        for line in exc.lines:
            sys.stderr.write(line + "\n")
        return exc.status
    except SrunError as exc:
        sys.stderr.write(f"srun: error: {exc}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
