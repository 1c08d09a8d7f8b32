"""salloc on the local backend when its allocation ends under it or it is interrupted, as
Slurm 22.05's salloc does on the test cluster (tests/differential/test_srun_steps_vs_slurm.py
compares the ordinary cases live). What the cluster printed:

- `salloc -N1 -t 1 bash -c 'sleep 100; echo still-here'`: `salloc: Job 53013 has exceeded its
  time limit and its allocation has been revoked.`, the command runs on (`still-here`),
  salloc exits 0; sacct `53013|interactive|TIMEOUT|0:0`, scontrol ExitCode=0:0.
- SIGINT to salloc while its command runs: `salloc: Job allocation 53009 has been revoked.`
  (no "Relinquishing"), the command runs on, salloc exits with its code;
  `53009|interactive|CANCELLED by 1001|0:0`.
- SIGINT while the allocation pends (`--begin=now+1hour`): `Pending job allocation 53012`,
  `job 53012 queued and waiting for resources`, `Job allocation 53012 has been revoked.`,
  `Job aborted due to signal`; exit 1, the job cancelled.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.support.gateway_env import Gateway, running_gateway

# a minute lasts three seconds
CONFIG = "time_scale = 0.05\nkill_wait_s = 1\n"


@pytest.fixture(scope="module")
def gw() -> Iterator[Gateway]:
    with running_gateway(CONFIG, "caldera-salloc-") as gateway:
        yield gateway


def _job(stderr: str) -> str:
    got = re.search(r"allocation (\d+)", stderr)
    assert got, stderr
    return got.group(1)


def _acct(gw: Gateway, job: str) -> str:
    return gw.ok(["sacct", "-n", "-P", "-j", job, "-o", "JobID,JobName,State,ExitCode"])


def _interrupted(gw: Gateway, argv: list[str], after: float) -> subprocess.CompletedProcess[str]:
    proc = subprocess.Popen(
        argv,
        env=gw.env(),
        cwd=gw.workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(after)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def test_the_time_limit_revokes_the_allocation_and_the_command_runs_on(gw: Gateway) -> None:
    done = gw.run(["salloc", "-N1", "-t", "1", "bash", "-c", "sleep 6; echo still-here"])
    job = _job(done.stderr)
    assert done.returncode == 0
    assert done.stdout == "still-here\n"
    assert done.stderr == (
        f"salloc: Granted job allocation {job}\n"
        f"salloc: Job {job} has exceeded its time limit and its allocation has been revoked.\n"
    )
    assert _acct(gw, job) == f"{job}|interactive|TIMEOUT|0:0\n"
    assert "ExitCode=0:0" in gw.ok(["scontrol", "show", "job", job])


def test_sigint_to_salloc_cancels_the_allocation_not_the_command(gw: Gateway) -> None:
    done = _interrupted(gw, ["salloc", "-N1", "bash", "-c", "sleep 3; echo done; exit 4"], 1.5)
    job = _job(done.stderr)
    assert (done.returncode, done.stdout) == (4, "done\n")
    assert done.stderr == (
        f"salloc: Granted job allocation {job}\nsalloc: Job allocation {job} has been revoked.\n"
    )
    assert _acct(gw, job) == f"{job}|interactive|CANCELLED by 0|0:0\n"


def test_sigint_while_pending_rescinds_the_request(gw: Gateway) -> None:
    done = _interrupted(gw, ["salloc", "-N1", "--begin=now+1hour", "true"], 2.5)
    job = _job(done.stderr)
    assert done.returncode == 1
    assert done.stderr == (
        f"salloc: Pending job allocation {job}\n"
        f"salloc: job {job} queued and waiting for resources\n"
        f"salloc: Job allocation {job} has been revoked.\n"
        "salloc: Job aborted due to signal\n"
    )
    assert gw.ok(["squeue", "-h", "-j", job, "-t", "all", "-o", "%T"]) == "CANCELLED\n"
