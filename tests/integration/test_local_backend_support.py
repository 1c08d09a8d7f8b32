"""Helpers for the local backend tests (no tests here): jobs from sbatch arguments, waiting."""

from __future__ import annotations

import pwd
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from containers.backend import LocalBackend
from gateway.compat.optypes import ParseContext
from gateway.compat.sbatch import parse_sbatch
from gateway.model.backend import BackendEvent, EventKind, Launch, RankPlacement
from gateway.model.job import Job

__all__ = ["Env", "finish", "make_launch", "temporary_env", "wait_for", "wait_until"]

NODE = "localnode"


@dataclass
class Env:
    """A world-traversable directory with a spool and a world-writable work directory."""

    root: Path
    spool: Path
    work: Path
    next_id: int = 100

    def backend(self, **kwargs: object) -> LocalBackend:
        options: dict[str, object] = {
            "node_name": NODE,
            "cpus": 2,
            "memory_mb": 4000,
            "kill_wait": 1.0,
            "time_scale": 1 / 60,
            "poll_interval": 0.02,
        }
        options.update(kwargs)
        return LocalBackend(self.spool, **options)  # type: ignore[arg-type]

    def job_id(self) -> int:
        self.next_id += 1
        return self.next_id


def temporary_env() -> Iterator[Env]:
    """For a fixture: `yield from temporary_env()`."""
    root = Path(tempfile.mkdtemp(prefix="caldera-local-", dir="/tmp"))
    root.chmod(0o755)
    work = root / "work"
    work.mkdir()
    work.chmod(0o1777)
    env = Env(root=root, spool=root / "spool", work=work)
    yield env
    shutil.rmtree(root, ignore_errors=True)


def make_launch(
    env: Env,
    script: str,
    argv: Sequence[str] = (),
    *,
    user: str = "root",
    job_id: int | None = None,
    submit_env: Mapping[str, str] | None = None,
    array: tuple[int, int] | None = None,
    cpus: int = 1,
    tasks: int = 1,
    memory_mb: int = 0,
    gpus: tuple[int, ...] = (),
    workdir: Path | None = None,
) -> Launch:
    """A Launch for `sbatch argv` of `script`, as the gateway would hand it over."""
    entry = pwd.getpwnam(user)
    cwd = str(workdir or env.work)
    ctx = ParseContext(cwd=cwd, uid=entry.pw_uid, user=user, now=time.time())
    spec = parse_sbatch(["sbatch", *argv, "job.sh"], script, dict(submit_env or {}), ctx).spec
    jid = job_id if job_id is not None else env.job_id()
    array_job_id, task = array if array is not None else (0, None)
    job = Job(
        job_id=jid,
        spec=spec,
        user=user,
        uid=entry.pw_uid,
        group=user,
        gid=entry.pw_gid,
        submit_time=time.time(),
        partition="local",
        qos="normal",
        time_limit=spec.time_limit or 0,
        array_job_id=array_job_id,
        array_task_id=task,
    )
    base_env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": entry.pw_dir,
        "USER": user,
        "PWD": cwd,
    }
    base_env.update(submit_env or {})
    return Launch(
        job=job,
        script=script,
        environment=base_env,
        placement=[RankPlacement(NODE, tasks, cpus, memory_mb, gpus)],
        partition="local",
    )


def wait_for(backend: LocalBackend, job_id: int, timeout: float = 30.0) -> Path:
    """Wait until the job's result is in the spool; returns the job directory."""
    deadline = time.monotonic() + timeout
    while backend.result(job_id) is None:
        if time.monotonic() > deadline:
            log = backend.job_dir(job_id) / "supervisor.log"
            text = log.read_text() if log.exists() else ""
            raise TimeoutError(f"job {job_id} did not finish in {timeout} s\n{text}")
        time.sleep(0.02)
    return backend.job_dir(job_id)


def finish(backend: LocalBackend, launch: Launch, timeout: float = 30.0) -> BackendEvent:
    """Submit, wait, and return the FINISHED event that poll() reports."""
    backend.submit(launch)
    wait_for(backend, launch.job.job_id, timeout)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        for event in backend.poll():
            if event.job_id == launch.job.job_id and event.kind is EventKind.FINISHED:
                return event
        time.sleep(0.02)
    raise AssertionError(f"no FINISHED event for job {launch.job.job_id}")


def wait_until(predicate: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        time.sleep(0.02)
