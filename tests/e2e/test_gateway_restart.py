"""The gateway killed with SIGKILL while jobs run and wait: nothing lost, nothing run twice."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from tests.support.gateway_env import CALDERA, Gateway, restart, stop_gateway


def _gateway_pid(gw: Gateway) -> int:
    return int((gw.home / "gateway.pid").read_text().strip())


def test_sigkill_of_the_gateway_loses_no_job_and_runs_none_twice(gateway: Gateway):
    cpus = os.cpu_count() or 1
    body = 'echo "start $SLURM_JOB_ID $(date +%s.%N)" >> runs.log; sleep 2'
    running = gateway.sbatch("-c", str(cpus), "--wrap", body)
    gateway.wait(running, states=("RUNNING",))
    queued = [gateway.sbatch("-c", str(cpus), "--wrap", body) for _ in range(3)]
    held = gateway.sbatch("-H", "--wrap", body)
    pid = _gateway_pid(gateway)
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        assert time.monotonic() < deadline
        time.sleep(0.05)
    # the job the gateway was running keeps running without it
    assert subprocess.run(["pgrep", "-f", "containers.supervisor"], capture_output=True).stdout
    env = {**os.environ, "CALDERA_HOME": str(gateway.home), "CALDERA_SOCKET": str(gateway.socket)}
    up = subprocess.run([*CALDERA, "up"], env=env, capture_output=True, text=True, timeout=60)
    assert up.returncode == 0, up.stderr
    for job in (running, *queued):
        assert gateway.wait(job, timeout=120)["state"] == "COMPLETED"
    assert gateway.job(held)["state"] == "PENDING"
    lines = (gateway.workdir / "runs.log").read_text().splitlines()
    started = [int(line.split()[1]) for line in lines]
    assert sorted(started) == sorted([running, *queued])  # each exactly once
    gateway.ok(["scancel", str(held)])
    acct = gateway.ok(
        [
            "sacct",
            "-X",
            "-n",
            "-P",
            "-o",
            "JobID,State",
            "-j",
            ",".join(map(str, [running, *queued, held])),
        ]
    ).splitlines()
    assert f"{running}|COMPLETED" in acct
    assert f"{held}|CANCELLED by 0" in acct


def test_a_job_that_just_ended_is_still_shown_after_a_restart(gateway: Gateway) -> None:
    """As after a slurmctld restart (its saved state keeps finished jobs for MinJobAge):
    `squeue -t all -j N` shows the job that completed before the restart."""
    job = gateway.sbatch("-o", "/dev/null", "--wrap", "true")
    assert gateway.wait(job, timeout=60)["state"] == "COMPLETED"
    stop_gateway(gateway)
    restart(gateway)
    shown = gateway.ok(["squeue", "-h", "-t", "all", "-j", str(job), "-o", "%i %T"])
    assert shown.split() == [str(job), "COMPLETED"]
