"""An srun killed with SIGKILL inside a batch job, on Caldera's local site and on the real
Slurm 22.05 test cluster.

srun cannot record anything then. Slurm does not leave its step running to the job's end:
slurmstepd loses srun's connection and kills the step's tasks, and sacct says the step was
`CANCELLED by` the job's user with 0:9 while the job runs on (DerivedExitCode 0:9 once it
ends). Caldera left the step RUNNING, its `sleep` alive, until the job ended.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.gateway_env import running_gateway
from tests.support.real_slurm import real_jobs, run_real
from tests.support.slurm_stack import SlurmStack

pytestmark = pytest.mark.slurm

Run = Callable[[list[str]], subprocess.CompletedProcess[str]]

_SCRIPT = """#!/bin/bash
srun sleep 60 &
sleep 2
kill -9 $!
sleep 8
echo done
"""
_ACCT = "JobID,State,ExitCode,DerivedExitCode"


def _until(probe: Callable[[], str], want: Callable[[str], bool], timeout: float = 40) -> str:
    deadline = time.monotonic() + timeout
    got = probe()
    while not want(got) and time.monotonic() < deadline:
        time.sleep(0.3)
        got = probe()
    return got


def _scenario(run: Run, submit: Callable[..., str], where: Path) -> list[str]:
    job = submit("-n1", "-o", str(where / "k-%j.out"), str(where / "killed.sh"))

    def named(text: str) -> str:
        return re.sub(rf"(?<![\w.:=\-]){job}(?![\w\-])", "JOB", text)

    def acct() -> str:
        return named(run(["sacct", "-n", "-P", "-j", job, "-o", _ACCT]).stdout)

    def steps() -> str:
        return named(run(["squeue", "-h", "-s", "-j", job, "-o", "%i"]).stdout)

    seen = [_until(steps, lambda s: "JOB.0" in s)]
    seen.append(_until(steps, lambda s: "JOB.0" not in s, timeout=8))
    # while the batch script still sleeps: the step ended, the job running
    seen.append(_until(acct, lambda s: "JOB.0|CANCELLED" in s, timeout=6))
    seen.append(_until(acct, lambda s: "JOB|COMPLETED" in s))
    out = (where / f"k-{job}.out").read_text()
    seen.append(re.sub(r"^\S*slurm_script: line (\d+): +\d+ ", r"SCRIPT: line \1: PID ", out))
    return seen


def test_a_sigkilled_srun_s_step_ends_at_once_as_on_slurm(cluster: SlurmStack) -> None:
    where = Path(tempfile.mkdtemp(prefix="killed-srun-", dir="/tmp"))
    where.chmod(0o777)
    (where / "killed.sh").write_text(_SCRIPT)
    with real_jobs() as submit:
        theirs = _scenario(run_real, submit, where)
    assert "JOB.0|CANCELLED by 0|0:9|" in theirs[2], theirs  # the scenario ran as meant
    assert "JOB|RUNNING" in theirs[2]
    config = f'[local]\nslurm_conf = "{cluster.slurm_conf}"\n'
    with running_gateway(config) as gw:
        ours = _scenario(lambda argv: gw.run(argv), lambda *args: str(gw.sbatch(*args)), where)
    assert ours == theirs
    shutil.rmtree(where, ignore_errors=True)
