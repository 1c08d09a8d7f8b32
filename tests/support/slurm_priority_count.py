"""A test cluster whose priority/basic count is where slurmctld starts it (near 2^32).

slurmctld numbers each new job one below `lowest_prio`, which a (re)start takes from the
lowest counted priority among the jobs in its state (job_mgr.c, 22.05): one job whose user
lowered its priority to 5, still within MinJobAge when slurmctld restarted, numbers every
later job 4, 3, 2, 1, 1... The priority differentials need the count as meant, so they
first check it, and when it is low wait for such jobs to age out and restart slurmctld
(minutes, only then)."""

from __future__ import annotations

import subprocess
import time

from tests.support.slurm_burst_conf import restart_slurmctld
from tests.support.slurm_stack import SlurmStack

__all__ = ["COUNTED", "fresh_priority_count"]

COUNTED = 1_000_000  # below this, a priority is not one of the count's (2^32 - 65536 - n)
_AGE_OUT_S = 420  # MinJobAge (300 s) and slurmctld's purge interval, with room


def _slurm(stack: SlurmStack, *argv: str) -> str:
    done = subprocess.run(
        list(argv), env=stack.env_dict(), capture_output=True, text=True, timeout=60
    )
    return done.stdout


def _next_number(stack: SlurmStack) -> int:
    """The number a new job gets now; the probe leaves the count alone afterwards (root
    sets its priority: a set priority is no part of the count, at a restart neither)."""
    job = (
        _slurm(
            stack, "sbatch", "--parsable", "-o", "/dev/null", "--begin=now+1hour", "--wrap", "true"
        )
        .strip()
        .split(";")[0]
    )
    number = _slurm(stack, "squeue", "-h", "-j", job, "-o", "%Q").strip()
    _slurm(stack, "scontrol", "update", f"jobid={job}", f"priority={COUNTED + 1}")
    _slurm(stack, "scancel", job)
    return int(number) if number.isdigit() else 0


def _low_jobs(stack: SlurmStack) -> list[str]:
    listed = _slurm(stack, "squeue", "-h", "-t", "all", "-o", "%i %Q")
    return [
        line.split()[0]
        for line in listed.splitlines()
        if len(line.split()) == 2
        and line.split()[1].isdigit()
        and 1 < int(line.split()[1]) < COUNTED
    ]


def fresh_priority_count(stack: SlurmStack) -> None:
    """Return once new jobs get numbers of the count, or fail saying why not."""
    if _next_number(stack) >= COUNTED:
        return
    deadline = time.monotonic() + _AGE_OUT_S
    while _low_jobs(stack) and time.monotonic() < deadline:
        time.sleep(10)
    restart_slurmctld(stack)
    number = _next_number(stack)
    assert number >= COUNTED, (
        f"slurmctld's priority/basic count is at {number} even after a restart: jobs "
        f"{_low_jobs(stack)} with a low, unset priority are still in its state"
    )
