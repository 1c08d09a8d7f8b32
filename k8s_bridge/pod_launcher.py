#!/usr/bin/env python3
"""srun across a gang's pods, and the entry point of the launcher (runs inside job pods).

Shipped with pod_launch_plan.py in the namespace's launcher ConfigMap (launch.py mounts it
at /caldera/launch/launcher.py and as /caldera/launch/bin/srun, first in PATH), so it
imports only the standard library and the files shipped beside it, never the caldera
package. Three roles:

- `launcher.py init CMD...`: PID 1 of rank 0, running the batch script (pod_init.py).
- `launcher.py agent`: every rank but 0, running srun's tasks on its node (pod_agent.py).
- `launcher.py signal ...`: scancel's signals, run in rank 0 by the API's exec (pod_signal.py).
- `srun ...` on rank 0 (the batch script's pod): lays the step out on the allocation as
  Slurm 22.05's srun (pod_launch_plan.py), gives each task SLURM_PROCID/LOCALID/NODEID/
  STEP_ID..., runs the tasks of its own node itself and the others through their node's
  agent, prints every task's output (`-l` labels), srun's failure lines, and exits with the
  highest task status (128+N for a signal). Open MPI's mpirun, seeing SLURM_JOB_ID, starts
  its orted daemons with this srun (plm slurm).

Rank host names resolve through /caldera/job/hosts (`<ip> <name>` lines), which the backend
writes into the job's root ConfigMap once every rank has a pod IP (launch.hosts_text).

The frames and the proof of the token are pod_wire.py's (shipped beside this file).
"""

from __future__ import annotations

import abc
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

if os.path.isdir("/caldera/launch/lib/k8s_bridge"):  # in a pod: the modules beside us
    sys.path.insert(0, "/caldera/launch/lib")
from containers.multi_prog import MultiProgError, multi_prog
from containers.srun_claim import (
    JOB_GPUS_VAR,
    STEP_GPU_VARS,
    claim_step,
    gpu_env,
    job_share,
    step_ask,
)
from containers.srun_options import umask_text
from containers.step_alloc import JobShare
from containers.step_book import Claimed
from containers.step_rules import recorded_state, recorded_status
from k8s_bridge.pod_agent import PORT, TOKEN_PATH, agent, killpg, read_token
from k8s_bridge.pod_init import BOOK, SETTINGS_PATH, step_dir
from k8s_bridge.pod_init import run as run_init
from k8s_bridge.pod_launch_plan import (
    UNSUPPORTED,
    SrunExit,
    counts,
    describe_failures,
    expand,
    parse,
    parse_hosts,
    plan,
    srun_status,
    task_env,
    task_umask,
)
from k8s_bridge.pod_signal import FORWARDED, limit_main
from k8s_bridge.pod_signal import main as signal_main
from k8s_bridge.pod_step_files import record_step, task_files
from k8s_bridge.pod_wire import (
    AUTH,
    ERR,
    EXIT,
    FAIL,
    HELLO,
    OUT,
    REQUEST,
    SIGNAL,
    ProtocolError,
    frame,
    proof,
    read_frame,
)

HOSTS_PATH = "/caldera/job/hosts"
# kept for the tasks when they come before the tasks exist (the others: see FORWARDED)
_QUEUED: tuple[int, ...] = (signal.SIGUSR1, signal.SIGUSR2)

# --- srun -------------------------------------------------------------------------------


def addresses(names: Sequence[str], wait_s: float, path: str = HOSTS_PATH) -> dict[str, str]:
    """Each rank's pod IP, waiting for the backend to write them (once per job)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with open(path) as f:
                hosts = parse_hosts(f.read())
        except OSError:
            hosts = {}
        missing = [n for n in names if n not in hosts]
        if not missing:
            return hosts
        if time.monotonic() > deadline:
            raise SrunExit([f"srun: error: no address for {', '.join(missing)} in {path}"])
        time.sleep(0.5)


class _Output:
    """srun's stdout and stderr: the tasks' bytes as they come, or whole lines with the
    task's `-l` label; a task's stream that -o/-e names goes to its file as it is."""

    def __init__(
        self, label_width: int | None, files: Mapping[tuple[int, int], BinaryIO] | None = None
    ) -> None:
        self.width, self.lock = label_width, threading.Lock()
        self.partial: dict[tuple[int, int], bytes] = {}
        self.files = files or {}

    def write(self, rank: int, fd: int, data: bytes) -> None:
        sink = self.files.get((rank, fd)) or (sys.stdout.buffer if fd == 1 else sys.stderr.buffer)
        with self.lock:
            if self.width is None or (rank, fd) in self.files:
                sink.write(data)
            else:
                lines = (self.partial.pop((rank, fd), b"") + data).split(b"\n")
                if lines[-1]:
                    self.partial[(rank, fd)] = lines[-1]
                prefix = f"{rank:0{self.width}d}: ".encode()
                sink.write(b"".join(prefix + line + b"\n" for line in lines[:-1]))
            sink.flush()

    def close(self, rank: int) -> None:
        for fd in (1, 2):
            rest = self.partial.pop((rank, fd), b"")
            if rest:
                self.write(rank, fd, rest + b"\n")


class _Task(abc.ABC):
    """A task's signals: one sent before the task has started waits for its start, as srun
    forwards what it gets while the step is still being launched (--signal's warning may
    come while srun waits for the ranks' addresses)."""

    def __init__(self) -> None:
        self._signals = threading.Lock()
        self._started = False
        self._pending: list[int] = []

    def signal(self, signum: int) -> None:
        with self._signals:
            if not self._started:
                self._pending.append(signum)
                return
        self._deliver(signum)

    def _begun(self) -> None:
        with self._signals:
            self._started = True
            pending, self._pending = self._pending, []
        for signum in pending:
            self._deliver(signum)

    @abc.abstractmethod
    def _deliver(self, signum: int) -> None:
        """Send the signal to the started task."""


class Remote(_Task):
    """One task through its node's agent."""

    sock: socket.socket | None = None

    def __init__(self, address: tuple[str, int], token: bytes, connect_s: float = 60.0) -> None:
        super().__init__()
        self.address, self.token, self.connect_s = address, token, connect_s
        self.lock = threading.Lock()

    def _connect(self) -> socket.socket:
        deadline = time.monotonic() + self.connect_s
        while True:  # the agent may still be starting in a pod that just began
            try:
                sock = socket.create_connection(self.address, timeout=10)
                sock.settimeout(None)
                return sock
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def send(self, kind: bytes, payload: bytes = b"") -> None:
        with self.lock:
            if self.sock is not None:
                self.sock.sendall(frame(kind, payload))

    def run(
        self, argv: Sequence[str], env: Mapping[str, str], cwd: str, out: _Output, rank: int
    ) -> int:
        self.sock = self._connect()
        self.rfile = self.sock.makefile("rb")
        kind, nonce = read_frame(self.rfile)
        if kind != HELLO:
            raise ProtocolError("the agent did not greet")
        body = json.dumps({"argv": list(argv), "env": dict(env), "cwd": cwd}).encode()
        self.send(AUTH, proof(self.token, nonce, body))
        self.send(REQUEST, body)
        self._begun()
        try:
            while True:
                kind, payload = read_frame(self.rfile)
                if kind in (OUT, ERR):
                    out.write(rank, 1 if kind == OUT else 2, payload)
                elif kind == EXIT:
                    return int(json.loads(payload)["status"])
                elif kind == FAIL:
                    raise ProtocolError(payload.decode(errors="replace"))
        finally:
            self.sock.close()
            self.sock = None

    def _deliver(self, signum: int) -> None:
        with contextlib.suppress(OSError):
            self.send(SIGNAL, str(signum).encode())


class Local(_Task):
    """One task in this pod (the node srun runs on)."""

    proc: subprocess.Popen[bytes] | None = None

    def run(
        self, argv: Sequence[str], env: Mapping[str, str], cwd: str, out: _Output, rank: int
    ) -> int:
        try:
            self.proc = subprocess.Popen(
                list(argv),
                env=dict(env),
                cwd=cwd,
                stdin=None if rank == 0 else subprocess.DEVNULL,  # srun's stdin: task 0's
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                umask=task_umask(env),
            )
        except OSError as exc:
            node = env.get("SLURMD_NODENAME", "")
            line = f"slurmstepd-{node}: error: execve(): {argv[0]}: {exc.strerror}\n"
            out.write(rank, 2, line.encode())
            return (exc.errno or 1) << 8
        proc = self.proc
        self._begun()

        def pump(pipe: Any, fd: int) -> None:
            for chunk in iter(lambda: pipe.read1(65536), b""):
                out.write(rank, fd, chunk)

        pumps = [
            threading.Thread(target=pump, args=(p, fd), daemon=True)
            for p, fd in ((proc.stdout, 1), (proc.stderr, 2))
        ]
        for t in pumps:
            t.start()
        code = proc.wait()
        for t in pumps:
            t.join()
        return (-code) & 0x7F if code < 0 else (code & 0xFF) << 8

    def _deliver(self, signum: int) -> None:
        if self.proc is not None:
            killpg(self.proc.pid, signum)


def _claim(
    opts: Mapping[str, str | None],
    env: Mapping[str, str],
    nodes: list[str],
    layout: list[int],
    cpt: int,
) -> Claimed | int:
    """The step's CPUs and memory among the job's running steps, as slurmctld shares them
    (containers/srun_claim.py: waits with srun's lines while they are held), in the book
    of this pod's sruns; srun's exit status if it gives up."""
    book = os.path.join(step_dir(), BOOK)
    os.makedirs(book, exist_ok=True)
    job_nodes = expand(env.get("SLURM_JOB_NODELIST", ""))
    try:
        cpus = counts(env.get("SLURM_JOB_CPUS_PER_NODE", ""))
    except ValueError:
        cpus = []
    share = job_share(job_nodes, cpus, env) or JobShare(
        tuple(nodes), tuple(t * cpt for t in layout), None
    )
    ask = step_ask(layout, cpt, opts, expand(opts.get("nodelist") or ""), env)
    job_id = env.get("SLURM_JOB_ID", "0")
    return claim_step(
        Path(book), share, ask, opts, job_id, lambda n, _: {"step_id": str(n), "state": "RUNNING"}
    )


def _mark_step(step_id: int, first_node: str) -> int:
    """The step's directory names this srun and the step's first node (`pid`), for
    scancel's signals to it and the init's lines at the job's end (pod_init.running_steps)."""
    base = os.path.join(step_dir(), str(step_id))
    os.makedirs(base, exist_ok=True)
    with contextlib.suppress(OSError), open(os.path.join(base, "pid"), "w") as f:
        f.write(f"{os.getpid()} {first_node}\n")
    return step_id


def srun(argv: Sequence[str], env: Mapping[str, str]) -> int:
    """Run one step over the gang; srun's exit status."""
    early: list[int] = []  # USR1/USR2 before the tasks exist (--signal): theirs once they do
    for sig in _QUEUED:
        signal.signal(sig, lambda signum, _: early.append(signum))
    opts, command = parse(argv, env)
    for name in UNSUPPORTED:
        if name in opts:
            raise SrunExit([f"srun: error: --{name} is not supported in Kubernetes jobs"])
    nodes, layout, cpt, warnings = plan(opts, env)
    for line in warnings:
        sys.stderr.write(line + "\n")
    sys.stderr.flush()
    claimed = _claim(opts, env, nodes, layout, cpt)
    if isinstance(claimed, int):
        return claimed
    try:
        nodes = list(claimed.grant.hold.nodes)
        return _run(opts, command, env, nodes, layout, cpt, claimed, early)
    finally:
        claimed.close()


def _run(
    opts: Mapping[str, str | None],
    command: Sequence[str],
    env: Mapping[str, str],
    nodes: list[str],
    layout: list[int],
    cpt: int,
    claimed: Claimed,
    early: list[int],
) -> int:
    here = env.get("SLURMD_NODENAME", os.uname().nodename)
    env = {"SLURM_UMASK": umask_text(), **env}  # srun's own umask unless the caller set one
    remote = sorted({n for n in nodes if n != here})
    wait_s = float(env.get("CALDERA_HOSTS_WAIT", "300"))
    hosts = addresses(remote, wait_s, env.get("CALDERA_HOSTS_FILE", HOSTS_PATH)) if remote else {}
    token = read_token(env.get("CALDERA_TOKEN_FILE", TOKEN_PATH)) if remote else b""
    port = int(env.get("CALDERA_AGENT_PORT", PORT))
    step_id = _mark_step(claimed.step_id, nodes[0] if nodes else "")
    ntasks = sum(layout)
    cwd = os.path.normpath(os.path.join(os.getcwd(), opts.get("chdir") or "."))  # -D
    tasks: list[Remote | Local] = []
    ranks_node: list[str] = []
    for node, count in zip(nodes, layout, strict=True):
        for _ in range(count):
            tasks.append(Local() if node == here else Remote((hosts[node], port), token))
            ranks_node.append(node)
    statuses = [0] * ntasks
    kill_on_bad = "kill-on-bad-exit" in opts and opts["kill-on-bad-exit"] != "0"
    try:
        programs = multi_prog(command[0], ntasks) if "multi-prog" in opts else None
    except MultiProgError as exc:
        raise SrunExit([f"srun: error: {exc}"]) from None
    files = task_files(opts, ranks_node, nodes, step_id, env, cwd)
    out = _Output(len(str(ntasks - 1)) if "label" in opts else None, files)
    started = time.time()
    # the step's own GPUs in each of its pods (of the pod's 0..k-1), when the job holds some
    gpus = claimed.grant.gpus if JOB_GPUS_VAR in env else None

    def one(rank: int) -> None:
        task_environ = task_env(
            env,
            step_id=step_id,
            nodes=nodes,
            layout=layout,
            rank=rank,
            cpus_per_task=cpt if "cpus-per-task" in opts else None,
            opts=opts,
        )
        if gpus is not None:
            nodeid = nodes.index(ranks_node[rank])
            for name in STEP_GPU_VARS:
                task_environ.pop(name, None)
            task_environ.update(gpu_env(gpus[nodeid] if nodeid < len(gpus) else ()))
        try:
            argv = command if programs is None else programs[rank]
            statuses[rank] = tasks[rank].run(argv, task_environ, cwd, out, rank)
        except (OSError, ProtocolError, EOFError, ValueError) as exc:
            out.write(rank, 2, f"srun: error: task {rank} launch failed: {exc}\n".encode())
            statuses[rank] = 1 << 8
        out.close(rank)
        if statuses[rank] and kill_on_bad:
            for t in tasks:
                t.signal(signal.SIGKILL)

    for sig in FORWARDED:
        signal.signal(sig, lambda signum, _: [t.signal(signum) for t in tasks])
    for signum in early:
        for task in tasks:
            task.signal(signum)
    threads = [threading.Thread(target=one, args=(r,), daemon=True) for r in range(ntasks)]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.5)
    for f in set(files.values()):
        f.close()
    for index in reversed(range(len(nodes))):  # srun reports the last node first
        mine = {r: statuses[r] for r in range(ntasks) if ranks_node[r] == nodes[index]}
        for line in describe_failures(nodes[index], mine):
            sys.stderr.write(line + "\n")
    sys.stderr.flush()
    status = recorded_status(dict(enumerate(statuses)), [nodes.index(n) for n in ranks_node])
    job_nodes = expand(env.get("SLURM_JOB_NODELIST", ""))
    record_step(
        env,
        {
            "step_id": str(step_id),
            "name": opts.get("job-name") or os.path.basename(command[0]),
            "ranks": [job_nodes.index(n) for n in nodes if n in job_nodes],  # NODEIDs
            "ntasks": ntasks,
            "cpus": claimed.grant.alloc_cpus,
            "start_time": round(started, 3),
            "end_time": round(time.time(), 3),
            "exit_code": status,
            "state": recorded_state(status),
            **_held(claimed, gpus),
        },
    )
    return srun_status(statuses)


def _held(claimed: Claimed, gpus: Sequence[Sequence[int]] | None) -> dict[str, object]:
    """The step's GPUs per node for sacct's AllocTRES, as the local runner records them
    (only when the job holds GPUs: the termination message has room for few bytes)."""
    if gpus is None:
        return {}
    counts = [len(g) for g in gpus] or [0] * len(claimed.grant.hold.nodes)
    return {"extra": {"gpus": ",".join(map(str, counts))}}


def main(argv: Sequence[str]) -> int:
    """`srun ...` (by the name it is called), `launcher.py agent` or `launcher.py init`."""
    if os.path.basename(argv[0]) != "srun":
        if argv[1:2] == ["agent"]:
            port = int(os.environ.get("CALDERA_AGENT_PORT", PORT))
            return agent(port, os.environ.get("CALDERA_TOKEN_FILE", TOKEN_PATH))
        if argv[1:2] == ["init"]:
            return run_init(argv[2:], os.environ.get("CALDERA_INIT_FILE", SETTINGS_PATH))
        if argv[1:2] == ["signal"]:
            return signal_main(argv[2:])
        if argv[1:2] == ["limit"]:
            return limit_main(argv[2:])
        sys.stderr.write(
            "usage: srun [options] command... | launcher.py agent|init|signal|limit ...\n"
        )
        return 2
    if "SLURM_JOB_ID" not in os.environ:
        sys.stderr.write("srun: error: not inside a job (SLURM_JOB_ID is not set)\n")
        return 1
    try:
        return srun(argv[1:], dict(os.environ))
    except SrunExit as exc:
        for line in exc.lines:
            (sys.stdout if exc.stdout else sys.stderr).write(line + "\n")
        return exc.status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
