"""scancel's answers on Caldera and on the real Slurm 22.05 test cluster: the same commands,
the same messages and exit codes.

What real scancel does, and Caldera did not: with a signal, -b or a filter it first looks
each id (each task of `ID_[1-3]`) up among the unfinished jobs and reports one it does not
find, or one already ended, as "Invalid job id specified" with exit 1 (-Q hides the line,
not the code); plain `scancel ID` stays silent about a job already gone. The signal is a
16-bit number: 99 is sent (the step's kill() fails, nobody is told), 65534 means "none
given", a cancel, and 65536 is 0, an unknown signal.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.gateway_env import Gateway, running_gateway
from tests.support.real_slurm import real_jobs, run_real
from tests.support.slurm_stack import SlurmStack

pytestmark = pytest.mark.slurm

Run = Callable[[list[str]], subprocess.CompletedProcess[str]]


def _state(run: Run, job: str, want: str, timeout: float = 60) -> str:
    """The job's state once it is `want` (or the last seen after the timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        got = run(["squeue", "-h", "-t", "all", "-j", job, "-o", "%T"]).stdout.strip()
        if got == want or time.monotonic() > deadline:
            return got
        time.sleep(0.3)


def _scenario(run: Run, submit: Callable[..., str]) -> list[str]:
    """Every answer of the scenario, with the job ids replaced by names."""
    seen: list[str] = []
    ids: dict[str, str] = {}

    def say(*argv: str) -> None:
        done = run(list(argv))
        text = f"$ {' '.join(argv)}\n{done.stdout}{done.stderr}"
        for job_id, name in ids.items():
            text = re.sub(rf"(?<![\w\[,\-.]){job_id}(?![0-9\],\-%])", name, text)
        seen.append(f"{text}rc={done.returncode}")

    ended = submit("-o", "/dev/null", "--wrap", "true")
    held = submit("-o", "/dev/null", "-H", "--wrap", "sleep 30")
    array = submit("-o", "/dev/null", "-H", "-a", "1-3", "--wrap", "sleep 30")
    running = submit("-o", "/dev/null", "--wrap", "sleep 60")
    ids.update({ended: "ENDED", held: "HELD", array: "ARRAY", running: "RUNNING"})
    assert _state(run, ended, "COMPLETED") == "COMPLETED"
    assert _state(run, running, "RUNNING") == "RUNNING"
    for args in (["-s", "USR1"], ["-s", "KILL"], ["-u", "root"], ["-Q", "-s", "USR1"], ["-b"], []):
        say("scancel", *args, ended)
    say("scancel", "-s", "USR1", "99999")
    say("scancel", "-s", "USR1", "99999_3")
    say("scancel", "-u", "root", "99999_[1-3]")
    say("scancel", "99999")
    say("scancel", "99999.2")
    # (a signal other than KILL to a pending job is retried for a minute and a half by
    # scancel, then refused: not asked here)
    for sig in ("0", "65536", "RTMIN"):
        say("scancel", "-s", sig, held)
    say("scancel", "-s", "KILL", f"{array}_7", "99998")
    say("scancel", "-s", "99", running)
    say("squeue", "-h", "-j", running, "-o", "%T")
    say("scancel", "-s", "65534", running)  # NO_VAL16: no signal given, so a cancel
    seen.append(_state(run, running, "CANCELLED"))
    say("scancel", "-s", "65534", held)
    seen.append(_state(run, held, "CANCELLED"))
    say("scancel", array)
    return seen


def test_scancel_answers_as_slurm(cluster: SlurmStack, gateway: Gateway) -> None:
    with real_jobs() as submit:
        theirs = _scenario(run_real, submit)
    ours = _scenario(lambda argv: gateway.run(argv), lambda *args: str(gateway.sbatch(*args)))
    assert "Invalid job id specified" in theirs[0]  # the scenario ran as meant
    assert ours == theirs


_STEPS_SCRIPT = """#!/bin/bash
srun sleep 60
echo "srun rc=$?"
srun bash -c 'trap "echo got USR1" USR1; sleep 30 & wait; echo after'
echo "srun2 rc=$?"
"""


def _step_running(run: Run, job: str, step: str, timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = run(["squeue", "-h", "-s", "-j", job, "-o", "%i"]).stdout.split()
        if f"{job}.{step}" in got:
            return True
        time.sleep(0.3)
    return False


def _step_scenario(run: Run, submit: Callable[..., str], where: Path) -> list[str]:
    """scancel of one step, then a signal to another: the answers, the job's output (the
    time stamps cut), its end in sacct."""
    seen: list[str] = []
    job = submit("-o", str(where / "step-%j.out"), str(where / "steps.sh"))

    def named(text: str) -> str:  # the job's id, not a digit of a number or step
        return re.sub(rf"(?<![\w.:=\-]){job}(?![\w\-])", "JOB", text)

    def say(*argv: str) -> None:
        done = run(list(argv))
        text = named(f"$ {' '.join(argv)}\n{done.stdout}{done.stderr}")
        seen.append(f"{text}rc={done.returncode}")

    assert _step_running(run, job, "0")
    say("scancel", f"{job}.7")  # no such step: named without its step, exit 225
    say("scancel", "-s", "USR1", f"{job}.7")  # a signal to it: nothing, exit 0
    say("scancel", f"{job}.0")
    assert _step_running(run, job, "1")
    time.sleep(1)  # the trap is set
    say("scancel", "-s", "USR1", f"{job}.1")
    assert _state(run, job, "COMPLETED") == "COMPLETED"
    out = (where / f"step-{job}.out").read_text()
    lines = named(re.sub(r"AT \S+ \*\*\*", "AT <time> ***", out)).splitlines()
    # srun's and slurmstepd's lines come from two processes, in either order on Slurm
    racy = [i for i, line in enumerate(lines) if "Job step aborted" in line or "*** STEP" in line]
    for i, line in zip(racy, sorted(lines[i] for i in racy), strict=True):
        lines[i] = line
    seen.append("\n".join(lines))
    acct = ["sacct", "-n", "-P", "-j", job, "-o", "JobID,State,ExitCode,DerivedExitCode"]
    deadline = time.monotonic() + 30
    while "JOB.1|COMPLETED" not in named(run(acct).stdout):
        assert time.monotonic() < deadline, run(acct).stdout
        time.sleep(1)
    seen.append(named(run(acct).stdout))
    return seen


def test_one_step_is_cancelled_or_signalled_as_slurm_does_it(cluster: SlurmStack) -> None:
    """`scancel ID.STEP` cancels that step alone (srun's and slurmstepd's lines, the task
    Killed, CANCELLED by the user in sacct, the job running on to COMPLETED) and
    `scancel -s USR1 ID.STEP` reaches that step's tasks, on Caldera's local site described
    by the test cluster's slurm.conf (KillWait 5: `Waiting up to 7 seconds`) as on Slurm."""
    where = Path(tempfile.mkdtemp(prefix="scancel-steps-", dir="/tmp"))
    where.chmod(0o777)
    (where / "steps.sh").write_text(_STEPS_SCRIPT)
    with real_jobs() as submit:
        theirs = _step_scenario(run_real, submit, where)
    assert "srun rc=137" in theirs[4]  # the scenario ran as meant
    assert "got USR1" in theirs[4]
    config = f'[local]\nslurm_conf = "{cluster.slurm_conf}"\n'
    with running_gateway(config) as gw:
        ours = _step_scenario(lambda argv: gw.run(argv), lambda *args: str(gw.sbatch(*args)), where)
    assert ours == theirs
    shutil.rmtree(where, ignore_errors=True)


_TERM_SCRIPT = """#!/bin/bash
srun -N1 -n1 bash -c 'trap "echo step-TERM" TERM; trap "echo step-USR1" USR1
trap "exit 0" USR2; while :; do sleep 0.1; done'
echo "srun rc=$?"
"""


def _term_scenario(run: Run, submit: Callable[..., str], where: Path) -> list[str]:
    """A 2-node job whose step runs on one node: signals to that step, TERM to the job."""
    seen: list[str] = []
    job = submit("-N", "2", "-o", str(where / "term-%j.out"), str(where / "term.sh"))

    def named(text: str) -> str:  # not the number of "User defined signal 1"
        return re.sub(rf"(?<![\w.:=\-])(?<!signal ){job}(?![\w\-])", "JOB", text)

    def say(*argv: str) -> None:
        done = run(list(argv))
        seen.append(named(f"$ {' '.join(argv)}\n{done.stdout}{done.stderr}rc={done.returncode}"))
        time.sleep(1)  # the task's trap has run before the next signal

    assert _step_running(run, job, "0")
    time.sleep(1)  # the traps are set
    say("scancel", "-s", "USR1", f"{job}.0")  # delivered, yet node02 has no such step
    say("scancel", "-s", "TERM", job)  # the steps, not the batch shell: said once per step
    say("scancel", "-s", "TERM", job)
    say("scancel", "-s", "USR2", f"{job}.0")
    assert _state(run, job, "COMPLETED") == "COMPLETED"
    out = named(re.sub(r"AT \S+ \*\*\*", "AT <time> ***", (where / f"term-{job}.out").read_text()))
    # bash says a child died of a signal (its `sleep`, if the signal hit one) before or after
    # it runs its trap, as it happens: those lines are left out, the rest compared sorted
    said_by_bash = {"Terminated", "User defined signal 1", "User defined signal 2"}
    seen.append("\n".join(sorted(x for x in out.splitlines() if x not in said_by_bash)))
    return seen


def test_signals_to_steps_answer_and_say_what_slurm_does(cluster: SlurmStack) -> None:
    """`scancel -s SIG ID.STEP` of a step on fewer nodes than its job's: the step gets the
    signal, and scancel reports `Invalid job id specified` (exit 225), because Slurm asks
    every node of the job and the others have no such step. `scancel -s TERM ID` reaches
    the steps, not the batch shell, and slurmstepd says `*** STEP ID.0 ON node01 CANCELLED
    AT ... ***` the first time only; the step traps it and runs on."""
    where = Path(tempfile.mkdtemp(prefix="scancel-term-", dir="/tmp"))
    where.chmod(0o777)
    (where / "term.sh").write_text(_TERM_SCRIPT)
    with real_jobs() as submit:
        theirs = _term_scenario(run_real, submit, where)
    assert "rc=225" in theirs[0]  # the scenario ran as meant
    assert theirs[-1].count("*** STEP JOB.0 ON node01 CANCELLED") == 1
    assert theirs[-1].count("step-TERM") == 2
    config = f'[local]\nslurm_conf = "{cluster.slurm_conf}"\n'
    with running_gateway(config) as gw:
        ours = _term_scenario(lambda argv: gw.run(argv), lambda *args: str(gw.sbatch(*args)), where)
    assert ours == theirs
    shutil.rmtree(where, ignore_errors=True)
