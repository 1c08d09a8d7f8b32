"""The gateway process dies (SIGKILL) while a job runs: the job goes on and is found again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from containers.backend import LocalBackend
from gateway.model.backend import BackendEvent, EventKind
from gateway.model.state import JobState
from tests.integration.test_local_backend_support import (
    NODE,
    Env,
    make_launch,
    temporary_env,
    wait_until,
)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="runs jobs as other users (root)")


@pytest.fixture
def local_env() -> Iterator[Env]:
    yield from temporary_env()


REPO = Path(__file__).resolve().parents[2]
SCRIPT = (
    "#!/bin/bash\necho started\nwhile [ ! -e release ]; do sleep 0.05; done\n"
    "srun -n1 true\necho done\nexit 5\n"
)


def _gateway(env: Env, job_id: int) -> subprocess.Popen[str]:
    """A process that creates a LocalBackend, submits the job, and then just lives."""
    code = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from tests.integration.test_local_backend_support import Env, make_launch
        env = Env(root=Path({str(env.root)!r}), spool=Path({str(env.spool)!r}),
                  work=Path({str(env.work)!r}))
        backend = env.backend()
        launch = make_launch(env, {SCRIPT!r}, ["-J", "survivor"], user="tester",
                             job_id={job_id})
        print(backend.submit(launch), flush=True)
        time.sleep(600)
    """)
    return subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def test_a_job_survives_sigkill_of_the_gateway_and_is_reattached(local_env: Env) -> None:
    job_id = 777
    gateway = _gateway(local_env, job_id)
    assert gateway.stdout is not None
    backend_id = gateway.stdout.readline().strip()
    assert backend_id == f"{NODE}:{job_id}"
    out = local_env.work / f"slurm-{job_id}.out"
    wait_until(lambda: out.exists() and "started" in out.read_text())
    gateway.send_signal(signal.SIGKILL)
    gateway.wait(timeout=10)

    fresh = LocalBackend(local_env.spool, node_name=NODE)
    launch = make_launch(local_env, SCRIPT, ["-J", "survivor"], user="tester", job_id=job_id)
    events = fresh.reconcile([launch.job])
    assert [e.kind for e in events if e.kind is not EventKind.STEP] == [EventKind.STARTED]
    assert fresh.supervisor_pid(job_id) is not None
    assert fresh.result(job_id) is None

    (local_env.work / "release").write_text("go\n")
    finished: list[BackendEvent] = []
    steps: list[BackendEvent] = []
    deadline = time.monotonic() + 20
    while not finished and time.monotonic() < deadline:
        for event in fresh.poll():
            (finished if event.kind is EventKind.FINISHED else steps).append(event)
        time.sleep(0.05)
    assert [(e.state, e.exit_code) for e in finished] == [(JobState.FAILED, 5 << 8)]
    assert out.read_text() == "started\ndone\n"
    assert {e.step.step_id for e in steps if e.step is not None} >= {"batch", "0"}
    assert fresh.poll() == []  # the result is reported once
    # a gateway restarted again still learns the truth for a job it believes running
    again = LocalBackend(local_env.spool, node_name=NODE).reconcile([launch.job])
    assert [e.state for e in again if e.kind is EventKind.FINISHED] == [JobState.FAILED]
