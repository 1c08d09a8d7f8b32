"""The test gateway's teardown ends what its jobs left running.

`caldera down` keeps jobs running (a restarted gateway adopts them), so a test that fails
before its own scancel used to leave its jobs and their supervisors running into the
following tests. `discard_gateway` ends them through the runner's own process tracking.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import psutil

from tests.support.gateway_env import discard_gateway, start_gateway


def _naming(path: Path) -> list[psutil.Process]:
    return [
        p
        for p in psutil.process_iter(["cmdline"])
        if any(str(path) in a for a in (p.info.get("cmdline") or []))
    ]


def test_discarding_a_gateway_ends_the_jobs_it_left_running() -> None:
    base = Path(tempfile.mkdtemp(prefix="caldera-e2e-cleanup-", dir="/tmp"))
    try:
        gw = start_gateway(base)
        ids = [gw.sbatch("--wrap", "sleep 300") for _ in range(2)]
        gw.wait(ids[0], ("RUNNING",))
        spool = gw.home / "spool"
        deadline = time.monotonic() + 20
        while len(_naming(spool)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _naming(spool), "the running job's supervisor and script name the spool"
        discard_gateway(gw)
        assert _naming(spool) == []
    finally:
        shutil.rmtree(base, ignore_errors=True)
