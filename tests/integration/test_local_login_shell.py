"""A login-shell batch script (`#!/bin/bash -l`, common in HPC guides) still finds the job's srun.

/etc/profile resets PATH before the script runs; on a Slurm node the real srun is in that PATH,
on this machine the job's srun shim is not, unless the profile hook puts it back.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from containers.launching import (
    PROFILE_HOOK,
    SHIMS_DIR_VAR,
    SHIMS_MARKER,
    SRUN_DIR_VAR,
    shims_dir,
)
from gateway.model.state import JobState
from tests.integration.test_local_backend_support import Env, finish, make_launch, temporary_env

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="runs jobs as other users (root)")


@pytest.fixture
def local_env() -> Iterator[Env]:
    yield from temporary_env()


def test_a_login_shell_script_runs_the_jobs_srun(local_env: Env) -> None:
    backend = local_env.backend()
    assert PROFILE_HOOK.read_text().startswith("# Caldera")
    assert PROFILE_HOOK.stat().st_uid == 0
    assert PROFILE_HOOK.stat().st_mode & 0o022 == 0
    script = (
        "#!/bin/bash -l\n"
        'echo "srun=$(command -v srun)"\n'
        "srun -n2 bash -c 'echo task $SLURM_PROCID'\n"
    )
    launch = make_launch(local_env, script, ["-n2"], user="tester", tasks=2, cpus=2)
    event = finish(backend, launch)
    out = (local_env.work / f"slurm-{launch.job.job_id}.out").read_text()
    assert event.state is JobState.COMPLETED, out
    assert f"srun={local_env.spool / 'bin' / 'srun'}\n" in out
    assert sorted(line for line in out.splitlines() if line.startswith("task")) == [
        "task 0",
        "task 1",
    ]
    steps = [s.step_id for s in backend.steps(launch.job.job_id)]
    assert steps == ["batch", "0"]


def test_the_hook_only_acts_inside_a_job(tmp_path: Path) -> None:
    """Outside a job (no CALDERA_SRUN_DIR) a login shell's PATH is the distribution's."""
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    plain = subprocess.run(
        ["bash", "-lc", 'echo "$PATH"'], env=env, capture_output=True, text=True, check=True
    ).stdout
    inside = subprocess.run(
        ["bash", "-lc", 'echo "$PATH"'],
        env={**env, "CALDERA_SRUN_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert str(tmp_path) not in plain.split(":")
    assert inside.split(":")[0] == str(tmp_path)
    assert inside.strip().split(":")[1:] == plain.strip().split(":")


def test_the_hook_also_restores_the_submitters_caldera_commands(tmp_path: Path) -> None:
    """A login shell drops Caldera's scontrol with the rest of the submitter's PATH (ULHPC's
    gurobi launcher runs `scontrol show hostname` in its tasks): CALDERA_SHIMS_DIR, which
    the job gets when its PATH held `caldera shims`' directory, comes back after srun's."""
    shims = tmp_path / "shims"
    shims.mkdir()
    (shims / SHIMS_MARKER).write_text("")
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    assert shims_dir(f"relative:/nonexistent:{shims}:{tmp_path}") == str(shims)
    inside = subprocess.run(
        ["bash", "-lc", 'echo "$PATH"'],
        env={**env, SRUN_DIR_VAR: str(tmp_path), SHIMS_DIR_VAR: str(shims)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert inside.split(":")[:2] == [str(tmp_path), str(shims)]
