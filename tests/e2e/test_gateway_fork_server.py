"""The real gateway and its fork server killed together with SIGKILL while jobs of a real
user run: the jobs finish, the next gateway reports them COMPLETED, none ran twice."""

from __future__ import annotations

import json
import os
import signal
import time

import psutil

from tests.support.gateway_env import Gateway, restart


def _pid_of(path: str) -> int:
    with open(path) as fh:
        text = fh.read().strip()
    return int(json.loads(text)["pid"]) if text.startswith("{") else int(text)


def _gone(pid: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while psutil.pid_exists(pid):
        if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return
        assert time.monotonic() < deadline, f"pid {pid} still alive"
        time.sleep(0.05)


def test_sigkill_of_gateway_and_fork_server_loses_no_job_and_runs_none_twice(
    gateway: Gateway,
) -> None:
    gate = gateway.workdir / "go"
    runs = gateway.workdir / "runs.log"
    body = (
        f'flock {runs} sh -c "echo start $SLURM_JOB_ID >> {runs}"; '
        f"while [ ! -e {gate} ]; do sleep 0.05; done; "
        f'flock {runs} sh -c "echo end $SLURM_JOB_ID >> {runs}"'
    )
    try:
        count = min(3, os.cpu_count() or 1)  # all running at once on this machine's node
        jobs = [gateway.sbatch("--wrap", body, user="tester") for _ in range(count)]
        for job in jobs:
            gateway.wait(job, states=("RUNNING",))
        deadline = time.monotonic() + 30
        while len(runs.read_text().splitlines() if runs.exists() else []) < len(jobs):
            assert time.monotonic() < deadline, "the jobs did not start"
            time.sleep(0.05)
        gw_pid = _pid_of(str(gateway.home / "gateway.pid"))
        server = _pid_of(str(gateway.home / "spool" / "forkserver" / "server.json"))
        assert "--fork-server" in psutil.Process(server).cmdline()

        os.kill(gw_pid, signal.SIGKILL)
        os.kill(server, signal.SIGKILL)
        _gone(gw_pid)
        _gone(server)
        gate.touch()  # the jobs go on to their end with neither process alive
        restart(gateway)

        for job in jobs:
            assert gateway.wait(job, timeout=120)["state"] == "COMPLETED"
        lines = sorted(runs.read_text().split("\n")[:-1])
        assert lines == sorted([f"end {j}" for j in jobs] + [f"start {j}" for j in jobs])
        acct = gateway.ok(
            ["sacct", "-X", "-n", "-P", "-D", "-o", "JobID,State", "-j", ",".join(map(str, jobs))]
        ).split()
        assert sorted(acct) == sorted(f"{j}|COMPLETED" for j in jobs)  # -D: one run each
        for job in jobs:
            assert "Restarts=0" in gateway.ok(["scontrol", "show", "job", str(job)])
    finally:
        gate.touch()  # a failure must not leave the gated jobs waiting forever
    # and the new gateway starts jobs through a new fork server
    later = gateway.sbatch("--wrap", "true", user="tester")
    assert gateway.wait(later)["state"] == "COMPLETED"
    assert _pid_of(str(gateway.home / "spool" / "forkserver" / "server.json")) != server
