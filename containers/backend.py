"""LocalBackend: Slurm's batch jobs on this one machine (the embedded default backend).

Each job gets a detached supervisor (containers.supervisor) and a spool directory
(containers.spool). The backend itself keeps no state that matters: everything it reports is
read from the spool, so a new LocalBackend over the same spool (after the gateway was killed)
re-attaches to running supervisors through `reconcile`.
"""

from __future__ import annotations

import contextlib
import grp
import logging
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

from containers.attempts import alive, end_run, job_lock, record_loss, release
from containers.docker_runner import parse_mounts
from containers.interpreter import shared_python
from containers.proc import login_environment
from containers.proctrack import RECORD_FILE, attempt_name, namespace_for, select_tracker
from containers.spool import (
    ContainerPlan,
    JobPlan,
    JobResult,
    SupervisorInfo,
    open_dir,
    read_json,
    write_json,
)
from containers.steprecords import read_steps
from gateway.compat.duration import INFINITE
from gateway.compat.filename import NO_TASK, PatternContext, default_output, expand_for_open
from gateway.compat.job_env import batch_environment, submit_umask
from gateway.model.backend import BackendError, BackendEvent, EventKind, Launch
from gateway.model.cluster import ClusterState, Gpu, Node, NodeState, Partition
from gateway.model.job import Job, Step
from gateway.model.state import JobState, Reason

__all__ = ["STEP_DIR_VAR", "LocalBackend", "user_and_group"]

log = logging.getLogger("caldera.local")

STEP_DIR_VAR = "CALDERA_STEP_DIR"  # where srun records steps (set in every job's environment)
_REPO_ROOT = Path(__file__).resolve().parent.parent
_SPAWN_GRACE_S = 30.0  # a supervisor that never wrote supervisor.json by then is lost
_END_WAIT_S = 3.0  # how long ending a run may wait for its processes to be confirmed gone
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _docker_host_from_env() -> str | None:
    return os.environ.get("CALDERA_DOCKER_HOST") or os.environ.get("DOCKER_HOST") or None


@dataclass
class _Tracked:
    started: bool = False
    finished: bool = False  # its end was reported by poll/reconcile
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
        min_job_age: float = 300.0,
        proctrack: str = "auto",
    ) -> None:
        """
        spool_dir: where job directories live (created; 0711 so jobs can reach their files).
        node_name/cpus/memory_mb/gpus: what describe() reports (default: this machine).
        kill_wait: seconds between SIGTERM and SIGKILL (Slurm's KillWait).
        time_scale: seconds of real time per second of job time (time limits and --signal
            lead times); 1.0 in production, small in tests.
        docker_host: Docker API URL for jobs with an image (default CALDERA_DOCKER_HOST, then
            DOCKER_HOST).
        min_job_age: seconds a finished job's spool directory is kept after its end was
            reported (Slurm's MinJobAge); the gateway's store keeps what sacct needs.
        proctrack: how each run's processes are tracked (containers.proctrack): auto,
            cgroup2, freezer or session.
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
        self.min_job_age = min_job_age
        self._swept = False
        self._tracked: dict[tuple[int, int], _Tracked] = {}  # (job id, restart count)
        self.tracker = select_tracker(namespace_for(cluster, self.spool), proctrack)
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
        with job_lock(self.jobs_dir, job.job_id) as lock:
            if run < lock.floor():  # requeued (or lost) while this launch was on its way
                raise BackendError(
                    f"run {run} of job {job.job_id} was ended before it started",
                    retryable=True,
                    waiting_reason=Reason.CLEANING,
                )
            if (jobdir / "spawned").exists():
                self._tracked.setdefault((job.job_id, run), _Tracked(cpus=_cpus(launch)))
                return backend_id
            self._end_earlier(job.job_id, run)
            lock.raise_floor(run)
            plan = self._plan(launch, jobdir)
            self._prepare(jobdir, launch, plan)
            if plan.container is None:
                attempt = attempt_name(job.job_id, run)
                try:
                    self.tracker.create(attempt)
                except OSError as exc:
                    raise BackendError(
                        f"job {job.job_id}: cannot make its process group: {exc}", retryable=True
                    ) from exc
                write_json(jobdir / RECORD_FILE, self.tracker.record(attempt), mode=0o600)
            (jobdir / "spawned").write_text(f"{time.time()}\n")
            self._spawn(jobdir)
        self._tracked[(job.job_id, run)] = _Tracked(cpus=_cpus(launch))
        return backend_id

    def end_attempt(self, job: Job) -> None:
        """Requeue and node fail-over: end every process of the job's current run (its whole
        process group, not only its steps), tell its supervisor, and return once they are
        confirmed gone; that run can never start afterwards. BackendError (retryable) when
        the end is not confirmed in time (the next run's submit checks again)."""
        run = job.restart_count
        with job_lock(self.jobs_dir, job.job_id) as lock:
            lock.raise_floor(run + 1)
            ended = end_run(self.job_dir(job.job_id, run), _END_WAIT_S, _SPAWN_GRACE_S)
        if ended.killed:
            log.info("job %s (run %s) ended: %d processes killed", job.job_id, run, ended.killed)
        if not ended.confirmed:
            raise BackendError(
                f"job {job.job_id}: processes of run {run} are not confirmed gone",
                retryable=True,
                waiting_reason=Reason.CLEANING,
            )

    def _end_earlier(self, job_id: int, run: int) -> None:
        """Before run `run` starts, every earlier run must be gone (under the job's lock)."""
        for earlier in range(run):
            jobdir = self.job_dir(job_id, earlier)
            if not (jobdir / "spawned").exists():
                continue
            ended = end_run(jobdir, _END_WAIT_S, _SPAWN_GRACE_S)
            if ended.killed:
                log.warning(
                    "job %s: %d processes of run %s were still running before run %s; killed",
                    job_id,
                    ended.killed,
                    earlier,
                    run,
                )
            if not ended.confirmed:
                raise BackendError(
                    f"job {job_id}: run {earlier} is not confirmed gone; run {run} waits",
                    retryable=True,
                    waiting_reason=Reason.CLEANING,
                )

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
                self._purge(job_id, run)
                continue
            events.extend(self._events(job_id, tracked, run))
        if not self._swept:
            self._swept = True
            self._sweep()
        return events

    def _purge(self, job_id: int, run: int) -> None:
        """Remove a finished job's spool once MinJobAge has passed since its end. Its end was
        reported by an earlier poll (the gateway stores events before it polls again), so a
        gateway killed before storing it still finds the spool on restart."""
        result = self.result(job_id, run)
        if result is not None and time.time() - result.end_time >= self.min_job_age:
            self.forget(job_id, run)

    def _sweep(self) -> None:
        """Once, after start-up: spools of jobs that ended beyond MinJobAge and that nothing
        tracks (the gateway reconciles every job it has not stored as ended before it polls),
        left by a gateway that stopped before purging them."""
        with contextlib.suppress(OSError):
            for entry in os.scandir(self.jobs_dir):
                job, _, run = entry.name.partition(".")
                if not (job.isdigit() and (run == "" or run.isdigit())):
                    continue
                key = (int(job), int(run or 0))
                if key not in self._tracked:
                    self._purge(*key)

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
        """Every step recorded for a job (batch first, then srun steps in order); srun's
        records, written by the job's user, are read as containers.steprecords allows."""
        return read_steps(self.job_dir(job_id, run), job_id)

    def result(self, job_id: int, run: int = 0) -> JobResult | None:
        """How the job ended, if it has (read from the spool, no event consumed)."""
        return JobResult.from_json(read_json(self.job_dir(job_id, run) / "result.json"))

    def forget(self, job_id: int, run: int = 0) -> bool:
        """Remove a finished job's spool directory (once the gateway stored its result).
        rmtree works through directory descriptors and never follows a symlink (checked):
        the user's `steps/` inside cannot point it elsewhere."""
        jobdir = self.job_dir(job_id, run)
        if not (jobdir / "result.json").exists() or not shutil.rmtree.avoids_symlink_attacks:
            return False
        with job_lock(self.jobs_dir, job_id) as lock:
            release(jobdir)
            shutil.rmtree(jobdir, ignore_errors=True)
            if not any(self.jobs_dir.glob(f"{job_id}")) and not any(
                self.jobs_dir.glob(f"{job_id}.*")
            ):
                lock.drop()  # no run of the job is left (a later requeue starts a new file)
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
            # the supervisor died (kill -9, OOM): its orphans are ended and the loss recorded
            # before it is reported; never LOST while a process of the run may still run
            with job_lock(self.jobs_dir, job_id):
                result = self.result(job_id, run)  # it may have finished in between
                if result is None:
                    result = record_loss(jobdir, job_id, run, info, _END_WAIT_S)
            if result is None:
                return events
        if result is not None and result.state is JobState.NODE_FAIL:  # a recorded loss
            tracked.finished = True
            events.append(
                BackendEvent(
                    job_id=job_id,
                    kind=EventKind.LOST,
                    time=result.end_time,
                    state=JobState.NODE_FAIL,
                    reason=Reason.NONE,
                    nodes=nodes,
                    backend_id=bid,
                    run=run,
                    message=result.message,
                )
            )
            return events
        if result is not None:
            events.extend(self._step_events(job_id, tracked, run))
            tracked.finished = True
            release(jobdir)
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
        return alive(info)

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
            umask=submit_umask(launch.environment),
            poll_interval_s=self.poll_interval,
            container=container,
        )

    def _prepare(self, jobdir: Path, launch: Launch, plan: JobPlan) -> None:
        """The job's directory, root's (0711: the user reaches the script and `steps/`);
        everything in it made through descriptors, nothing followed: `ctl/` (0700), the
        user's `steps/` (0700) and `slurm_script` (0700), then `plan.json` (0600)."""
        root = os.geteuid() == 0
        with contextlib.suppress(FileExistsError):
            jobdir.mkdir(mode=0o700)
        dir_fd = open_dir(jobdir)
        if dir_fd is None or os.fstat(dir_fd).st_uid != os.geteuid():
            raise BackendError(f"{jobdir} is not a directory of uid {os.geteuid()}")
        owner = (plan.uid, plan.gid) if root else None
        try:
            os.fchmod(dir_fd, 0o711)
            for name, sub_owner in (("ctl", None), ("steps", owner)):
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o700, dir_fd=dir_fd)
                sub = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
                try:
                    if sub_owner is not None:
                        os.fchown(sub, *sub_owner)
                    os.fchmod(sub, 0o700)
                finally:
                    os.close(sub)
            with contextlib.suppress(FileNotFoundError):
                os.unlink("slurm_script", dir_fd=dir_fd)
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open("slurm_script", flags, 0o700, dir_fd=dir_fd)
            with os.fdopen(fd, "wb") as fh:
                fh.write(launch.script.encode("utf-8", "surrogateescape"))
                fh.flush()
                os.fchmod(fd, 0o700)
                if owner is not None:
                    os.fchown(fd, *owner)
        finally:
            os.close(dir_fd)
        write_json(jobdir / "plan.json", plan.to_json(), mode=0o600)

    def _spawn(self, jobdir: Path) -> None:
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": _pythonpath()}
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        log = os.fdopen(os.open(jobdir / "supervisor.log", flags, 0o600), "ab")
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


def user_and_group(uid: int) -> tuple[str, int, str]:
    """(user name, primary gid, group name) of a uid, for building Jobs."""
    entry = pwd.getpwuid(uid)
    return entry.pw_name, entry.pw_gid, grp.getgrgid(entry.pw_gid).gr_name
