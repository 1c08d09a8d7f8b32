"""Never twice: how the local backend ends one run (attempt) of a job for good.

A requeued job runs again as run N+1 in its own spool directory. Before run N+1 may start,
every process of the earlier runs must be confirmed gone (their process group is empty and
their supervisor has exited), and none of them may start later. Three things make that hold:

- a per-job lock (`job_lock`, one file per job, not per run) that `submit`, `end_attempt` and
  the loss handling take, so they are serialised; it holds the job's *floor*, the lowest run
  that may still be started (a stale launch of an earlier run is refused);
- the `ended` mark in a run's directory, written before its processes are killed: a
  supervisor that had not started the script yet does not, and a script process that joins
  its group after the kill kills itself (containers.runner);
- `end_run`, which kills the run's group through its tracker (containers.proctrack) and waits
  for the supervisor to exit, and `record_loss`, for a supervisor that died (kill -9, OOM).

A job with an image runs in a container whose processes live in the container engine's
cgroup, not in the run's group: both remove it through the Docker API, found by the labels
its plan gave it (containers.docker_runner.job_labels), and confirm that none is left, the
last time after the supervisor (the only one that creates it) has exited.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

from containers.docker_runner import remove_containers
from containers.proctrack import ENDED_FILE, RECORD_FILE, ProcessTracker, end_attempt, from_record
from containers.spool import (
    ContainerPlan,
    JobPlan,
    JobResult,
    SupervisorInfo,
    read_json,
    write_json,
)
from gateway.model.state import JobState, Reason

__all__ = [
    "END_WAIT_S",
    "SPAWN_GRACE_S",
    "Ended",
    "JobLock",
    "alive",
    "end_run",
    "job_lock",
    "record_loss",
    "release",
    "tracking",
]

log = logging.getLogger("caldera.local")
_LOCK_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
SPAWN_GRACE_S = 30.0  # a supervisor that never wrote supervisor.json by then is lost
END_WAIT_S = 3.0  # how long ending a run may wait for its processes to be confirmed gone


class JobLock:
    """The held per-job lock; its file holds the job's floor (the lowest run allowed to start)."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd = fd
        self.path = path

    def floor(self) -> int:
        text = os.pread(self.fd, 32, 0).decode(errors="replace").strip()
        return int(text) if text.isdigit() else 0

    def raise_floor(self, run: int) -> None:
        if run > self.floor():
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, f"{run}\n".encode(), 0)
            os.fsync(self.fd)

    def drop(self) -> None:
        """Remove the lock file (while held: later lockers see it is gone and make anew)."""
        self.path.unlink(missing_ok=True)


@contextlib.contextmanager
def job_lock(jobs_dir: Path, job_id: int) -> Iterator[JobLock]:
    """Hold the job's lock (`<jobs>/.<job id>.lock`, root 0600)."""
    path = jobs_dir / f".{job_id}.lock"
    while True:
        fd = os.open(path, _LOCK_FLAGS, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            same = os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # removed (drop) while we waited: lock the new one
    try:
        yield JobLock(fd, path)
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class Ended:
    """What ending a run did: processes killed, containers removed, and whether its end is
    confirmed."""

    killed: int
    confirmed: bool
    containers: int = 0


def alive(info: SupervisorInfo | None) -> bool:
    """Whether this supervisor (pid and start time) is still running."""
    if info is None:
        return False
    try:
        proc = psutil.Process(info.pid)
        return abs(proc.create_time() - info.create_time) < 0.5 and (
            proc.status() != psutil.STATUS_ZOMBIE
        )
    except psutil.Error:
        return False


def tracking(jobdir: Path) -> tuple[ProcessTracker, str] | None:
    """The process group a run's processes are in (None: a container job, or no record)."""
    return from_record(read_json(jobdir / RECORD_FILE))


def release(jobdir: Path) -> None:
    """Remove a finished run's process group once it is empty."""
    found = tracking(jobdir)
    if found is not None and found[0].ended(found[1]):
        found[0].remove(found[1])


def _container(jobdir: Path) -> ContainerPlan | None:
    """The container a run's plan asks for (None: a process job, or no readable plan)."""
    data = read_json(jobdir / "plan.json")
    if not isinstance(data, dict):
        return None
    try:
        return JobPlan.from_json(data).container
    except (TypeError, KeyError, ValueError):
        return None


def _supervisor(jobdir: Path) -> SupervisorInfo | None:
    return SupervisorInfo.from_json(read_json(jobdir / "supervisor.json"))


def _mark_ended(jobdir: Path) -> None:
    if not (jobdir / ENDED_FILE).exists():
        write_json(jobdir / ENDED_FILE, {"time": time.time()}, mode=0o600)


def _wait(until: float, done: Callable[[], bool]) -> None:
    while time.monotonic() < until and not done():
        time.sleep(0.02)


def end_run(
    jobdir: Path,
    wait_s: float,
    spawn_grace_s: float,
    term_grace_s: float = 0.0,
    requeue: bool = False,
) -> Ended:
    """End one run: mark it ended, tell its supervisor (cancel: SIGTERM to the job, as
    slurmstepd does, so its steps end CANCELLED 0:15 as Slurm records a requeued run;
    `requeue`: scontrol requeue's, said `DUE TO JOB REQUEUE` in the job's output), give
    it up to `term_grace_s` to finish that way, then kill its whole group (or remove its
    container), and wait (up to `wait_s` more) until the group is empty and the supervisor
    has exited; a supervisor that outlives its empty group is killed (it could still open
    the job's files)."""
    if not (jobdir / "spawned").exists():
        return Ended(0, True)
    _mark_ended(jobdir)
    deadline = time.monotonic() + wait_s + term_grace_s
    info = _supervisor(jobdir)
    if info is None and _spawned_age(jobdir) < spawn_grace_s:
        _wait(deadline, lambda: (jobdir / "supervisor.json").exists())  # still starting
        info = _supervisor(jobdir)
    if alive(info) and info is not None and not (jobdir / "result.json").exists():
        request = {"action": "cancel", "requeue": True} if requeue else {"action": "cancel"}
        write_json(jobdir / "ctl" / f"{time.time_ns()}.json", request, mode=0o600)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(info.pid, signal.SIGTERM)
        if term_grace_s > 0:  # the supervisor ends the job itself: SIGTERM, then SIGKILL
            _wait(time.monotonic() + term_grace_s, lambda: not alive(info))
    found = tracking(jobdir)
    container = _container(jobdir)
    killed, gone, removed = 0, True, 0
    if found is not None:
        killed, gone = end_attempt(found[0], found[1], max(deadline - time.monotonic(), 0.1))
    if container is not None:
        removed, gone = remove_containers(
            container.docker_host, container.labels, max(deadline - time.monotonic(), 1.0)
        )
    _wait(deadline, lambda: not alive(info))
    if alive(info) and info is not None and (found is not None or container is not None) and gone:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(info.pid, signal.SIGKILL)
        _wait(time.monotonic() + 1.0, lambda: not alive(info))
    if info is None and _spawned_age(jobdir) < spawn_grace_s:
        gone = False  # a supervisor that has not shown itself yet may still be starting
    gone = gone and not alive(info)
    if gone and container is not None:  # again: the supervisor may have made it meanwhile
        more, gone = remove_containers(container.docker_host, container.labels, wait_s)
        removed += more
    if gone and found is not None:
        found[0].remove(found[1])
    return Ended(killed, gone, removed)


def record_loss(
    jobdir: Path, job_id: int, run: int, info: SupervisorInfo | None, wait_s: float
) -> JobResult | None:
    """A supervisor died without a result: mark the run ended, kill its orphaned processes
    (or remove its container), and once none is left record the loss (NODE_FAIL) and log
    it; None while the run may still be running (the caller reports nothing yet and tries
    again)."""
    _mark_ended(jobdir)
    found = tracking(jobdir)
    container = _container(jobdir)
    killed, gone, removed = 0, True, 0
    if found is not None:
        killed, gone = end_attempt(found[0], found[1], wait_s)
    if container is not None:
        removed, gone = remove_containers(container.docker_host, container.labels, wait_s)
    if not gone:
        log.warning(
            "job %s (run %s): supervisor gone and its %s not confirmed gone; "
            "not requeued until it is",
            job_id,
            run,
            "processes" if container is None else f"container ({container.docker_host})",
        )
        return None
    if found is not None:
        found[0].remove(found[1])
    now = time.time()
    who = f"supervisor {info.pid}" if info is not None else "supervisor (never started)"
    message = f"{who} of job {job_id} died; {killed} orphaned processes killed"
    extra = {"lost": "supervisor", "orphans_killed": str(killed)}
    if container is not None:
        message += f", {removed} containers removed"
        extra["containers_removed"] = str(removed)
    log.warning("job %s (run %s): %s", job_id, run, message)
    result = JobResult(
        JobState.NODE_FAIL,
        0,
        0,
        Reason.NODE_DOWN,
        info.start_time if info is not None else now,
        now,
        message=message,
        extra=extra,
    )
    write_json(jobdir / "result.json", result.to_json(), mode=0o600)
    return result


def _spawned_age(jobdir: Path) -> float:
    try:
        return time.time() - (jobdir / "spawned").stat().st_mtime
    except FileNotFoundError:
        return float("inf")
