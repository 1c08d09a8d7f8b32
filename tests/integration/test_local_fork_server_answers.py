"""The fork server's answers come from its intermediate child (containers.forkserver): a
supervisor that cannot be started is answered with the reason, the server reaps every
intermediate, and several requests in flight are all answered. Real fork server, real forks.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest

from containers.forkserver import ForkServerClient
from gateway.model.state import JobState
from tests.integration.test_local_backend_support import (
    Env,
    make_launch,
    temporary_env,
    wait_for,
    wait_until,
)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="runs jobs as another user")


@pytest.fixture
def env() -> Iterator[Env]:
    yield from temporary_env()


def _zombie_children(pid: int) -> list[int]:
    return [c.pid for c in psutil.Process(pid).children() if c.status() == psutil.STATUS_ZOMBIE]


def test_a_supervisor_that_cannot_start_is_answered_with_the_reason(env: Env) -> None:
    backend = env.backend()  # makes the spool; its client starts the server
    client = ForkServerClient(env.spool, sys.executable)
    try:
        missing = env.spool / "jobs" / "424242"  # no run directory: no supervisor.log
        with pytest.raises(OSError, match="cannot start the supervisor of 424242"):
            client.spawn(missing)
        server = client.server_pid()
        assert server is not None
        # the intermediates are reaped (after the next request, or on the server's timeout)
        for _ in range(3):
            with pytest.raises(OSError, match="424242"):
                client.spawn(missing)
        wait_until(lambda: not _zombie_children(server), timeout=15)
    finally:
        client.stop()
        backend.close()


def test_launches_in_flight_together_are_all_answered_and_run_once(env: Env) -> None:
    backend = env.backend(cpus=8)
    launches = [make_launch(env, "#!/bin/sh\ntrue\n", user="tester") for _ in range(8)]
    try:
        with ThreadPoolExecutor(8) as pool:  # as the gateway's launches of one cycle
            list(pool.map(backend.submit, launches))
        for launch in launches:
            wait_for(backend, launch.job.job_id)
            result = backend.result(launch.job.job_id)
            assert result is not None
            assert result.state is JobState.COMPLETED
            log = backend.job_dir(launch.job.job_id) / "supervisor.log"
            assert not log.exists() or not log.read_text().strip()
    finally:
        backend.close()
