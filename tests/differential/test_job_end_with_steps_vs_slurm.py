"""A job that ends while an srun step runs (scancel, its time limit), on Caldera's local site
described by the test cluster's slurm.conf and on the real Slurm 22.05 cluster: the same
output file and sacct records.

What the test cluster does, and Caldera did not: srun says `Job step aborted: Waiting up to
7 seconds for job step to finish.` (KillWait + 2), `got SIGCONT` and `forcing job
termination`, slurmstepd writes `*** STEP ID.0 ON node01 CANCELLED AT ... ***` (with ` DUE
TO TIME LIMIT` at the limit) beside the JOB line, and srun reports its task `Terminated`;
a task that traps SIGTERM runs its trap to the end and is `Killed` after KillWait. The step
ends 0:15 (0:9 when killed), the job's DerivedExitCode is 0:0. Caldera killed srun with the
batch shell: no srun line, the step 0:9, DerivedExitCode 0:9. The lines of srun and of
slurmstepd come from different processes, in any order (between the task's own lines
too): they are compared sorted, apart from the task's output and srun's error lines.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support.gateway_env import running_gateway
from tests.support.real_slurm import real_jobs, run_real
from tests.support.slurm_stack import SlurmStack

pytestmark = pytest.mark.slurm

Run = Callable[[list[str]], subprocess.CompletedProcess[str]]

_SCRIPTS = {
    "plain": '#!/bin/bash\nsrun sleep 300\necho "srun rc=$?"\n',
    "trap": (
        "#!/bin/bash\n"
        'srun bash -c \'trap "echo trapped; sleep 2; echo done-trap" TERM; '
        "sleep 300 & wait; sleep 30'\n"
        'echo "srun rc=$?"\n'
    ),
}
_SOMETIMES = ("*** STEP", "srun: forcing job termination")
_RACY = re.compile(r"Job step aborted|got SIGCONT|forcing job termination|\*\*\* (STEP|JOB) ")


def _until(what: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline
        time.sleep(0.3)


def _scenario(run: Run, submit: Callable[..., str], where: Path, side: str) -> list[str]:
    """Three jobs, each with a running step: one at its time limit, two cancelled."""
    jobs = {
        "limit": submit("-t", "1", "-o", str(where / f"{side}-%j.out"), str(where / "plain.sh")),
        "plain": submit("-o", str(where / f"{side}-%j.out"), str(where / "plain.sh")),
        "trap": submit("-o", str(where / f"{side}-%j.out"), str(where / "trap.sh")),
    }

    def step_runs(job: str) -> bool:
        return f"{job}.0" in run(["squeue", "-h", "-s", "-j", job, "-o", "%i"]).stdout.split()

    def gone(job: str) -> bool:
        return not run(["squeue", "-h", "-j", job, "-o", "%i"]).stdout.strip()

    for job in jobs.values():
        _until(lambda job=job: step_runs(job), 90)  # type: ignore[misc]
    time.sleep(1)  # the trap is set
    seen = []
    for name in ("plain", "trap"):
        done = run(["scancel", jobs[name]])
        seen.append(f"scancel {name}: rc={done.returncode} {done.stdout}{done.stderr}")
    for job in jobs.values():
        _until(lambda job=job: gone(job), 180)  # type: ignore[misc]
    acct = ["sacct", "-n", "-P", "-o", "JobID,State,ExitCode,DerivedExitCode", "-j"]
    for name, job in jobs.items():

        def named(text: str, job: str = job) -> str:
            text = re.sub(r"AT \S+", "AT <time>", text)
            return re.sub(rf"(?<![\w.:=\-]){job}(?![\w\-])", "JOB", text)

        lines = named((where / f"{side}-{job}.out").read_text()).splitlines()
        told = sorted(line for line in lines if _RACY.search(line))
        seen.append(f"{name} output:\n" + "\n".join(x for x in lines if not _RACY.search(x)))
        seen.append(f"{name} told:\n" + "\n".join(told))
        _until(lambda job=job: ".0|CANCELLED" in run([*acct, job]).stdout, 60)  # type: ignore[misc]
        seen.append(f"{name} sacct:\n" + named(run([*acct, job]).stdout).replace(" by 0", ""))
    return seen


def _without_missing(ours: list[str], theirs: list[str]) -> list[str]:
    """Caldera's answers without the lines Slurm now and then leaves out, where it did:
    slurmstepd's STEP line (1 run in 4 here) and, at the time limit, srun's `forcing job
    termination` (2 runs in 5: the task was gone before the batch step's SIGTERM reached
    srun). Caldera always writes both."""
    out = list(ours)
    for i, told in enumerate(theirs):
        for line in _SOMETIMES:
            if told.split(":\n")[0].endswith(" told") and line not in told:
                out[i] = "\n".join(x for x in out[i].split("\n") if line not in x)
    return out


def test_a_job_ending_with_a_running_step_is_told_and_recorded_as_slurm_does_it(
    cluster: SlurmStack,
) -> None:
    where = Path(tempfile.mkdtemp(prefix="job-end-steps-", dir="/tmp"))
    where.chmod(0o777)
    for name, text in _SCRIPTS.items():
        (where / f"{name}.sh").write_text(text)
    config = f'[local]\nslurm_conf = "{cluster.slurm_conf}"\n'
    with real_jobs() as submit, running_gateway(config) as gw, ThreadPoolExecutor(2) as pool:
        # both sides at once: the time limit costs each a minute and a half
        theirs = pool.submit(_scenario, run_real, submit, where, "real")
        ours = pool.submit(
            _scenario,
            lambda argv: gw.run(argv),
            lambda *args: str(gw.sbatch(*args)),
            where,
            "ours",
        )
        got_theirs, got_ours = theirs.result(), ours.result()
    assert "task 0: Terminated" in got_theirs[2]  # the scenario ran as meant
    assert "DUE TO TIME LIMIT" in got_theirs[3]
    if _without_missing(got_ours, got_theirs) != got_theirs:
        # Slurm's own answer varies from run to run (above): Caldera's must be one Slurm
        # gave, so one more real run is asked before it is called different
        with real_jobs() as submit:
            got_theirs = _scenario(run_real, submit, where, "real")
    assert _without_missing(got_ours, got_theirs) == got_theirs, "\n".join(
        [*got_ours, "=== real Slurm:", *got_theirs]
    )
    shutil.rmtree(where, ignore_errors=True)


_WAITING = """#!/bin/sh
srun -N 2 --ntasks-per-node=1 sleep 300 &
sleep 2
srun -n1 hostname
echo "srun2 rc=$?"
wait
"""


def _waiting_scenario(run: Run, submit: Callable[..., str], where: Path, side: str) -> list[str]:
    """A 2-node job cancelled while its second srun waits for the CPUs the first holds."""
    job = submit("-N2", "-o", str(where / f"{side}-%j.out"), str(where / "waiting.sh"))
    _until(lambda: f"{job}.0" in run(["squeue", "-h", "-s", "-j", job, "-o", "%i"]).stdout, 90)
    time.sleep(2)  # the second srun waits
    run(["scancel", job])
    _until(lambda: not run(["squeue", "-h", "-j", job, "-o", "%i"]).stdout.strip(), 60)
    text = re.sub(r"AT \S+", "AT <time>", (where / f"{side}-{job}.out").read_text())
    named = rf"(?<=[Jj]ob ){job}\b|(?<=JOB ){job}\b|(?<=STEP ){job}(?=\.)"
    lines = re.sub(named, "JOB", text).splitlines()

    def racy(line: str) -> bool:  # (the two nodes' tasks end in either order on Slurm)
        return bool(_RACY.search(line)) or line.endswith(": Terminated")

    told = sorted(line for line in lines if racy(line))
    return [x for x in lines if not racy(x)] + ["told:", *told]


# slurmstepd's `*** STEP JOB.0 ON node01 CANCELLED ***` for the running step: the cluster
# printed it in 3 of 4 runs of this scenario in a row (2026-11-28), so it is compared only
# where both sides have it
_STEP_LINE = "slurmstepd-node01: error: *** STEP JOB.0 ON node01 CANCELLED AT <time> ***"


def test_an_srun_waiting_for_its_step_when_the_job_ends_says_so_as_slurm_does(
    cluster: SlurmStack,
) -> None:
    """slurmctld refuses a waiting step as soon as the job ends, before slurmstepd signals:
    srun says the step creation was disabled, then `Unable to create step ...: Job/step
    already completing or completed`, and the script goes on (`srun2 rc=1`). Caldera's
    srun was told after the signals, or SIGKILLed silently with the job."""
    where = Path(tempfile.mkdtemp(prefix="job-end-waiting-", dir="/tmp"))
    where.chmod(0o777)
    (where / "waiting.sh").write_text(_WAITING)
    with real_jobs() as submit:
        theirs = _waiting_scenario(run_real, submit, where, "real")
    assert "srun2 rc=1" in theirs, theirs  # the scenario ran as meant
    config = f'[local]\nslurm_conf = "{cluster.slurm_conf}"\n'
    with running_gateway(config) as gw:
        ours = _waiting_scenario(
            lambda argv: gw.run(argv), lambda *args: str(gw.sbatch(*args)), where, "ours"
        )
    if _STEP_LINE not in theirs:
        ours = [line for line in ours if line != _STEP_LINE]
    assert ours == theirs, "\n".join([*ours, "=== real Slurm:", *theirs])
    shutil.rmtree(where, ignore_errors=True)


# the step's task marks that it runs: a requeue while slurmstepd still launches it makes
# the cluster's srun add `launch_p_step_launch: StepId=J.0 aborted before step completely
# launched.` (seen once in a CI run), which is not the scenario
_MARKED = (
    '#!/bin/bash\nsrun bash -c \'touch "$0"; exec sleep 300\' "started-$SLURM_JOB_ID"\n'
    'echo "srun rc=$?"\n'
)


def _requeue_scenario(run: Run, submit: Callable[..., str], where: Path, side: str) -> list[str]:
    """A job requeued (scontrol requeue) while its srun step runs, then cancelled pending."""
    job = submit("-o", str(where / f"{side}-%j.out"), "-D", str(where), str(where / "marked.sh"))
    _until(lambda: (where / f"started-{job}").exists(), 90)
    time.sleep(0.5)  # slurmstepd's launch answer to srun, sent as the task starts
    done = run(["scontrol", "requeue", job])
    seen = [f"requeue: rc={done.returncode} {done.stdout}{done.stderr}"]
    _until(lambda: run(["squeue", "-h", "-j", job, "-o", "%T"]).stdout.strip() == "PENDING", 60)
    acct = ["sacct", "-D", "-n", "-P", "-o", "JobID,State,ExitCode", "-j", job]
    _until(lambda: ".0|CANCELLED" in run(acct).stdout, 60)
    seen.append(run(["squeue", "-h", "-j", job, "-o", "%T|%r"]).stdout)
    rows = re.sub(rf"^{job}(?=[.|])", "JOB", run(acct).stdout, flags=re.M).splitlines()
    seen += [_BATCH_ENDS.get(row, row) for row in rows if not row.endswith("|PENDING|0:0")]
    run(["scancel", job])
    text = re.sub(r"AT \S+", "AT <time>", (where / f"{side}-{job}.out").read_text())
    lines = re.sub(rf"(?<=JOB ){job}\b|(?<=STEP ){job}(?=\.)", "JOB", text).splitlines()
    lines = [x for x in lines if x != "srun rc=143" and "forcing job termination" not in x]
    return seen + [x for x in lines if not _RACY.search(x)] + sorted(filter(_RACY.search, lines))


# Slurm's racy ends of a requeued run (3 runs here): the step's tasks may die of the SIGTERM
# before the batch shell does, which then says `srun rc=143` and ends COMPLETED; the run's
# new PENDING record reaches sacct a moment later or not; srun may not force termination
_BATCH_ENDS = {
    "JOB.batch|COMPLETED|0:0": "JOB.batch|COMPLETED 0:0 or CANCELLED 0:15",
    "JOB.batch|CANCELLED|0:15": "JOB.batch|COMPLETED 0:0 or CANCELLED 0:15",
}


def test_a_job_requeued_with_a_running_step_says_so_as_slurm_does(cluster: SlurmStack) -> None:
    """`scontrol requeue` of a running job: slurmstepd says `*** JOB ... CANCELLED AT ...
    DUE TO JOB REQUEUE ***` and the same of the running step (srun: aborted, forcing job
    termination, its task Terminated); the run is REQUEUED, its steps CANCELLED 0:15, and
    the job pends (BeginTime). Caldera said a plain `CANCELLED AT ...` for both."""
    where = Path(tempfile.mkdtemp(prefix="job-end-requeue-", dir="/tmp"))
    where.chmod(0o777)
    (where / "marked.sh").write_text(_MARKED)
    config = f'[local]\nslurm_conf = "{cluster.slurm_conf}"\n'
    with real_jobs() as submit, running_gateway(config) as gw, ThreadPoolExecutor(2) as pool:
        theirs = pool.submit(_requeue_scenario, run_real, submit, where, "real")
        ours = pool.submit(
            _requeue_scenario,
            lambda argv: gw.run(argv),
            lambda *args: str(gw.sbatch(*args)),
            where,
            "ours",
        )
        got_theirs, got_ours = theirs.result(), ours.result()
    assert any("DUE TO JOB REQUEUE" in line for line in got_theirs), got_theirs
    assert got_ours == got_theirs, "\n".join([*got_ours, "=== real Slurm:", *got_theirs])
    shutil.rmtree(where, ignore_errors=True)
