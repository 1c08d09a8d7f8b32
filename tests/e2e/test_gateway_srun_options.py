"""srun's options inside a job and sbatch's submission checks, on a gateway whose local
site is the real test cluster's own slurm.conf and on that cluster (issue 14, items 5 and
9 of docs/compatibility.md's corpus lifecycle): the same script or command line, the same
lines and exit codes."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.gateway_env import Gateway, running_gateway
from tests.support.slurm_stack import SlurmStack, cancel, job_id_from_sbatch, slurm_env

pytestmark = pytest.mark.slurm

# `t` prints each command with the job's own id as N, then what it printed and its status
STEPS = r"""#!/bin/bash
t() { echo "== $*" | sed "s/--jobid=$SLURM_JOB_ID /--jobid=N /"; "$@" 2>&1; echo "rc=$?"; }
t srun --jobid=$SLURM_JOB_ID printenv SLURMD_NODENAME
t srun --jobid=999999 true
t srun --jobid=12x true
t srun --no-kill true
t srun -k true
t srun --no-kill=off true
t srun -kx true
t srun --cpu_bind=none true
t srun --cpu-bind= true
t srun --cpu_bind= true
t srun --cpu-bind=verbose,cores true
t srun --cpu-bind=map_cpu:0,1 true
t srun --cpu-bind=boards true
t srun --cpu-bind=none -n 8 true
t srun --gres=craynetwork:1 true
t srun --gres=gpu:1 -n 4 true
t srun --gpus=1 true
t srun --gres=gpu:0 true
t srun --gres=none true
t srun --gres= true
"""

# sbatch command lines whose answer (exit status, stderr) and, when accepted, whose job
# (its node count and task layout) must be Slurm's
SUBMISSIONS = (
    ("--array=500-1500:1000",),
    ("--array=0-100001",),
    ("--array=100000",),
    ("-n", "3", "--ntasks-per-node=1"),
    ("-n", "3", "-c", "2"),
    ("-n", "5", "--ntasks-per-node=1"),
    ("-n", "3", "-c", "2", "-N", "2"),
    ("-n", "4", "--ntasks-per-node=2", "-c", "2"),
)
LAYOUT = 'echo "$SLURM_JOB_NUM_NODES $SLURM_TASKS_PER_NODE $SLURM_JOB_CPUS_PER_NODE"'
# slurmctld frees a step's CPUs a moment after it ends: the next step may wait for them
# (timing, not behaviour; Caldera's steps never wait)
_WAITS = ("srun: Job N step creation temporarily disabled", "srun: Step created for job N")


@pytest.fixture
def real_site() -> Iterator[Gateway]:
    config = '[local]\nslurm_conf = "/tmp/caldera-slurm/etc/slurm.conf"\n'
    with running_gateway(config, "caldera-srunopt-") as gw:
        yield gw


def _normal(text: str) -> str:
    text = re.sub(r"([Jj]ob) \d+", r"\1 N", text)
    return "".join(line for line in text.splitlines(True) if not line.startswith(_WAITS))


def _real(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, env=slurm_env(), cwd=cwd, capture_output=True, text=True, timeout=120
    )


def _wait_real(job: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _real(["squeue", "-h", "-j", job], Path("/tmp")).stdout.strip():
            return
        time.sleep(1)
    raise AssertionError(f"real job {job} did not end")


@pytest.fixture
def real_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="srunopt-real-", dir="/tmp"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_srun_options_inside_a_job_answer_as_slurm(
    slurm_cluster: SlurmStack, real_site: Gateway, real_dir: Path
) -> None:
    script = real_dir / "steps.sh"
    script.write_text(STEPS)
    script.chmod(0o755)
    argv = ["sbatch", "--parsable", "-p", "real", "-N", "1", "-w", "node01"]
    done = _real([*argv, "-o", str(real_dir / "real.out"), str(script)], real_dir)
    assert done.returncode == 0, done.stderr
    job = job_id_from_sbatch(done.stdout)
    try:
        _wait_real(job)
    finally:
        cancel(job)
    theirs = _normal((real_dir / "real.out").read_text())
    gw = real_site
    ours_script = gw.workdir / "steps.sh"
    ours_script.write_text(STEPS)
    ours_job = gw.sbatch(
        "-p", "real", "-N", "1", "-w", "node01", "-o", str(gw.workdir / "ours.out"),
        str(ours_script),
    )  # fmt: skip
    gw.wait(ours_job, timeout=120)
    ours = _normal((gw.workdir / "ours.out").read_text())
    assert "== srun --jobid=N printenv SLURMD_NODENAME\nnode01\nrc=0\n" in theirs
    assert ours == theirs


def _submit_both(
    gw: Gateway, real_dir: Path, args: tuple[str, ...]
) -> tuple[tuple[int, str, str], tuple[int, str, str]]:
    """(exit status, stderr, the job's layout line) of one sbatch on each side."""
    argv = ["sbatch", "--parsable", "-p", "real", *args]
    sides: list[tuple[int, str, str]] = []
    for run, workdir in ((lambda a: _real(a, real_dir), real_dir), (gw.run, gw.workdir)):
        out = workdir / f"layout-{len(sides)}-{'_'.join(args)}.out"
        done = run([*argv, "-o", str(out), f"--wrap={LAYOUT}"])
        layout = ""
        if done.returncode == 0:
            job = job_id_from_sbatch(done.stdout)
            if workdir == real_dir:
                try:
                    _wait_real(job)
                finally:
                    cancel(job)
            else:
                gw.wait(int(job), timeout=120)
            if "--array" not in " ".join(args):
                layout = out.read_text()
        sides.append((done.returncode, done.stderr, layout))
    return sides[0], sides[1]


@pytest.mark.parametrize("args", SUBMISSIONS, ids=[" ".join(a) for a in SUBMISSIONS])
def test_submission_checks_answer_as_slurm(
    slurm_cluster: SlurmStack, real_site: Gateway, real_dir: Path, args: tuple[str, ...]
) -> None:
    theirs, ours = _submit_both(real_site, real_dir, args)
    assert ours == theirs
