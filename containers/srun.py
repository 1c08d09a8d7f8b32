"""`srun` inside a job of the local backend: runs a step's tasks on the job's nodes.

The step's options and layout are srun's (containers/srun_layout.py: getopt_long, the
nodes and tasks of the allocation, srun's warnings and refusals). A local job's nodes are
virtual nodes of this machine, so every task runs here, with its own node's
SLURMD_NODENAME and its ranks (SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID, SLURM_GTIDS) and
the step's view (SLURM_STEP_*). That is also what OpenMPI's `mpirun` needs: under Slurm it
starts one daemon per node with `srun --ntasks-per-node=1 --nodes=N --nodelist=...`.

The exit status is srun's: 128+N when a signal N (the highest) killed a task, else the
highest exit code; `--kill-on-bad-exit` (`-K`) terminates the step's other tasks once one
fails, with srun's and slurmstepd's lines; tasks' output is relayed in whole lines, as
srun relays it (`-u`: straight through), `-l` labelling each with the task's rank;
`-o/-e/-i` name per-task files; `--multi-prog` runs a program per rank. The step is
recorded in the job's spool (`$CALDERA_STEP_DIR/N.json`) for sacct. `--mpi=pmix` is
exported as SLURM_MPI_TYPE, but no PMIx server is started. Signals SIGINT, SIGTERM, SIGHUP,
SIGQUIT, SIGUSR1 and SIGUSR2 sent to srun are forwarded to every task.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from containers import srun_layout as layout
from containers.multi_prog import MultiProgError, multi_prog
from containers.srun_claim import (
    STEP_GPU_VARS,
    claim_step,
    gpu_env,
    job_share,
    step_ask,
    tres_per_node,
)
from containers.srun_io import (
    KILL_WAIT_VAR,
    describe_failures,
    kill_on_bad_exit,
    record_step,
    relay,
    srun_status,
    step_status,
    task_file,
)
from containers.srun_layout import SrunExit, Step, allocation_from_env, parse, plan_step
from containers.srun_options import step_distribution, umask_text
from containers.srun_revoke import ALLOCATION_VAR, RevocationWatch
from containers.srun_spawn import Spawned
from containers.step_alloc import Grant, JobShare
from containers.step_book import Claimed
from containers.step_rules import ABORTED_SUFFIX, recorded_state
from gateway.compat.hostlist import expand
from gateway.compat.job_env import TaskIds, task_environment
from gateway.model.job import wait_status

__all__ = ["SrunError", "main", "run_step"]

_FORWARDED = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)


# srun's signal manager: TERM, HUP and QUIT end the step, SIGKILL to its tasks (said as
# `forcing job termination`); when the job itself ends (the supervisor told srun first), the
# tasks are left to slurmstepd's SIGTERM and SIGKILL after KillWait, as on the test cluster
_ENDING: dict[int, str] = {signal.SIGTERM: "", signal.SIGHUP: "", signal.SIGQUIT: "srun: Quit\n"}


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
    """The program as slurmstepd execs it (its _build_path): an absolute name as it is, a
    name starting with `.` under the working directory (`./prog` -> `/dir/./prog`), any
    other looked up in PATH's entries (the first that exists and is no directory; empty
    entries are skipped). Tasks see that path as argv[0] (`/usr/bin/ls: cannot access`).
    A name found nowhere stays as it is: execve then takes it relative to the working
    directory, so a script there runs under its bare name."""
    if command.startswith("/"):
        return command
    if command.startswith("."):
        return f"{cwd}/{command}"
    for entry in filter(None, path.split(":")):
        candidate = f"{entry}/{command}"
        if os.path.exists(candidate) and not os.path.isdir(candidate):
            return candidate
    return command


def _start_tasks(
    step: Step,
    step_id: int,
    env: dict[str, str],
    streams: _Streams,
    gpus: _Gpus,
    hold_fd: int | None,
) -> tuple[list[_Task], list[threading.Thread]]:
    """Start every task; each inherits `hold_fd`, the step's lock in the job's step book,
    so the step holds its CPUs while a task runs even if srun is SIGKILLed (slurmstepd
    keeps a step whose srun is gone until its tasks end)."""
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
    dist = step_distribution(opts.get("distribution"), ntasks, len(step.nodes))
    env.setdefault("SLURM_UMASK", umask_text())
    addresses = layout.topology_addresses(env)
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
            distribution=dist,
        )
        task_env.update(layout.node_env(addresses, step.nodes[nodeid]))
        if gpus is not None:  # the step's own GPUs on this node, or none
            for name in STEP_GPU_VARS:
                task_env.pop(name, None)
            task_env.update(gpu_env(gpus[nodeid] if nodeid < len(gpus) else ()))
        try:
            out = streams.open("output", rank, "wb")
            err = streams.open("error", rank, "wb") if opts.get("error") else out
            stdin = streams.open("input", rank, "rb")
        except OSError as exc:
            _kill_all(procs)
            raise SrunError(f"{exc.filename}: {exc.strerror}") from exc
        # srun relays its tasks' output in whole lines (-u: as it comes, unlabelled)
        piped = out is None and ("label" in opts or "unbuffered" not in opts)
        proc: _Task
        stdout = subprocess.PIPE if piped else out
        stderr = subprocess.PIPE if piped and err is None else err
        try:
            if commands[rank] and "/" not in commands[rank][0]:  # execve's, in the cwd
                proc = Spawned(commands[rank], task_env, stdin, stdout, stderr)
            else:
                proc = subprocess.Popen(
                    commands[rank],
                    env=task_env,
                    stdin=stdin,
                    stdout=stdout,
                    stderr=stderr,
                    process_group=0,
                    pass_fds=() if hold_fd is None else (hold_fd,),
                )
        except OSError as exc:  # as slurmstepd's task: the error, then exit(errno)
            sys.stderr.write(
                f"slurmstepd-{step.nodes[nodeid]}: error: execve(): {commands[rank][0]}: "
                f"{exc.strerror}\n"
            )
            proc = _NotStarted(exc.errno or 1)
        procs.append(proc)
        if piped:
            prefix = f"{rank:0{width}d}: ".encode() if "label" in opts else b""
            for pipe, sink in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr)):
                if pipe is not None:
                    args = (pipe, sink.fileno(), prefix, lock)
                    t = threading.Thread(target=relay, args=args, daemon=True)
                    t.start()
                    pumps.append(t)
    return procs, pumps


def run_step(argv: Sequence[str], env: dict[str, str]) -> int:
    """Run one step; returns srun's exit status."""
    step = plan_step(argv, env)
    for line in step.warnings:
        sys.stderr.write(line + "\n")
    step_dir_text = env.get("CALDERA_STEP_DIR")
    ntasks = step.ntasks
    base_record: dict[str, Any] = {
        "name": step.options.get("job-name") or os.path.basename(step.command[0]),
        "ntasks": ntasks,
        "end_time": None,
        "exit_code": 0,
        "state": "RUNNING",
    }

    def first_record(step_id: int, grant: Grant) -> dict[str, Any]:
        base_record.update(step_id=str(step_id), nodes=list(grant.hold.nodes))
        base_record.update(cpus=grant.alloc_cpus, start_time=time.time())
        extra = {"srun_pid": str(os.getpid()), "dist": _distribution(step)}
        base_record["extra"] = {**extra, "mem_mb": str(grant.alloc_mem_mb)}
        if tres := tres_per_node(step.options):
            base_record["extra"]["tres_per_node"] = tres
        if share.gpus:
            counts = [len(g) for g in grant.gpus] or [0] * len(grant.hold.nodes)
            base_record["extra"]["gpus"] = ",".join(map(str, counts))
        return base_record

    claimed: Claimed | None = None
    record: Path | None = None  # none outside a local job's spool: the step is not recorded
    share = _job_share(step, env)
    gpus: _Gpus = None
    if step_dir_text and Path(step_dir_text).is_dir():
        outcome = claim_step(
            Path(step_dir_text),
            share,
            step_ask(step.tasks_per_node, step.cpus_per_task, step.options, _named(step), env),
            step.options,
            env.get("SLURM_JOB_ID", "0"),
            first_record,
        )
        if isinstance(outcome, int):
            return outcome
        claimed, step_id, record = outcome, outcome.step_id, outcome.record
        step = replace(step, nodes=outcome.grant.hold.nodes)
        gpus = outcome.grant.gpus if share.gpus else None
    else:
        step_id = int(env.get("SLURM_STEP_ID", "-1")) + 1
        base_record.update(step_id=str(step_id), nodes=list(step.nodes), start_time=time.time())
        base_record.update(cpus=ntasks * step.cpus_per_task)
    sys.stdout.flush()
    sys.stderr.flush()
    streams = _Streams(step, step_id, env)
    forwarded: list[int] = []  # signals srun itself got (the job ending, as a rule)
    try:
        try:
            hold_fd = None if claimed is None else claimed.lock_fd
            procs, pumps = _start_tasks(step, step_id, env, streams, gpus, hold_fd)
        except SrunError:  # no task started: the step ended as it began
            base_record.update(end_time=time.time(), exit_code=1 << 8, state="FAILED")
            record_step(record, base_record)
            raise
        base_record["task_pids"] = [p.pid for p in procs]
        record_step(record, base_record)

        told_path = Path(step_dir_text) / f"{step_id}{ABORTED_SUFFIX}" if step_dir_text else None

        def forward(signum: int, frame: Any) -> None:
            if signum == signal.SIGCONT:  # the job's end (or its resume) reaches srun too
                os.write(2, b"srun: got SIGCONT\n")
                return
            forwarded.append(signum)
            if signum not in _ENDING:
                _signal_all(procs, signum)
                return
            os.write(2, f"{_ENDING[signum]}srun: forcing job termination\n".encode())
            if told_path is None or not told_path.exists():  # not the job's end: srun's own
                _signal_all(procs, signal.SIGKILL)

        for sig in (*_FORWARDED, signal.SIGCONT):
            signal.signal(sig, forward)
        watch = _watch_allocation(step, step_id, procs, env)
        statuses, reported, told = _wait_tasks(step, step_id, procs, env)
        revoked = watch is not None and watch.revoked
        aborted = told_path is not None and told_path.exists()
        if watch is not None:
            watch.stop()
        deadline = time.monotonic() + 5  # a task's children may hold its pipes open
        for t in pumps:
            t.join(timeout=max(deadline - time.monotonic(), 0))
    finally:
        streams.close()
    for line in told:
        sys.stderr.write(line + "\n")
    for index in reversed(range(len(step.nodes))):  # srun reports the last node first
        mine = {
            r: statuses[r]
            for r in range(ntasks)
            if step.node_of(r)[0] == index and r not in reported
        }
        for line in describe_failures(step.nodes[index], mine):
            sys.stderr.write(line + "\n")
    # a task ended by SIGTERM or SIGKILL that srun did not pass on (slurmctld ending the
    # whole job tells srun first, and it then says nothing)
    if (
        not forwarded
        and not revoked
        and not aborted  # scancel ID.STEP: srun was told, as slurmctld tells Slurm's
        and any(s & 0x7F in (signal.SIGTERM, signal.SIGKILL) for s in statuses.values())
    ):
        sys.stderr.write(f"srun: Force Terminated StepId={_step_ident(env, step_id)}\n")
    sys.stderr.flush()
    status = step_status(step, statuses)
    base_record.update(end_time=time.time(), exit_code=status, state=recorded_state(status))
    record_step(record, base_record)
    if claimed is not None:
        claimed.close()  # the hold is free: a waiting srun may take it
    return srun_status(statuses)


_Gpus = tuple[tuple[int, ...], ...] | None  # the step's GPUs per node; None: as the job's


def _job_share(step: Step, env: dict[str, str]) -> JobShare:
    """What the job holds (its whole allocation); the step's own nodes when the batch
    environment does not say."""
    alloc = allocation_from_env(env)
    share = job_share(alloc.nodes, alloc.cpus_per_node, env)
    if share is None:
        cpus = tuple(t * step.cpus_per_task for t in step.tasks_per_node)
        return JobShare(step.nodes, cpus, None)
    return share


def _named(step: Step) -> tuple[str, ...]:
    """The nodes srun's -w names."""
    return tuple(expand(step.options["nodelist"] or "")) if step.options.get("nodelist") else ()


def _distribution(step: Step) -> str:
    """scontrol's Dist: the first part of SLURM_DISTRIBUTION, capitalised (`Cyclic`)."""
    asked = step.options.get("distribution")
    return step_distribution(asked, step.ntasks, len(step.nodes)).split(":")[0].capitalize()


def _watch_allocation(
    step: Step, step_id: int, procs: Sequence[_Task], env: dict[str, str]
) -> RevocationWatch | None:
    """In salloc's allocation (not a batch job's): end the step if the job is revoked."""
    job_id = env.get("SLURM_JOB_ID", "")
    if not job_id or env.get(ALLOCATION_VAR) != job_id:  # (a batch job inherits the name)
        return None
    return RevocationWatch(
        job_id,
        _step_ident(env, step_id),
        step.nodes[0],
        float(env.get(KILL_WAIT_VAR, "30")),
        lambda grace: _terminate(procs, grace),
    ).start()


def _step_ident(env: dict[str, str], step_id: int) -> str:
    return f"{env.get('SLURM_JOB_ID', '0')}.{step_id}"


def _wait_tasks(
    step: Step, step_id: int, procs: Sequence[_Task], env: dict[str, str]
) -> tuple[dict[int, int], set[int], list[str]]:
    """Every task's wait status, the ranks whose failure is told, and what srun tells of
    the step's end. With --kill-on-bad-exit the first task to fail has srun terminate the
    step, as slurmstepd does: SIGTERM to the tasks still running (SIGKILL after KillWait),
    told as srun tells it (the failure, `Terminating StepId`, and the step's first node's
    CANCELLED line when tasks still ran there: the test cluster's failure on node04 left
    node03's line, one on node03 with no other task there none). The lines are written
    once the tasks are gone: they share srun's stderr, where a line would split theirs."""
    ended: queue.Queue[tuple[int, int]] = queue.Queue()
    for rank, p in enumerate(procs):
        threading.Thread(target=lambda r=rank, q=p: ended.put((r, q.wait())), daemon=True).start()
    kill = kill_on_bad_exit(step.options, env)
    statuses: dict[int, int] = {}
    reported: set[int] = set()
    told: list[str] = []

    def take(rank: int, code: int) -> int:
        statuses[rank] = wait_status(signal=-code) if code < 0 else wait_status(exit_code=code)
        return statuses[rank]

    while len(statuses) < len(procs):
        rank, code = ended.get()
        if not take(rank, code) or not kill or reported:
            continue
        reported.add(rank)
        with contextlib.suppress(queue.Empty):  # the tasks that ended meanwhile are done
            while True:
                take(*ended.get_nowait())
        running = [r for r in range(len(procs)) if r not in statuses and procs[r].pid]
        grace = float(env.get(KILL_WAIT_VAR, "30"))
        doomed = [procs[r] for r in running]
        threading.Thread(target=_terminate, args=(doomed, grace), daemon=True).start()
        told += describe_failures(step.nodes[step.node_of(rank)[0]], {rank: statuses[rank]})
        ident = _step_ident(env, step_id)
        told.append(f"srun: launch/slurm: _step_signal: Terminating StepId={ident}")
        if any(step.node_of(r)[0] == 0 for r in running):
            first, stamp = step.nodes[0], datetime.now().strftime("%Y-%m-%dT%H:%M:%S")
            told.append(
                f"slurmstepd-{first}: error: *** STEP {ident} ON {first} CANCELLED AT {stamp} ***"
            )
    return statuses, reported, told


def _terminate(procs: Sequence[_Task], grace: float) -> None:
    """SIGCONT and SIGTERM to each task's process group, SIGKILL to those left after
    `grace` seconds (slurmstepd's order, KillWait apart)."""
    for sig in (signal.SIGCONT, signal.SIGTERM):
        _signal_all(procs, sig)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if all(isinstance(p, _NotStarted) or p.poll() is not None for p in procs):
            return
        time.sleep(0.05)
    _signal_all(procs, signal.SIGKILL)


class _NotStarted:
    """A task whose program could not be executed: it ended at once with errno."""

    pid = 0
    stdout: IO[bytes] | None = None
    stderr: IO[bytes] | None = None

    def __init__(self, status: int) -> None:
        self.status = status

    def wait(self) -> int:
        return self.status


_Task = subprocess.Popen[bytes] | Spawned | _NotStarted


def _kill_all(procs: Sequence[_Task]) -> None:
    _signal_all(procs, signal.SIGKILL)


def _signal_all(procs: Sequence[_Task], sig: int) -> None:
    for p in procs:
        if p.pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, sig)


def _said(exc: SrunExit) -> int:
    """Print srun's lines (stdout for --help, --usage, --version); its exit status."""
    out = sys.stdout if exc.stdout else sys.stderr
    for line in exc.lines:
        out.write(line + "\n")
    return exc.status


def main(argv: Sequence[str] | None = None) -> int:
    """The `srun` command."""
    args = sys.argv[1:] if argv is None else list(argv)
    if "SLURM_JOB_ID" not in os.environ:  # allocate for this one step, as srun does
        try:
            parse(args)
        except SrunExit as exc:
            if exc.stdout:  # --help, --usage, --version answer before any allocation
                return _said(exc)
        from gateway.cli.salloc_cmd import srun_outside_a_job

        return srun_outside_a_job(args)
    try:
        return run_step(args, dict(os.environ))
    except SrunExit as exc:
        return _said(exc)
    except SrunError as exc:
        sys.stderr.write(f"srun: error: {exc}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
