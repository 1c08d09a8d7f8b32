"""The local runner as a hostile job user sees it: root never follows, blocks on or trusts
what the user puts in the job's `steps/`; the submitter's umask reaches the job; a finished
job's spool (it holds the environment) goes after MinJobAge while sacct keeps the job.

Real supervisors, real srun, the real user `tester`; nothing mocked.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from containers.backend import LocalBackend
from containers.interpreter import shared_python
from gateway.model.state import JobState
from tests.integration.test_local_backend_support import Env, make_launch, wait_for
from tests.support.gateway_env import Gateway, discard_gateway, start_gateway

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="runs jobs as other users (root)")

RACE_S = 20.0

# Run as `tester`: until the deadline, replace every entry of the job's steps/ (srun's
# records and temporary files, and names root used to write there) with a symlink to the
# canary, and try to plant symlinks in the root-owned job directory.
_RACER = r"""
import os, sys, time
steps, jobdir, canary, until = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
n = swaps = rounds = 0
done = set()
while time.time() < until:
    rounds += 1
    if rounds % 200 == 0:
        done.clear()  # srun rewrites its records: swap them again
    try:
        names = os.listdir(steps)
    except OSError:
        time.sleep(0.01)
        continue
    extra = ["batch.json", ".batch.json.x", f"{len(names)}.json", f"{len(names) + 1}.json"]
    temporaries = rounds % 50 != 0  # mostly the temporary files: their window is short
    for name in names if temporaries else names + extra:
        if name.startswith(".r") or (temporaries and not name.startswith(".")) or name in done:
            continue
        n += 1
        link = os.path.join(steps, f".r{n}")
        try:
            os.symlink(canary, link)
            os.rename(link, os.path.join(steps, name))
            swaps += 1
            done.add(name)
        except OSError:
            pass
    for name in ("batch_step.json", "closed_steps.json", "result.json", "supervisor.json"):
        try:
            os.symlink(canary, os.path.join(jobdir, name + ".tmp"))
            raise SystemExit("planted a symlink in the root-owned job directory")
        except OSError:
            pass
print(swaps)
"""


@pytest.fixture
def env() -> Iterator[Env]:
    root = Path(tempfile.mkdtemp(prefix="h1b-priv-", dir="/tmp"))
    root.chmod(0o755)
    work = root / "work"
    work.mkdir()
    work.chmod(0o1777)
    yield Env(root=root, spool=root / "spool", work=work)
    shutil.rmtree(root, ignore_errors=True)


def _fingerprint(path: Path) -> tuple[int, int, int, int, bytes]:
    st = path.lstat()
    return (st.st_mode, st.st_uid, st.st_gid, st.st_ctime_ns, path.read_bytes())


def _poll_until_finished(backend: LocalBackend, job_id: int, timeout: float) -> JobState:
    """Poll as the gateway does (reading the user's records as root) until the job ends;
    every poll must return promptly."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        began = time.monotonic()
        events = backend.poll()
        assert time.monotonic() - began < 2.0, "a poll blocked or read too much"
        for ev in events:
            if ev.job_id == job_id and ev.kind.value in ("finished", "lost"):
                assert ev.state is not None
                return ev.state
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} did not end in {timeout} s")


def test_a_racing_job_user_cannot_make_root_touch_a_root_file(env: Env) -> None:
    canary = env.root / "canary"
    canary.write_bytes(b"root's secret\n")
    canary.chmod(0o600)
    before = _fingerprint(canary)
    backend = env.backend()
    script = (
        "#!/bin/bash\n"
        f"end=$((SECONDS + {int(RACE_S)}))\n"
        "while [ $SECONDS -lt $end ]; do srun true 2>/dev/null; done\n"
        "exit 0\n"
    )
    launch = make_launch(env, script, user="tester")
    job_id = launch.job.job_id
    backend.submit(launch)
    jobdir = backend.job_dir(job_id)
    racer = subprocess.Popen(
        [
            "runuser",
            "-u",
            "tester",
            "--",
            shared_python(sys.executable),
            "-c",
            _RACER,
            str(jobdir / "steps"),
            str(jobdir),
            str(canary),
            str(time.time() + RACE_S + 2),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        state = _poll_until_finished(backend, job_id, RACE_S + 30)
        out, err = racer.communicate(timeout=30)
    finally:
        racer.kill()
    assert racer.returncode == 0, err
    assert int(out) > 100, "the racer never got to swap anything"
    assert _fingerprint(canary) == before
    assert state is JobState.COMPLETED
    log = (jobdir / "supervisor.log").read_text()
    assert "Traceback" not in log, log
    steps = backend.steps(job_id)
    assert steps[0].step_id == "batch"
    assert steps[0].state is JobState.COMPLETED


def test_fifos_devices_and_forged_records_in_steps_neither_block_nor_mislead_root(
    env: Env,
) -> None:
    backend = env.backend()
    script = (
        "#!/bin/bash\n"
        'cd "$CALDERA_STEP_DIR"\n'
        "mkfifo 0.json\n"
        "ln -s /dev/zero 1.json\n"
        "head -c 2000000 /dev/zero > 2.json\n"
        "head -c 200000 /dev/zero | tr '\\0' '[' > 3.json\n"
        'echo \'{"step_id": "4", "state": "COMPLETED", "exit_code": 1e999}\' > 4.json\n'
        'echo \'{"step_id": "4", "state": "COMPLETED", "exit_code": 99999999999999999999}\''
        " > 5.json\n"
        'echo \'{"step_id": "batch", "state": "FAILED", "exit_code": 256}\' > 6.json\n'
        "ln -s /etc/shadow 7.json\n"
        'echo \'{"step_id": "8", "state": "PENDING"}\' > 8.json\n'
        "cd /\n"
        "srun true\n"
        "sleep 0.5\n"
    )
    launch = make_launch(env, script, user="tester")
    job_id = launch.job.job_id
    backend.submit(launch)
    assert _poll_until_finished(backend, job_id, 30) is JobState.COMPLETED
    steps = backend.steps(job_id)
    assert [(s.step_id, s.state, s.exit_code) for s in steps] == [
        ("batch", JobState.COMPLETED, 0),
        ("9", JobState.COMPLETED, 0),
    ]
    assert "Traceback" not in (backend.job_dir(job_id) / "supervisor.log").read_text()


def test_root_writes_only_in_its_own_directories_and_keeps_secrets_private(env: Env) -> None:
    backend = env.backend()
    launch = make_launch(env, "#!/bin/bash\nsrun true\n", user="tester")
    backend.submit(launch)
    jobdir = wait_for(backend, launch.job.job_id)
    tester = launch.job.uid
    modes = {p.name: (stat.S_IMODE(p.lstat().st_mode), p.lstat().st_uid) for p in jobdir.iterdir()}
    assert modes["steps"] == (0o700, tester)
    assert modes["slurm_script"] == (0o700, tester)
    assert modes["ctl"] == (0o700, 0)
    for name in ("plan.json", "supervisor.log", "batch_step.json", "result.json"):
        assert modes[name] == (0o600, 0), name
    assert stat.S_IMODE(jobdir.stat().st_mode) == 0o711
    # srun's own: its step's record and the step book's lock (its step's lock is gone)
    steps = sorted((jobdir / "steps").iterdir())
    assert [p.name for p in steps] == [".alloc.lock", "0.json"]
    assert all(p.lstat().st_uid == tester for p in steps)
    # rmtree (forget) never follows the user's symlinks out of the spool
    assert shutil.rmtree.avoids_symlink_attacks


@pytest.fixture
def short_age_gateway() -> Iterator[Gateway]:
    base = Path(tempfile.mkdtemp(prefix="h1b-gw-", dir="/tmp"))
    gw = start_gateway(base, "time_scale = 0.016666\nkill_wait_s = 2\nmin_job_age_s = 1\n")
    try:
        yield gw
    finally:
        discard_gateway(gw, base)


def test_the_submitters_umask_reaches_the_job_and_spools_go_after_min_job_age(
    short_age_gateway: Gateway,
) -> None:
    gw = short_age_gateway
    script = gw.workdir / "umask.sh"
    script.write_text(
        "#!/bin/bash\n"
        'echo "umask=$(umask) env=${SLURM_UMASK-unset}"\n'
        "touch made-$SLURM_JOB_ID\n"
        "srun bash -c 'echo step umask=$(umask)'\n"
    )
    script.chmod(0o755)
    jobs = {}
    for mask in ("077", "022"):
        sbatch = f"umask {mask}; sbatch --parsable -o out-%j {script}"
        jobs[mask] = int(gw.ok(sbatch, user="tester").strip())
    for mask, job_id in jobs.items():
        assert gw.wait(job_id)["state"] == "COMPLETED"
        mode = 0o600 if mask == "077" else 0o644
        out = gw.workdir / f"out-{job_id}"
        assert stat.S_IMODE(out.stat().st_mode) == mode
        assert stat.S_IMODE((gw.workdir / f"made-{job_id}").stat().st_mode) == mode
        # slurmstepd applies SLURM_UMASK to the batch script and unsets it there
        assert out.read_text().splitlines() == [f"umask=0{mask} env=unset", f"step umask=0{mask}"]
    jobs_dir = gw.home / "spool" / "jobs"
    deadline = time.monotonic() + 20
    while any((jobs_dir / str(j)).exists() for j in jobs.values()):
        assert time.monotonic() < deadline, sorted(os.listdir(jobs_dir))
        time.sleep(0.1)
    assert not [p for p in jobs_dir.iterdir() if p.name.startswith(".")]
    for job_id in jobs.values():
        acct = gw.ok(["sacct", "-n", "-P", "-j", str(job_id), "-o", "JobID,State"])
        assert sorted(acct.split()) == [
            f"{job_id}.0|COMPLETED",
            f"{job_id}.batch|COMPLETED",
            f"{job_id}|COMPLETED",
        ]
