"""LocalBackend: Slurm's batch jobs on this one machine (the embedded default backend).

Each job gets a detached supervisor (containers.supervisor), forked by the spool's fork
server (containers.forkserver), and a spool directory (containers.spool). The backend
itself keeps no state that matters: everything it reports is read from the spool
(containers.events), so a new LocalBackend over the same spool (after the gateway was
killed) re-attaches to running supervisors through `reconcile`. Planning a run is
containers.planning, starting it containers.launching, ending it for good
containers.attempts.
"""

from __future__ import annotations

import contextlib
import grp
import logging
import os
import pwd
import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import psutil

from containers.attempts import END_WAIT_S, SPAWN_GRACE_S, alive, end_run, job_lock
from containers.events import RunEvents, Tracked, unknown_run_event
from containers.forkserver import ForkServerClient
from containers.interpreter import shared_python
from containers.launching import PROFILE_HOOK, prepare, spawn, write_profile_hook, write_srun_shim
from containers.notify import ChangeListener
from containers.planning import STEP_DIR_VAR, NodeSettings, plan_job
from containers.proctrack import RECORD_FILE, attempt_name, namespace_for, select_tracker
from containers.spool import JobResult, read_json, write_json
from containers.steprecords import srun_record
from containers.suspend import request_pause
from gateway.model.backend import BackendError, BackendEvent, Launch
from gateway.model.cluster import ClusterState, Gpu, Node, NodeState, Partition
from gateway.model.job import Job, Step
from gateway.model.state import Reason
from gateway.model.values import INFINITE

__all__ = ["STEP_DIR_VAR", "LocalBackend", "user_and_group"]

log = logging.getLogger("caldera.local")

# requeue and fail-over wait for SIGTERM to end a run for at most KillWait, and never longer
# than this: the caller (scontrol requeue) is waiting
TERM_GRACE_CAP_S = 5.0


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
        topology: Mapping[str, tuple[str, str]] | None = None,
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
        topology: each virtual node's (SLURM_TOPOLOGY_ADDR, ..._PATTERN) from slurm.conf's
            switch tree (gateway/control/site_topology.py); a node without one gets its name.
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
        self.def_mem_per_cpu_mb = def_mem_per_cpu_mb
        self.slurm_conf = slurm_conf
        self.python = python
        self.srun_python = srun_python or shared_python(python)
        self.min_job_age = min_job_age
        self._swept = False
        self._tracked: dict[tuple[int, int], Tracked] = {}  # (job id, restart count)
        self._runs = RunEvents(self.jobs_dir, self.node_name)
        self.tracker = select_tracker(namespace_for(cluster, self.spool), proctrack)
        log.info(
            "local backend %s: process tracking %s (asked: %s)",
            self.cluster,
            self.tracker.kind,
            proctrack,
        )
        self._node = NodeSettings(
            cluster=cluster,
            namespace=self.tracker.namespace,
            bin_dir=self.spool / "bin",
            time_scale=time_scale,
            kill_wait_s=kill_wait,
            poll_interval_s=poll_interval,
            topology=dict(topology or {}),
            def_mem_per_cpu_mb=def_mem_per_cpu_mb,
            slurm_conf=slurm_conf,
            docker_host=docker_host,
        )
        for path in (self.spool, self.jobs_dir, self.spool / "bin"):
            path.mkdir(parents=True, exist_ok=True)
            if os.geteuid() == 0:
                path.chmod(0o711)
        write_srun_shim(self.spool / "bin", self.srun_python)
        if not write_profile_hook():
            log.info("no %s: login-shell scripts find no srun shim", PROFILE_HOOK)
        self._forks = ForkServerClient(self.spool, python)
        self._listener: ChangeListener | None = None

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
                self._tracked.setdefault((job.job_id, run), Tracked(cpus=_cpus(launch)))
                return backend_id
            self._end_earlier(job.job_id, run)
            lock.raise_floor(run)
            plan = plan_job(launch, jobdir, self._node)
            prepare(jobdir, launch, plan)
            if plan.container is None:
                attempt = attempt_name(job.job_id, run)
                try:
                    self.tracker.create(attempt)
                except OSError as exc:
                    raise BackendError(
                        f"job {job.job_id}: cannot make its process group: {exc}", retryable=True
                    ) from exc
                # no fsync: after a machine crash no process of the run is left to find
                record = self.tracker.record(attempt)
                write_json(jobdir / RECORD_FILE, record, mode=0o600, durable=False)
            (jobdir / "spawned").write_text(f"{time.time()}\n")
            spawn(self._forks, jobdir)
        self._tracked[(job.job_id, run)] = Tracked(cpus=_cpus(launch))
        return backend_id

    def end_attempt(self, job: Job, requeue: bool = False) -> None:
        """Requeue and node fail-over: end every process of the job's current run (its whole
        process group, or its container, not only its steps), tell its supervisor (`requeue`:
        scontrol requeue's end, which slurmstepd says in the output), and return
        once they are confirmed gone; that run can never start afterwards. BackendError
        (retryable) when the end is not confirmed in time (the next run's submit checks
        again)."""
        run = job.restart_count
        with job_lock(self.jobs_dir, job.job_id) as lock:
            lock.raise_floor(run + 1)
            ended = end_run(
                self.job_dir(job.job_id, run),
                END_WAIT_S,
                SPAWN_GRACE_S,
                term_grace_s=min(self.kill_wait, TERM_GRACE_CAP_S),
                requeue=requeue,
            )
        if ended.killed or ended.containers:
            log.info(
                "job %s (run %s) ended: %d processes killed, %d containers removed",
                job.job_id,
                run,
                ended.killed,
                ended.containers,
            )
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
            ended = end_run(jobdir, END_WAIT_S, SPAWN_GRACE_S)
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
            info = self._runs.supervisor(jobdir)
            if info is not None and alive(info):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(info.pid, 15)

    def signal_step(self, job: Job, step: int, signal: int | None, by: int) -> None:
        """scancel ID.STEP: the supervisor signals that step's processes (a cancel: writes
        slurmstepd's and srun's lines, SIGKILL, and records `by` for sacct's CANCELLED by).
        A signal to a step on fewer nodes than the job's is delivered and then refused, as
        the test cluster answers it (`Invalid job id specified`, exit 225)."""
        jobdir = self.job_dir(job.job_id, job.restart_count)
        record = srun_record(jobdir, step) if (jobdir / "spawned").exists() else None
        if (jobdir / "result.json").exists() or not record or record.get("state") != "RUNNING":
            if signal is None or signal == 9:  # a signal to no step: nobody is told
                raise BackendError(f"job {job.job_id}: no step {step}", errno=2017)
            return
        request = {"action": "signal_step", "step": step, "signal": signal, "by": by}
        write_json(jobdir / "ctl" / f"{time.time_ns()}.json", request, mode=0o600)
        nodes = record.get("nodes")
        if signal not in (None, 9) and isinstance(nodes, list) and len(job.nodes) > len(nodes):
            # scancel's slurm_signal_job_step asks every node of the job: those without the
            # step answer "Invalid job id" after the step's own nodes have signalled it
            raise BackendError(f"job {job.job_id}: step {step} not on every node", errno=2017)

    def preempt_run(self, job: Job, at: float) -> None:
        """A preemption's end (grace over): the supervisor writes slurmstepd's `DUE TO
        PREEMPTION` line (stamped `at`, the record's PreemptTime, as slurmstepd stamps it
        with slurmctld's), sends SIGCONT and SIGTERM to every process, SIGKILL after KillWait,
        and reports PREEMPTED with the batch shell's status. The request is written before
        the supervisor is woken, so it is read with the wake-up."""
        jobdir = self.job_dir(job.job_id, job.restart_count)
        if not (jobdir / "spawned").exists():
            raise BackendError(f"job {job.job_id} is not known to the local backend")
        if (jobdir / "result.json").exists():
            return
        request = {"action": "cancel", "preempt": True, "at": at}
        write_json(jobdir / "ctl" / f"{time.time_ns()}.json", request, mode=0o600)
        info = self._runs.supervisor(jobdir)
        if info is not None and alive(info):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(info.pid, 15)

    def preempted_status(self, job: Job) -> int | None:
        """The preempted run's batch shell status once its supervisor has concluded."""
        result = self._runs.result(job.job_id, job.restart_count)
        return None if result is None else result.exit_code

    def suspend(self, job: Job) -> None:
        """Stop every process of the job's run; returns once they are (containers/suspend.py)."""
        request_pause(self.job_dir(job.job_id, job.restart_count), "suspend")

    def resume(self, job: Job) -> None:
        """Continue the stopped run (SIGCONT); its time limit clock runs again."""
        request_pause(self.job_dir(job.job_id, job.restart_count), "resume")

    def update_time_limit(self, job: Job, minutes: int) -> None:
        """scontrol update TimeLimit= of a running job: its supervisor moves the deadline
        (counted from the start, as Slurm counts it). A job not started yet needs nothing:
        it starts with the gateway's record."""
        jobdir = self.job_dir(job.job_id, job.restart_count)
        if not (jobdir / "spawned").exists() or (jobdir / "result.json").exists():
            return
        limit_s = None if minutes == INFINITE else minutes * 60 * self.time_scale  # 0: over
        request = {"action": "time_limit", "seconds": limit_s}
        write_json(jobdir / "ctl" / f"{time.time_ns()}.json", request, mode=0o600)

    def poll(self) -> list[BackendEvent]:
        events: list[BackendEvent] = []
        for (job_id, run), tracked in list(self._tracked.items()):
            if tracked.finished:
                ended = tracked.end_time
                if ended is None or time.time() - ended >= self.min_job_age:
                    self._purge(job_id, run)  # read from disk only once it may be due
                continue
            events.extend(self._runs.events(job_id, tracked, run))
        if not self._swept:
            self._swept = True
            self._sweep()
        return events

    def _purge(self, job_id: int, run: int) -> None:
        """Remove a finished job's spool once MinJobAge has passed since its end. Its end was
        reported by an earlier poll (the gateway stores events before it polls again), so a
        gateway killed before storing it still finds the spool on restart."""
        if self._runs.expired(job_id, run, self.min_job_age):
            self.forget(job_id, run)

    def _sweep(self) -> None:
        """Once, after start-up: spools of jobs that ended beyond MinJobAge and that nothing
        tracks (the gateway reconciles every job it has not stored as ended before it polls),
        left by a gateway that stopped before purging them."""
        with contextlib.suppress(OSError):
            for key in self._runs.runs_on_disk():
                if key not in self._tracked:
                    self._purge(*key)

    def reconcile(self, jobs: Sequence[Job]) -> list[BackendEvent]:
        events: list[BackendEvent] = []
        for job in jobs:
            run = job.restart_count
            jobdir = self.job_dir(job.job_id, run)
            if not (jobdir / "spawned").exists():
                events.append(unknown_run_event(job.job_id, run))
                continue
            plan = read_json(jobdir / "plan.json")
            cpus = int(plan.get("cpus", 0)) if isinstance(plan, dict) else 0
            tracked = Tracked(cpus=cpus)
            self._tracked[(job.job_id, run)] = tracked
            events.extend(self._runs.events(job.job_id, tracked, run))
        return events

    # --- extras -------------------------------------------------------------------------------

    def backend_id(self, job_id: int) -> str:
        return self._runs.backend_id(job_id)

    def job_dir(self, job_id: int, run: int = 0) -> Path:
        """The spool directory of one run of a job (a requeued job runs again: run > 0)."""
        return self._runs.job_dir(job_id, run)

    def steps(self, job_id: int, run: int = 0) -> list[Step]:
        """Every step recorded for a job (batch first, then srun steps in order)."""
        return self._runs.steps(job_id, run)

    def result(self, job_id: int, run: int = 0) -> JobResult | None:
        """How the job ended, if it has (read from the spool, no event consumed)."""
        return self._runs.result(job_id, run)

    def forget(self, job_id: int, run: int = 0) -> bool:
        """Remove a finished job's spool directory (once the gateway stored its result)."""
        if not self._runs.remove(job_id, run):
            return False
        self._tracked.pop((job_id, run), None)
        return True

    def notify_changes(self, wake: Callable[[], None]) -> None:
        """Call `wake` (from a thread of the backend) as soon as a run ends, so that the
        gateway polls then rather than at its next periodic cycle (containers.notify)."""
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        try:
            self._listener = ChangeListener(self.spool, wake)
        except OSError as exc:  # the periodic poll still finds every end
            log.warning("local backend %s: run ends are not pushed: %s", self.cluster, exc)

    def close(self) -> None:
        """At shutdown: the fork server exits (the runs it started go on without it)."""
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        self._forks.stop()

    def fork_server_pid(self) -> int | None:
        """The pid the spool's fork server recorded (None: none started yet)."""
        return self._forks.server_pid()

    def supervisor_pid(self, job_id: int, run: int = 0) -> int | None:
        info = self._runs.supervisor(self.job_dir(job_id, run))
        return info.pid if info is not None and alive(info) else None


def _cpus(launch: Launch) -> int:
    return launch.placement[0].cpus if launch.placement else 0


def user_and_group(uid: int) -> tuple[str, int, str]:
    """(user name, primary gid, group name) of a uid, for building Jobs."""
    entry = pwd.getpwuid(uid)
    return entry.pw_name, entry.pw_gid, grp.getgrgid(entry.pw_gid).gr_name
