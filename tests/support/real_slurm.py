"""The real test cluster's commands for differential tests: run one as a user would, and
submit jobs that are all cancelled when the test ends, whatever happens in between."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tests.support.slurm_stack import cancel, job_id_from_sbatch, slurm_env

__all__ = ["real_jobs", "run_real"]


def run_real(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """One Slurm command against the test cluster (SLURM_CONF set, no SLURM_* inherited)."""
    return subprocess.run(argv, env=slurm_env(), capture_output=True, text=True, timeout=60)


@contextmanager
def real_jobs() -> Iterator[Callable[..., str]]:
    """`submit(*sbatch_args)` -> the job id (`sbatch --parsable`, which must succeed); every
    job submitted is cancelled on the way out."""
    submitted: list[str] = []

    def submit(*args: str) -> str:
        done = run_real(["sbatch", "--parsable", *args])
        assert done.returncode == 0, done.stderr
        submitted.append(job_id_from_sbatch(done.stdout))
        return submitted[-1]

    try:
        yield submit
    finally:
        cancel(*submitted)
