"""Never twice, at the local backend: a run (attempt) of a job is ended as a whole (its batch
script, srun steps, double-forked daemons) and confirmed gone before the next run starts;
a supervisor that dies has its orphans killed, logged and reported as lost. Real processes
of a real user (tester), real cgroups; each job records its runs (tests/support/attempt_log).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from containers.attempts import tracking
from containers.backend import LocalBackend
from gateway.backend import EndsAttempts
from gateway.model.backend import BackendError, BackendEvent, EventKind, Launch
from gateway.model.state import JobState, Reason
from tests.integration.test_local_backend_support import Env, make_launch
from tests.support.attempt_log import AttemptLog

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="runs jobs as another user")


@pytest.fixture
def env() -> Iterator[Env]:
    root = Path(tempfile.mkdtemp(prefix="h1a-never-twice-", dir="/tmp"))
    root.chmod(0o755)
    work = root / "work"
    work.mkdir()
    work.chmod(0o1777)
    yield Env(root=root, spool=root / "spool", work=work)
    shutil.rmtree(root, ignore_errors=True)


def _run(launch: Launch, run: int) -> Launch:
    return replace(launch, job=replace(launch.job, restart_count=run))


def _group(backend: LocalBackend, job_id: int, run: int) -> tuple[list[int], Path | None]:
    """The run's live processes per its tracker, and its cgroup directory (if any)."""
    found = tracking(backend.job_dir(job_id, run))
    assert found is not None, "every process job has a recorded process group"
    tracker, attempt = found
    directory = getattr(tracker, "root", None)
    return tracker.pids(attempt), (directory / attempt if directory is not None else None)


def _events(
    backend: LocalBackend, job_id: int, kind: EventKind, run: int = 0, timeout: float = 20
) -> list[BackendEvent]:
    """poll() until an event of this kind for this run of the job (the events of it)."""
    deadline = time.monotonic() + timeout
    seen: list[BackendEvent] = []
    while time.monotonic() < deadline:
        seen += [e for e in backend.poll() if e.job_id == job_id and e.run == run]
        if any(e.kind is kind for e in seen):
            return seen
        time.sleep(0.05)
    raise AssertionError(f"no {kind} for run {run} of job {job_id}: {seen}")


def _finish_run(backend: LocalBackend, log: AttemptLog, launch: Launch, run: int) -> None:
    backend.submit(_run(launch, run))
    events = _events(backend, launch.job.job_id, EventKind.FINISHED, run)
    done = next(e for e in events if e.kind is EventKind.FINISHED)
    assert done.state is JobState.COMPLETED
    log.assert_all_gone(launch.job.job_id)


def test_the_local_backend_ends_attempts(env: Env) -> None:
    assert isinstance(env.backend(), EndsAttempts)


def test_requeue_ends_the_whole_run_before_the_next_starts(env: Env) -> None:
    backend, log = env.backend(), AttemptLog(env.work)
    launch = make_launch(env, log.script(1), user="tester")
    job_id = launch.job.job_id
    backend.submit(launch)
    log.wait_for(job_id, 0)  # the batch script and its setsid daemon both beat
    pids, cgroup = _group(backend, job_id, 0)
    assert len(pids) >= 3

    backend.end_attempt(launch.job)

    assert _group(backend, job_id, 0)[0] == []
    assert cgroup is None or not cgroup.exists()  # confirmed empty, then removed
    log.assert_all_gone(job_id, timeout=0)  # gone when end_attempt returned, not later
    _finish_run(backend, log, launch, 1)
    log.assert_never_twice(job_id, 2)


def test_the_next_run_ends_an_earlier_run_that_is_still_running(env: Env) -> None:
    """Enforced where it cannot be bypassed: submit of run 1 with run 0 never ended."""
    backend, log = env.backend(), AttemptLog(env.work)
    launch = make_launch(env, log.script(1), user="tester")
    job_id = launch.job.job_id
    backend.submit(launch)
    log.wait_for(job_id, 0)
    _finish_run(backend, log, launch, 1)
    log.assert_never_twice(job_id, 2)


def test_a_run_ended_before_its_launch_never_starts(env: Env) -> None:
    backend, log = env.backend(), AttemptLog(env.work)
    launch = make_launch(env, log.script(1), user="tester")
    job_id = launch.job.job_id
    backend.end_attempt(launch.job)  # requeued while the gateway was still launching run 0
    with pytest.raises(BackendError) as refused:
        backend.submit(launch)
    assert refused.value.retryable
    assert refused.value.waiting_reason is Reason.CLEANING
    assert not (backend.job_dir(job_id, 0) / "spawned").exists()
    _finish_run(backend, log, launch, 1)
    assert {(r.attempt, r.kind) for r in log.records(job_id)} >= {(1, "start"), (1, "end")}
    assert {r.attempt for r in log.records(job_id)} == {1}  # run 0 never ran


def test_requeue_racing_the_launch_never_overlaps(env: Env) -> None:
    backend, log = env.backend(), AttemptLog(env.work)
    for _ in range(3):
        launch = make_launch(env, log.script(1), user="tester")

        def launch_run0(launch: Launch = launch) -> None:
            with contextlib.suppress(BackendError):  # refused: it lost the race, as it should
                backend.submit(launch)

        thread = threading.Thread(target=launch_run0)
        thread.start()
        time.sleep(0.01)
        backend.end_attempt(launch.job)
        thread.join()
        _finish_run(backend, log, launch, 1)
        attempts = {r.attempt for r in log.records(launch.job.job_id)}
        if 0 in attempts:  # run 0 won the lock and started: ended before run 1
            log.assert_never_twice(launch.job.job_id, 2)
        else:  # refused, or ended before its script ran
            assert attempts == {1}


def test_a_dead_supervisor_has_its_orphans_killed_logged_and_reported_lost(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    backend, log = env.backend(), AttemptLog(env.work)
    launch = make_launch(env, log.script(1), user="tester")
    job_id = launch.job.job_id
    backend.submit(launch)
    log.wait_for(job_id, 0)
    pid = backend.supervisor_pid(job_id)
    assert pid is not None
    # the processes that stay (the script, its daemon, their sleeps), not the short-lived
    # ones of the flock logging that may come and go between two looks
    first = set(_group(backend, job_id, 0)[0])
    time.sleep(0.3)
    orphans = len(first & set(_group(backend, job_id, 0)[0]))
    caplog.set_level(logging.WARNING, logger="caldera.local")

    os.kill(pid, signal.SIGKILL)
    events = _events(backend, job_id, EventKind.LOST)

    lost = next(e for e in events if e.kind is EventKind.LOST)
    assert lost.run == 0
    assert lost.message is not None
    assert "orphaned processes killed" in lost.message
    log.assert_all_gone(job_id, timeout=0)  # never LOST while a process may still run
    assert _group(backend, job_id, 0)[0] == []
    warning = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(
        f"job {job_id}" in w and f"supervisor {pid}" in w and "died" in w for w in warning
    ), warning
    killed = re.search(r"died; (\d+) orphaned processes killed", warning[-1])
    assert killed is not None
    assert int(killed.group(1)) >= orphans >= 2  # the batch shell and its setsid daemon
    result = backend.result(job_id, 0)
    assert result is not None
    assert result.state is JobState.NODE_FAIL
    assert (backend.job_dir(job_id) / "result.json").stat().st_uid == 0

    # a gateway restarted meanwhile (a new backend over the same spool) still reports it lost
    again = env.backend().reconcile([launch.job])
    assert [e.kind for e in again if e.job_id == job_id][-1] is EventKind.LOST
    _finish_run(backend, log, launch, 1)
    log.assert_never_twice(job_id, 2)


def test_scancel_and_the_time_limit_leave_no_process_of_the_job(env: Env) -> None:
    backend, log = env.backend(), AttemptLog(env.work)
    cancelled = make_launch(env, log.script(5), user="tester")
    timed = make_launch(env, log.script(5), ["-t", "1"], user="tester")  # 1 s at 1/60
    for launch in (cancelled, timed):
        backend.submit(launch)
        log.wait_for(launch.job.job_id, 0)
    cgroups = {
        launch.job.job_id: _group(backend, launch.job.job_id, 0)[1] for launch in (cancelled, timed)
    }
    backend.cancel(cancelled.job)
    states = {}
    for launch in (cancelled, timed):
        events = _events(backend, launch.job.job_id, EventKind.FINISHED)
        states[launch.job.job_id] = next(e.state for e in events if e.kind is EventKind.FINISHED)
        log.assert_all_gone(launch.job.job_id, timeout=0)
        cgroup = cgroups[launch.job.job_id]
        assert cgroup is None or not cgroup.exists()
    assert states == {
        cancelled.job.job_id: JobState.CANCELLED,
        timed.job.job_id: JobState.TIMEOUT,
    }
