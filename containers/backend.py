"""LocalBackend: Slurm's batch jobs on this one machine (the embedded default backend).

Each job gets a detached supervisor (containers.supervisor) and a spool directory
(containers.spool). The backend itself keeps no state that matters: everything it reports is
read from the spool, so a new LocalBackend over the same spool (after the gateway was killed)
re-attaches to running supervisors through `reconcile`.
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import os
import pwd
import shlex
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from containers.docker_runner import parse_mounts
from containers.interpreter import shared_python
from containers.proc import login_environment
from containers.spool import (
    ContainerPlan,
    JobPlan,
    JobResult,
    SupervisorInfo,
    read_json,
    read_step,
    write_json,
)
from gateway.compat.duration import INFINITE
from gateway.compat.filename import NO_TASK, PatternContext, default_output, expand_for_open
from gateway.compat.job_env import batch_environment
from gateway.model.backend import BackendError, BackendEvent, EventKind, Launch
from gateway.model.cluster import ClusterState, Gpu, Node, NodeState, Partition
from gateway.model.job import Job, Step
from gateway.model.state import JobState, Reason

__all__ = ["STEP_DIR_VAR", "LocalBackend", "user_and_group"]

STEP_DIR_VAR = "CALDERA_STEP_DIR"  # where srun records steps (set in every job's environment)
_REPO_ROOT = Path(__file__).resolve().parent.parent
_SPAWN_GRACE_S = 30.0  # a supervisor that never wrote supervisor.json by then is lost


def _docker_host_from_env() -> str | None:
    return os.environ.get("CALDERA_DOCKER_HOST") or os.environ.get("DOCKER_HOST") or None


@dataclass
class _Tracked:
    started: bool = False
    finished: bool = False
    steps: dict[str, tuple[str, float | None]] = field(default_factory=dict)
    cpus: int = 0


class LocalBackend:
    """The Backend protocol for one machine: jobs as supervised processes or containers."""

    name = "local"

    def __init__(
        self,
        spool_dir: str | os.PathLike[str],
        *,
        node_name: str | None = None,
        cpus: int | None = None,
        memory_mb: int | None = None,
        gpus: Sequence[Gpu] = (),
        partition: str = "local",
        cluster: str = "local",
        kill_wait: float = 30.0,
        time_scale: float = 1.0,
        poll_interval: float = 0.05,
        docker_host: str | None = None,
        switch_path: Sequence[str] = (),
        def_mem_per_cpu_mb: int | None = None,
        slurm_conf: str | None = None,
        python: str = sys.executable,
        srun_python: str | None = None,
    ) -> None:
        """
        spool_dir: where job directories live (created; 0711 so jobs can reach their files).
        node_name/cpus/memory_mb/gpus: what describe() reports (default: this machine).
        kill_wait: seconds between SIGTERM and SIGKILL (Slurm's KillWait).
        time_scale: seconds of real time per second of job time (time limits and --signal
            lead times); 1.0 in production, small in tests.
        docker_host: Docker API URL for jobs with an image (default CALDERA_DOCKER_HOST, then
            DOCKER_HOST).
        """
        self.spool = Path(spool_dir).resolve()
        self.jobs_dir = self.spool / "jobs"
        self.node_name = node_name or socket.gethostname().split(".")[0]
        self.cpus = cpus or os.cpu_count() or 1
        self.memory_mb = memory_mb or psutil.virtual_memory().total // (1024 * 1024)
        self.gpus = tuple(gpus)
        self.partition = partition
        self.cluster = cluster
        self.kill_wait = kill_wait
        self.time_scale = time_scale
        self.poll_interval = poll_interval
        self.docker_host = docker_host
        self.switch_path = tuple(switch_path)
        self.def_mem_per_cpu_mb = def_mem_per_cpu_mb
        self.slurm_conf = slurm_conf
        self.python = python
        self.srun_python = srun_python or shared_python(python)
        self._tracked: dict[tuple[int, int], _Tracked] = {}  # (job id, restart count)
        for path in (self.spool, self.jobs_dir, self.spool / "bin"):
            path.mkdir(parents=True, exist_ok=True)
            if os.geteuid() == 0:
                path.chmod(0o711)
        self._write_srun_shim()

    # --- Backend protocol ---------------------------------------------------------------------

    def describe(self) -> ClusterState:
        busy = sum(t.cpus for t in self._tracked.values() if t.started and not t.finished)
        state = (
            NodeState.IDLE
            if busy == 0
            else (NodeState.ALLOCATED if busy >= self.cpus else NodeState.MIXED)
        )
        gres = (("gpu", None, len(self.gpus)),) if self.gpus else ()
        node = Node(
            name=self.node_name,
            cpus=self.cpus,
            memory_mb=self.memory_mb,
            state=state,
            partitions=(self.partition,),
            gres=gres,
            gpus=self.gpus,
            switch=self.switch_path[-1] if self.switch_path else None,
        )
        part = Partition(name=self.partition, nodes=(self.node_name,), default=True)
        return ClusterState(name=self.cluster, nodes=(node,), partitions=(part,))

    def submit(self, launch: Launch) -> str:
        job = launch.job
        run = job.restart_count
        backend_id = self.backend_id(job.job_id)
        jobdir = self.job_dir(job.job_id, run)
        lock_path = self.jobs_dir / f".{jobdir.name}.lock"
        with open(lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if (jobdir / "spawned").exists():
                self._tracked.setdefault((job.job_id, run), _Tracked(cpus=_cpus(launch)))
                return backend_id
            plan = self._plan(launch, jobdir)
            self._prepare(jobdir, launch, plan)
            (jobdir / "spawned").write_text(f"{time.time()}\n")
            self._spawn(jobdir)
        self._tracked[(job.job_id, run)] = _Tracked(cpus=_cpus(launch))
        return backend_id

    def cancel(self, job: Job, signal: int | None = None, batch_only: bool = False) -> None:
        jobdir = self.job_dir(job.job_id, job.restart_count)
        if not (jobdir / "spawned").exists():
            raise BackendError(f"job {job.job_id} is not known to the local backend")
        if (jobdir / "result.json").exists():
            return
        request: dict[str, object] = {"action": "cancel"}
        if signal is not None:
            request = {"action": "signal", "signal": int(signal), "batch_only": batch_only}
        write_json(jobdir / "ctl" / f"{time.time_ns()}.json", request, mode=0o600)
        if signal is None:
            info = self._supervisor(jobdir)
            if info is not None and self._alive(info):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(info.pid, 15)

    def update_time_limit(self, job: Job, minutes: int) -> None:
        """scontrol update TimeLimit= of a running job: its supervisor moves the deadline
        (counted from the start, as Slurm counts it). A job not started yet needs nothing:
        it starts with the gateway's record."""
        jobdir = self.job_dir(job.job_id, job.restart_count)
        if not (jobdir / "spawned").exists() or (jobdir / "result.json").exists():
            return
        limit_s = None if minutes in (0, INFINITE) else minutes * 60 * self.time_scale
        request = {"action": "time_limit", "seconds": limit_s}
        write_json(jobdir / "ctl" / f"{time.time_ns()}.json", request, mode=0o600)

    def poll(self) -> list[BackendEvent]:
        events: list[BackendEvent] = []
        for (job_id, run), tracked in list(self._tracked.items()):
            if tracked.finished:
                continue
            events.extend(self._events(job_id, tracked, run))
        return events

    def reconcile(self, jobs: Sequence[Job]) -> list[BackendEvent]:
        events: list[BackendEvent] = []
        for job in jobs:
            run = job.restart_count
            jobdir = self.job_dir(job.job_id, run)
            if not (jobdir / "spawned").exists():
                events.append(
                    BackendEvent(
                        job_id=job.job_id,
                        kind=EventKind.LOST,
                        time=time.time(),
                        state=JobState.NODE_FAIL,
                        reason=Reason.NONE,
                        run=run,
                        message="not known to the local backend",
                    )
                )
                continue
            plan = read_json(jobdir / "plan.json")
            cpus = int(plan.get("cpus", 0)) if isinstance(plan, dict) else 0
            tracked = _Tracked(cpus=cpus)
            self._tracked[(job.job_id, run)] = tracked
            events.extend(self._events(job.job_id, tracked, run))
        return events

    # --- extras -------------------------------------------------------------------------------

    def backend_id(self, job_id: int) -> str:
        return f"{self.node_name}:{job_id}"

    def job_dir(self, job_id: int, run: int = 0) -> Path:
        """The spool directory of one run of a job (a requeued job runs again: run > 0)."""
        return self.jobs_dir / (str(job_id) if run == 0 else f"{job_id}.{run}")

    def steps(self, job_id: int, run: int = 0) -> list[Step]:
        """Every step recorded for a job (batch first, then srun steps in order)."""
        steps = [
            s
            for p in (self.job_dir(job_id, run) / "steps").glob("*.json")
            if (s := read_step(p, job_id)) is not None
        ]
        return sorted(steps, key=lambda s: (s.step_id != "batch", _step_key(s.step_id)))

    def result(self, job_id: int, run: int = 0) -> JobResult | None:
        """How the job ended, if it has (read from the spool, no event consumed)."""
        return JobResult.from_json(read_json(self.job_dir(job_id, run) / "result.json"))

    def forget(self, job_id: int, run: int = 0) -> bool:
        """Remove a finished job's spool directory (once the gateway stored its result)."""
        jobdir = self.job_dir(job_id, run)
        if not (jobdir / "result.json").exists():
            return False
        shutil.rmtree(jobdir, ignore_errors=True)
        (self.jobs_dir / f".{jobdir.name}.lock").unlink(missing_ok=True)
        self._tracked.pop((job_id, run), None)
        return True

    def supervisor_pid(self, job_id: int, run: int = 0) -> int | None:
        info = self._supervisor(self.job_dir(job_id, run))
        return info.pid if info is not None and self._alive(info) else None

    # --- events -------------------------------------------------------------------------------

    def _events(self, job_id: int, tracked: _Tracked, run: int = 0) -> list[BackendEvent]:
        jobdir = self.job_dir(job_id, run)
        events: list[BackendEvent] = []
        info = self._supervisor(jobdir)
        nodes = (self.node_name,)
        bid = self.backend_id(job_id)
        if info is not None and not tracked.started:
            tracked.started = True
            events.append(
                BackendEvent(
                    job_id=job_id,
                    kind=EventKind.STARTED,
                    time=info.start_time,
                    state=JobState.RUNNING,
                    nodes=nodes,
                    backend_id=bid,
                    run=run,
                )
            )
        events.extend(self._step_events(job_id, tracked, run))
        result = self.result(job_id, run)
        if result is None and not self._running(jobdir, info):
            result = self.result(job_id, run)  # it may have finished in between
            if result is None:
                tracked.finished = True
                events.append(
                    BackendEvent(
                        job_id=job_id,
                        kind=EventKind.LOST,
                        time=time.time(),
                        state=JobState.NODE_FAIL,
                        reason=Reason.NONE,
                        nodes=nodes,
                        backend_id=bid,
                        run=run,
                        message="supervisor ended without a result",
                    )
                )
                return events
        if result is not None:
            events.extend(self._step_events(job_id, tracked, run))
            tracked.finished = True
            events.append(
                BackendEvent(
                    job_id=job_id,
                    kind=EventKind.FINISHED,
                    time=result.end_time,
                    state=result.state,
                    reason=result.reason,
                    exit_code=result.exit_code,
                    derived_exit_code=result.derived_exit_code,
                    nodes=nodes,
                    backend_id=bid,
                    message=result.message,
                    run=run,
                )
            )
        return events

    def _step_events(self, job_id: int, tracked: _Tracked, run: int = 0) -> list[BackendEvent]:
        events: list[BackendEvent] = []
        for step in self.steps(job_id, run):
            sig = (step.state.long, step.end_time)
            if tracked.steps.get(step.step_id) == sig:
                continue
            tracked.steps[step.step_id] = sig
            events.append(
                BackendEvent(
                    job_id=job_id,
                    kind=EventKind.STEP,
                    time=step.end_time or step.start_time or time.time(),
                    state=step.state,
                    exit_code=step.exit_code,
                    nodes=step.nodes,
                    step=step,
                    run=run,
                    backend_id=self.backend_id(job_id),
                )
            )
        return events

    def _supervisor(self, jobdir: Path) -> SupervisorInfo | None:
        return SupervisorInfo.from_json(read_json(jobdir / "supervisor.json"))

    @staticmethod
    def _alive(info: SupervisorInfo) -> bool:
        try:
            proc = psutil.Process(info.pid)
            return abs(proc.create_time() - info.create_time) < 0.5 and (
                proc.status() != psutil.STATUS_ZOMBIE
            )
        except psutil.Error:
            return False

    def _running(self, jobdir: Path, info: SupervisorInfo | None) -> bool:
        if info is not None:
            return self._alive(info)
        try:
            spawned = (jobdir / "spawned").stat().st_mtime
        except FileNotFoundError:
            return False
        return time.time() - spawned < _SPAWN_GRACE_S

    # --- submission ---------------------------------------------------------------------------

    def _plan(self, launch: Launch, jobdir: Path) -> JobPlan:
        job, spec = launch.job, launch.job.spec
        if os.geteuid() != 0 and job.uid != os.geteuid():
            raise BackendError(
                f"job {job.job_id}: cannot run as uid {job.uid} "
                f"(the local backend runs as uid {os.geteuid()})"
            )
        here = next((p for p in launch.placement if p.node == self.node_name), None)
        if here is None and launch.placement:
            here = launch.placement[0]
        if here is None:
            raise BackendError(f"job {job.job_id}: no placement")
        login = login_environment(job.user)
        env = batch_environment(
            launch,
            launch.environment,
            node_name=self.node_name,
            node_id=0,
            cluster_name=self.cluster,
            login_env=login,
            switch_path=self.switch_path,
            def_mem_per_cpu_mb=self.def_mem_per_cpu_mb,
            slurm_conf=self.slurm_conf,
        )
        env[STEP_DIR_VAR] = str(jobdir / "steps")
        env["PATH"] = f"{self.spool / 'bin'}:{env.get('PATH', login.get('PATH', '/usr/bin:/bin'))}"
        ctx = PatternContext(
            job_id=job.job_id,
            job_name=spec.name,
            user=job.user,
            workdir=spec.workdir,
            array_job_id=job.array_job_id,
            array_task_id=job.array_task_id if job.array_task_id is not None else NO_TASK,
            node_name=self.node_name,
            node_id=0,
            task_id=0,
        )
        stdout = expand_for_open(spec.stdout or default_output(job.array_task_id is not None), ctx)
        stderr = expand_for_open(spec.stderr, ctx) if spec.stderr else None
        stdin = expand_for_open(spec.stdin, ctx) if spec.stdin else "/dev/null"
        minutes = job.time_limit or (spec.time_limit or 0)
        limit_s = None if minutes in (0, INFINITE) else minutes * 60 * self.time_scale
        signal = None
        if spec.signal is not None and not spec.signal.reservation:
            signal = (
                spec.signal.signal,
                spec.signal.time * self.time_scale,
                spec.signal.batch_only,
            )
        container = None
        if spec.container_image:
            host = self.docker_host or _docker_host_from_env()
            if not host:
                raise BackendError(
                    f"job {job.job_id} asks for image {spec.container_image!r} "
                    "but no Docker API is configured (CALDERA_DOCKER_HOST or "
                    "DOCKER_HOST)"
                )
            container = ContainerPlan(
                image=spec.container_image,
                docker_host=host,
                mounts=parse_mounts(spec.container_mounts),
                workdir=spec.container_workdir,
                name=spec.container_name,
            )
        return JobPlan(
            job_id=job.job_id,
            name=spec.name,
            node=self.node_name,
            user=job.user,
            uid=job.uid,
            gid=job.gid,
            groups=_groups(job.user, job.gid),
            workdir=spec.workdir,
            script=str(jobdir / "slurm_script"),
            args=tuple(spec.script_args),
            env=env,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            open_append=spec.open_mode == "append",
            time_limit_s=limit_s,
            kill_wait_s=self.kill_wait,
            signal=signal,
            memory_limit_mb=_memory_limit(launch, here.memory_mb, here.cpus, len(here.gpus)),
            cpus=here.cpus,
            ntasks=here.tasks or 1,
            poll_interval_s=self.poll_interval,
            container=container,
        )

    def _prepare(self, jobdir: Path, launch: Launch, plan: JobPlan) -> None:
        jobdir.mkdir(exist_ok=True)
        for sub in ("ctl", "steps"):
            (jobdir / sub).mkdir(exist_ok=True)
        root = os.geteuid() == 0
        if root:
            jobdir.chmod(0o711)
            (jobdir / "ctl").chmod(0o700)
        script = jobdir / "slurm_script"
        script.write_text(launch.script)
        script.chmod(0o700)
        if root:
            os.chown(script, plan.uid, plan.gid)
            os.chown(jobdir / "steps", plan.uid, plan.gid)
        (jobdir / "steps").chmod(0o700)
        write_json(jobdir / "plan.json", plan.to_json(), mode=0o600)

    def _spawn(self, jobdir: Path) -> None:
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": _pythonpath()}
        log = open(jobdir / "supervisor.log", "ab")  # noqa: SIM115 - handed to the child
        try:
            proc = subprocess.Popen(
                [self.python, "-m", "containers.supervisor", "--detach", str(jobdir)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                cwd="/",
                env=env,
                start_new_session=True,
                close_fds=True,
            )
            code = proc.wait(timeout=30)
        except (OSError, subprocess.SubprocessError) as exc:
            raise BackendError(
                f"cannot start the supervisor of {jobdir.name}: {exc}", retryable=True
            ) from exc
        finally:
            log.close()
        if code != 0:
            raise BackendError(
                f"supervisor of job {jobdir.name} failed to start (exit {code})", retryable=True
            )

    def _write_srun_shim(self) -> None:
        shim = self.spool / "bin" / "srun"
        text = (
            f"#!/bin/sh\n# Caldera's srun for jobs of the local backend\n"
            f"PYTHONPATH={shlex.quote(_pythonpath())}${{PYTHONPATH:+:$PYTHONPATH}} "
            f'exec {shlex.quote(self.srun_python)} -m containers.srun "$@"\n'
        )
        if not shim.exists() or shim.read_text() != text:
            tmp = shim.with_name(f".srun.{os.getpid()}")
            tmp.write_text(text)
            tmp.chmod(0o755)
            os.replace(tmp, shim)


def _pythonpath() -> str:
    current = os.environ.get("PYTHONPATH", "")
    return f"{_REPO_ROOT}:{current}" if current else str(_REPO_ROOT)


def _cpus(launch: Launch) -> int:
    return launch.placement[0].cpus if launch.placement else 0


def _groups(user: str, gid: int) -> tuple[int, ...]:
    try:
        return tuple(sorted(set(os.getgrouplist(user, gid))))
    except (KeyError, OSError):
        return (gid,)


def _memory_limit(launch: Launch, placed_mb: int, cpus: int, gpus: int) -> int:
    """The job's memory on this node: what was placed, else what the request implies."""
    spec = launch.job.spec
    if placed_mb > 0:
        return placed_mb
    if spec.mem_per_node_mb:
        return spec.mem_per_node_mb
    if spec.mem_per_cpu_mb:
        return spec.mem_per_cpu_mb * max(cpus, 1)
    if spec.mem_per_gpu_mb and gpus:
        return spec.mem_per_gpu_mb * gpus
    return 0


def _step_key(step_id: str) -> tuple[int, str]:
    return (int(step_id), "") if step_id.isdigit() else (1 << 30, step_id)


def user_and_group(uid: int) -> tuple[str, int, str]:
    """(user name, primary gid, group name) of a uid, for building Jobs."""
    entry = pwd.getpwuid(uid)
    return entry.pw_name, entry.pw_gid, grp.getgrgid(entry.pw_gid).gr_name
