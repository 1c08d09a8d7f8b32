"""`sacct -D` after requeues: every run of the job, next to real Slurm 22.05.

The same scenario runs on the test cluster and on a Caldera gateway: `tester` submits a
batch job that sleeps; root requeues it while it runs, twice (the second time with
`requeuehold`, so that it waits on both sides), then cancels it. slurmdbd keeps a record
per run: each ended run REQUEUED with its batch step CANCELLED by the requeue's SIGTERM
(0:15), then the last record CANCELLED; plain `sacct` shows only the last. Compared: the
`JobID|State|ExitCode` lines of `sacct -D -P` and of `sacct -P`, and the records (state,
step names) of `sacct --json`. Normalised: the job id. slurmctld keeps a requeued job
pending with reason BeginTime for cred_expire + 1 s (two minutes), and so does Caldera:
both sides show that reason, then the test lifts it with `scontrol update StartTime=now`.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Sequence

import pytest

from tests.support.gateway_env import Gateway
from tests.support.slurm_stack import SlurmStack, cancel

pytestmark = pytest.mark.slurm

Run = Callable[[Sequence[str], str | None], subprocess.CompletedProcess[str]]
FIELDS = "JobID,State,ExitCode"


def _slurm(cluster: SlurmStack) -> Run:
    def run(argv: Sequence[str], user: str | None = None) -> subprocess.CompletedProcess[str]:
        env = [f"{k}={v}" for k, v in cluster.env.items()]
        cmd = ["runuser", "-u", user, "--", "env", *env, *argv] if user else list(argv)
        return subprocess.run(
            cmd,
            env=dict(cluster.env),
            cwd=cluster.jobs_dir,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    return run


def _caldera(gw: Gateway) -> Run:
    def run(argv: Sequence[str], user: str | None = None) -> subprocess.CompletedProcess[str]:
        return gw.run(list(argv), user=user, timeout=60)

    return run


def _ok(run: Run, *argv: str, user: str | None = None) -> str:
    r = run(argv, user)
    assert r.returncode == 0, f"{argv}: exit {r.returncode}: {r.stderr}"
    return r.stdout


def _wait_state(run: Run, job: str, want: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    got = ""
    while time.monotonic() < deadline:
        got = _ok(run, "squeue", "-h", "-j", job, "-o", "%T")
        if got.strip() == want:
            return
        time.sleep(0.2)
    raise AssertionError(f"job {job} is {got.strip()!r}, not {want}")


def _sacct(run: Run, job: str, *opts: str) -> list[str]:
    out = _ok(run, "sacct", "-n", "-P", "-j", job, "-o", FIELDS, *opts)
    return [line.replace(job, "JOB", 1) for line in out.splitlines()]


def _final_sacct(run: Run, job: str) -> list[str]:
    """`sacct -D` once the last record is stored as cancelled (slurmdbd lags a little)."""
    deadline = time.monotonic() + 30
    lines: list[str] = []
    while time.monotonic() < deadline:
        lines = _sacct(run, job, "-D")
        if lines and lines[-1].startswith("JOB|CANCELLED"):
            return lines
        time.sleep(0.3)
    raise AssertionError(f"job {job}: no final record in {lines}")


def _scenario(run: Run, job: str) -> list[str]:
    """Two requeues of the running job (the second holds it), then a cancel while held;
    the reason squeue gave after each requeue."""
    reasons = []
    for verb in ("requeue", "requeuehold"):
        _wait_state(run, job, "RUNNING")
        time.sleep(1)  # the batch step is under way (slurmd, the local runner)
        _ok(run, "scontrol", verb, job)
        _wait_state(run, job, "PENDING")
        reasons.append(_ok(run, "squeue", "-h", "-j", job, "-o", "%r").strip())
        if verb == "requeue":  # lift the BeginTime wait of a requeued job
            _ok(run, "scontrol", "update", f"JobId={job}", "StartTime=now")
    _ok(run, "scancel", job)
    return reasons


def _json_records(run: Run, job: str) -> list[tuple[str, list[str]]]:
    doc = json.loads(_ok(run, "sacct", "-j", job, "--json"))
    return [
        (
            j["state"]["current"],
            [s["step"]["name"] for s in j["steps"]],
        )
        for j in doc["jobs"]
    ]


def test_sacct_lists_every_run_of_a_requeued_job_as_slurm_does(
    cluster: SlurmStack, gateway: Gateway
) -> None:
    sides = {"slurm": _slurm(cluster), "caldera": _caldera(gateway)}
    jobs: dict[str, str] = {}
    submit = ("sbatch", "--parsable", "-o", "/dev/null", "--wrap", "sleep 300")
    try:
        for name, run in sides.items():
            jobs[name] = _ok(run, *submit, user="tester").strip().split(";")[0]
        reasons = {name: _scenario(run, jobs[name]) for name, run in sides.items()}
        every = {name: _final_sacct(run, jobs[name]) for name, run in sides.items()}
        latest = {name: _sacct(run, jobs[name]) for name, run in sides.items()}
        records = {name: _json_records(run, jobs[name]) for name, run in sides.items()}
    finally:
        if "slurm" in jobs:
            cancel(jobs["slurm"], env=cluster.env)
    assert every["slurm"] == [
        "JOB|REQUEUED|0:0",
        "JOB.batch|CANCELLED|0:15",
        "JOB|REQUEUED|0:0",
        "JOB.batch|CANCELLED|0:15",
        "JOB|CANCELLED by 0|0:0",
    ], "the test cluster's Slurm no longer records requeues as 22.05 does"
    assert reasons["slurm"] == ["BeginTime", "job requeued in held state"], reasons
    assert reasons["caldera"] == reasons["slurm"]
    assert every["caldera"] == every["slurm"]
    assert latest["caldera"] == latest["slurm"] == ["JOB|CANCELLED by 0|0:0"]
    assert records["caldera"] == records["slurm"]
