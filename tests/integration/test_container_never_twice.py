"""Never twice for jobs with an image: their processes live in the container engine's cgroup,
not in the run's process group, so requeue and a dead supervisor must end the container itself
through the Docker API (found by its job, run and backend labels) and confirm it is gone
before the next run starts or the run is reported lost. Real Podman (its Docker API socket),
the locally built busybox image, a real user (tester); each run records its start, beats and
end with flock into the bind-mounted work directory (tests/support/attempt_log; busybox has
no flock and no `date +%N`, so the host's are mounted read-only into the container).
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from containers.backend import LocalBackend
from containers.docker_runner import job_labels
from gateway.model.backend import BackendEvent, EventKind, Launch
from gateway.model.state import JobState
from tests.integration.test_container_backend import IMAGE
from tests.integration.test_container_backend import docker_host as docker_host  # fixture
from tests.integration.test_local_backend_support import Env, make_launch
from tests.support.attempt_log import AttemptLog

pytestmark = [
    pytest.mark.containers,
    pytest.mark.skipif(os.geteuid() != 0, reason="runs jobs as another user"),
]

_HOST_TOOLS = ",".join(
    (
        "/usr/lib/x86_64-linux-gnu:/lib/x86_64-linux-gnu:ro",
        "/usr/lib64:/lib64:ro",
        "/usr/bin/flock:/opt/host/flock:ro",
        "/usr/bin/date:/opt/host/date:ro",
    )
)
_REC = """#!/bin/sh
exec /opt/host/flock "$NT_LOG" sh -c 'printf "%s %s %s %s %s\\n" "$1" "$SLURM_JOB_ID" \\
  "${SLURM_RESTART_COUNT:-0}" "$2" "$(/opt/host/date +%s.%N)" >> "$NT_LOG"' rec "$1" "$2"
"""


@pytest.fixture
def env() -> Iterator[Env]:
    root = Path(tempfile.mkdtemp(prefix="h7-container-never-twice-", dir="/tmp"))
    root.chmod(0o755)
    work = root / "work"
    work.mkdir()
    work.chmod(0o1777)
    yield Env(root=root, spool=root / "spool", work=work)
    shutil.rmtree(root, ignore_errors=True)


def _attempt_log(directory: Path) -> AttemptLog:
    log = AttemptLog(directory)
    log.rec.write_text(_REC)  # the same records, with the host's flock and date
    return log


def _launch(env: Env, log: AttemptLog) -> Launch:
    argv = [f"--container-image={IMAGE}", f"--container-mounts={_HOST_TOOLS}"]
    return make_launch(env, log.script(1), argv, user="tester")


def _run(launch: Launch, run: int) -> Launch:
    return replace(launch, job=replace(launch.job, restart_count=run))


def _containers(host: str, backend: LocalBackend, job_id: int, run: int) -> list[Any]:
    """Every container (running or not) of this run of the job, through the Docker API."""
    import docker

    client = docker.DockerClient(base_url=host)
    try:
        labels = job_labels(backend.tracker.namespace, job_id, run)
        found = client.containers.list(all=True, filters={"label": [f"{k}={v}" for k, v in labels]})
        return [(c.name, c.status) for c in found]
    finally:
        client.close()


def _events(
    backend: LocalBackend, job_id: int, kind: EventKind, run: int, timeout: float = 60
) -> list[BackendEvent]:
    deadline = time.monotonic() + timeout
    seen: list[BackendEvent] = []
    while time.monotonic() < deadline:
        seen += [e for e in backend.poll() if e.job_id == job_id and e.run == run]
        if any(e.kind is kind for e in seen):
            return seen
        time.sleep(0.05)
    raise AssertionError(f"no {kind} for run {run} of job {job_id}: {seen}")


def _finish_run(host: str, backend: LocalBackend, log: AttemptLog, launch: Launch) -> None:
    """Run 1 of the job to its normal end; the never-twice check on both runs."""
    job_id = launch.job.job_id
    backend.submit(_run(launch, 1))
    events = _events(backend, job_id, EventKind.FINISHED, 1)
    done = next(e for e in events if e.kind is EventKind.FINISHED)
    assert done.state is JobState.COMPLETED, done
    log.assert_never_twice(job_id, 2)
    assert _containers(host, backend, job_id, 1) == []  # removed by its supervisor


def test_requeue_removes_the_running_container_before_the_next_run(
    env: Env, docker_host: str
) -> None:
    # KillWait far longer than the test: the container (whose sh, its PID 1, ignores
    # SIGTERM) is ended by the backend through the Docker API, not by the supervisor's
    # escalation
    backend = env.backend(docker_host=docker_host, kill_wait=60.0)
    log = _attempt_log(env.work)
    launch = _launch(env, log)
    job_id = launch.job.job_id
    backend.submit(launch)
    log.wait_for(job_id, 0, timeout=60)  # the script and its setsid daemon both beat
    assert [s for _, s in _containers(docker_host, backend, job_id, 0)] == ["running"]

    backend.end_attempt(launch.job)

    assert _containers(docker_host, backend, job_id, 0) == []  # gone when it returned
    recorded = len(log.records(job_id))
    time.sleep(0.3)
    assert len(log.records(job_id)) == recorded  # nothing of run 0 beats any more
    _finish_run(docker_host, backend, log, launch)


def test_a_dead_supervisor_has_its_container_removed_before_the_run_is_lost(
    env: Env, docker_host: str
) -> None:
    backend = env.backend(docker_host=docker_host, kill_wait=60.0)
    log = _attempt_log(env.work)
    launch = _launch(env, log)
    job_id = launch.job.job_id
    backend.submit(launch)
    log.wait_for(job_id, 0, timeout=60)
    pid = backend.supervisor_pid(job_id)
    assert pid is not None
    assert [s for _, s in _containers(docker_host, backend, job_id, 0)] == ["running"]

    os.kill(pid, signal.SIGKILL)
    events = _events(backend, job_id, EventKind.LOST, 0)

    lost = next(e for e in events if e.kind is EventKind.LOST)
    assert lost.message is not None
    assert f"supervisor {pid} of job {job_id} died" in lost.message
    assert "1 containers removed" in lost.message
    assert _containers(docker_host, backend, job_id, 0) == []  # never LOST while it runs
    result = backend.result(job_id, 0)
    assert result is not None
    assert result.state is JobState.NODE_FAIL
    assert result.extra["containers_removed"] == "1"
    recorded = len(log.records(job_id))
    time.sleep(0.3)
    assert len(log.records(job_id)) == recorded
    _finish_run(docker_host, backend, log, launch)  # the gateway requeues: run 1
