"""How squeue, sacct, scancel, sinfo and scontrol read their argv: Caldera's commands against
the real Slurm 22.05 commands of the test cluster.

* Bad command lines: the same argv through both; stderr and exit status must be identical
  (glibc's getopt lines, each command's `Try "... --help"` habit, its operand rules).
* Job selection: three held jobs on the real cluster and three on a Caldera gateway (the
  embedded default); the same argv templates (options after operands, `-j` with its list as
  the next word, abbreviations, scontrol options after the command) must select the same
  jobs, compared by their position in the submission order.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.gateway_env import Gateway, discard_gateway, start_gateway
from tests.support.slurm_stack import SlurmStack, cancel, job_id_from_sbatch, run_sbatch

pytestmark = pytest.mark.slurm

# Command lines that both sides must refuse (or end early) the same way, before any state.
REFUSED: list[list[str]] = [
    ["squeue", "-Z"],
    ["squeue", "--no"],
    ["squeue", "--st"],
    ["squeue", "--use"],
    ["squeue", "--us", "root"],
    ["squeue", "-j5", "--foo=3"],
    ["squeue", "-o"],
    ["squeue", "-j", "-5"],
    ["squeue", "--all=1"],
    ["squeue", "-j", "x"],
    ["squeue", "-j", "0"],
    ["squeue", "-j=5"],
    ["squeue", "-j", "5", "6"],
    ["squeue", "5"],
    ["squeue", "--", "-j"],
    ["squeue", "-t", "pd,bogus", "-Z"],
    ["squeue", "-Z", "-t", "bogus"],
    ["squeue", "-h", "-u", "nosuchuser", "-o", "%i"],
    ["squeue", "-h", "-u", "99999,nosuchuser", "-Z"],
    ["sacct", "-Z"],
    ["sacct", "--no"],
    ["sacct", "--all=@"],
    ["sacct", "-j"],
    ["sacct", "--jobs"],
    ["sacct", "-j", "5,x"],
    ["sacct", "-R", "x"],
    ["sacct", "-h", "-Z"],
    ["sacct", "-n", "5", "-X", "6"],
    ["scancel", "-Z"],
    ["scancel", "--n"],
    ["scancel", "--si=TERM", "5"],
    ["scancel", "x"],
    ["scancel", "--", "-5"],
    ["scancel"],
    ["scancel", "--me=1"],
    ["scancel", "--sibling"],
    ["sinfo", "-Z", "foo"],
    ["sinfo", "--no"],
    ["sinfo", "-i"],
    ["sinfo", "--Node=1"],
    ["scontrol", "-Z"],
    ["scontrol", "--no"],
    ["scontrol", "--uid"],
    ["scontrol", "-M"],
    ["scontrol", "--version=1"],
    ["scontrol", "--", "-o", "show"],
    ["scontrol", "show"],
    ["scontrol", "show", "job", "12", "13"],
    ["scontrol", "show", "job", "x"],
    ["scontrol", "show", "job", "-o", "x"],
    ["scontrol", "hold"],
    ["scontrol", "update", "JobId=5", "ArrayTaskThrottle=-1"],
]

# argv templates over the jobs {A} {B} {C}; the output is reduced to the jobs it names.
SELECTS: list[list[str]] = [
    ["squeue", "-h", "-o", "%i", "-j", "{B}"],
    ["squeue", "-h", "-o", "%i", "{B}", "-j"],
    ["squeue", "-h", "-o", "%i", "-j{B}"],
    ["squeue", "-h", "-o", "%i", "--jobs", "{A},{C}"],
    ["squeue", "-h", "-o", "%i", "--jobs={B}"],
    ["squeue", "-j{A}", "{C}", "-ho", "%i"],
    ["squeue", "--nohe", "--form=%i", "--jo", "{B}"],
    ["squeue", "-h", "-o", "%i", "-t", "PD", "-j", "{A},{B}"],
    ["squeue", "-h", "-o", "%i", "-j", "--", "{C}"],
    ["scontrol", "show", "job", "-o", "{B}"],
    ["scontrol", "-o", "show", "job", "{B}"],
    ["scontrol", "show", "job", "{B}", "-o"],
    ["scontrol", "--one", "show", "job", "{C}"],
    ["scontrol", "show", "job", "{A}"],
    ["sacct", "-X", "-n", "-P", "-o", "JobID", "-j", "{B}"],
    ["sacct", "-X", "-n", "-o", "JobID", "--jo={A},{C}", "-P"],
    ["sacct", "-j", "{B}", "-XnP", "--format", "JobID"],
    ["sacct", "-XnPoJobID", "-j{A}", "-j", "{C}"],
]


@dataclass
class Side:
    """One implementation: how to run a command, and its three held jobs in order."""

    env: Mapping[str, str]
    ids: list[str]
    cwd: Path

    def run(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv),
            env=dict(self.env),
            cwd=self.cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def fill(self, template: Sequence[str]) -> list[str]:
        names = dict(zip("ABC", self.ids, strict=True))
        return [w.format(**names) for w in template]

    def labels(self, text: str) -> list[str]:
        """The jobs a command's output names (by JobId= or a bare id per line), as A/B/C."""
        by_id = dict(zip(self.ids, "ABC", strict=True))
        found = re.findall(r"(?:^|JobId=)(\d+)\b", text, flags=re.MULTILINE)
        return [by_id.get(i, f"other:{i}") for i in found]


def _wait_for_accounting(side: Side, timeout: float = 30) -> None:
    """slurmdbd records a submitted job a moment later; sacct -j must see all three."""
    deadline = time.monotonic() + timeout
    argv = ["sacct", "-X", "-n", "-P", "-o", "JobID", "-j", ",".join(side.ids)]
    while sorted(side.run(argv).stdout.split()) != sorted(side.ids):
        assert time.monotonic() < deadline, "slurmdbd did not record the held jobs"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def real(slurm_cluster: SlurmStack) -> Iterator[Side]:
    workdir = slurm_cluster.jobs_dir / f"h5-cliparse-{os.getpid()}"
    workdir.mkdir(mode=0o777, exist_ok=True)
    ids: list[str] = []
    try:
        for _ in range(3):
            proc = run_sbatch(
                None,
                ["--parsable", "--hold", "-o", "/dev/null", "--wrap", "true"],
                slurm_cluster.env_dict(),
                workdir,
            )
            assert proc.returncode == 0, proc.stderr
            ids.append(job_id_from_sbatch(proc.stdout))
        side = Side(slurm_cluster.env_dict(), ids, workdir)
        _wait_for_accounting(side)
        yield side
    finally:
        cancel(*ids, env=slurm_cluster.env_dict())
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def caldera() -> Iterator[Side]:
    base = Path(tempfile.mkdtemp(prefix="h5-cliparse-", dir="/tmp"))
    gw: Gateway = start_gateway(base)
    try:
        ids = [str(gw.sbatch("--hold", "-o", "/dev/null", "--wrap", "true")) for _ in range(3)]
        yield Side(gw.env(), ids, gw.workdir)
    finally:
        discard_gateway(gw, base)


@pytest.mark.parametrize("argv", REFUSED, ids=" ".join)
def test_bad_command_lines_fail_alike(argv: list[str], real: Side, caldera: Side) -> None:
    theirs, ours = real.run(argv), caldera.run(argv)
    assert (ours.returncode, ours.stderr) == (theirs.returncode, theirs.stderr)


@pytest.mark.parametrize("template", SELECTS, ids=" ".join)
def test_the_same_jobs_are_selected(template: list[str], real: Side, caldera: Side) -> None:
    theirs, ours = real.run(real.fill(template)), caldera.run(caldera.fill(template))
    assert ours.returncode == theirs.returncode == 0, (theirs.stderr, ours.stderr)
    selected = real.labels(theirs.stdout)
    assert selected, theirs.stdout
    assert set(selected) <= set("ABC"), theirs.stdout
    assert caldera.labels(ours.stdout) == selected
    assert len(ours.stdout.splitlines()) == len(theirs.stdout.splitlines())


def _array_story(side: Side) -> dict[str, object]:
    """Hold and release some pending tasks of an array, show one, change its throttle."""
    array = ["--array=0-9", "--begin=now+1hour", "-o", "/dev/null", "--wrap", "true"]
    sub = side.run(["sbatch", "--parsable", *array])
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.strip().split(";")[0]
    try:
        story: dict[str, object] = {}
        for step in (["hold", f"{job}_[3-5]"], ["release", f"{job}_[4-5]"]):
            done = side.run(["scontrol", *step])
            assert done.returncode == 0, done.stderr
            queue = side.run(["squeue", "-r", "-h", "-j", job, "-o", "%K %r"]).stdout
            pairs = [line.split() for line in queue.splitlines()]
            story[step[0]] = sorted(int(k) for k, r in pairs if r.startswith("JobHeld"))
            story[f"{step[0]}-tasks"] = sorted(int(k) for k, _ in pairs)
        shown = side.run(["scontrol", "show", "job", "-o", f"{job}_7"]).stdout
        story["show"] = re.findall(r"ArrayTaskId=(\S+)", shown)
        side.run(["scontrol", "update", f"JobId={job}", "ArrayTaskThrottle=4"])
        shown = side.run(["scontrol", "show", "job", "-o", job]).stdout
        story["throttle"] = sorted(re.findall(r"ArrayTaskId=(\S+) ArrayTaskThrottle=(\d+)", shown))
        return story
    finally:
        side.run(["scancel", job])


def test_array_task_subsets_are_held_shown_and_throttled_alike(real: Side, caldera: Side) -> None:
    theirs = _array_story(real)
    assert theirs["hold"] == [3, 4, 5]  # the story means what it says on the real cluster
    assert _array_story(caldera) == theirs
