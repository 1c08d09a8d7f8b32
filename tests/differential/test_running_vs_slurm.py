"""What users see while jobs wait and run, against real Slurm 22.05 (issue 14, item 1).

The same jobs go to the burst test cluster (2 nodes of 2 CPUs: tests/support/slurm_burst.py)
and to a Caldera gateway whose local site is read from that cluster's slurm.conf: a 2-node
job whose `srun` step waits, a 1-CPU job, an array `--array=0-3%2` (task 0 takes the last
CPU), an `--exclusive` job pinned to bnode02 and a held job. Every job waits for a file the
test creates, so the RUNNING/PENDING picture is read while it stands: squeue (default,
`-l`, `-o`, `--start`), `scontrol show job` (every key), sacct (running rows and steps),
sinfo (default and `-N -o`). Then the file appears, the held job is released, and the same
views of the finished jobs are compared; last, `salloc -N1 true`'s sacct rows.

Normalised, and why: job ids (each side numbers its own; the padding of fixed-width columns
is kept); timestamps and durations (the two runs happen a minute apart; `Unknown`/`N/A` stay
visible); the work directory; the CPU load (the machine's, moving); `AllocNode:Sid` (the
submitting process's host and session); `Account` (the burst cluster's association
database, which the Caldera site does not share); `Scheduler` (which of slurmctld's two
schedulers started a job first is a race); Priority as an offset from the first job's
(slurmctld's counter starts where its earlier jobs left it); the nodes of the array tasks
that start when the first jobs end (they take whichever node frees first). Waiting for
slurmctld's backfill pass (bf_interval, 30 s) lets `squeue --start` show its estimates.

What still differs is listed in KNOWN (docs/compatibility.md, "While jobs run"): each entry
must still be seen, and nothing else may differ.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.gateway_env import Gateway, start_gateway, stop_gateway
from tests.support.slurm_burst import SlurmClusters, run_on

pytestmark = [pytest.mark.slurm, pytest.mark.federation]

WAIT = "until [ -e go ]; do sleep 0.2; done"
# name -> (sbatch options, script): submitted in this order, as tester
JOBS: dict[str, tuple[tuple[str, ...], str]] = {
    "two": (("-N", "2", "-n", "2"), f"#!/bin/bash\nsrun bash -c '{WAIT}'\n"),
    "one": (("-n", "1"), f"#!/bin/bash\n{WAIT}\n"),
    "arr": (("--array=0-3%2", "-n", "1"), f"#!/bin/bash\n{WAIT}\n"),
    "excl": (("--exclusive", "-w", "bnode02"), f"#!/bin/bash\n{WAIT}\n"),
    "held": (("--hold",), f"#!/bin/bash\n{WAIT}\n"),
}
SACCT = "JobID,JobName,State,ExitCode,NodeList,NNodes,AllocCPUS,ReqTRES,AllocTRES,Elapsed"
# (name, argv, fixed-width columns): the views compared in each phase
VIEWS: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("squeue", ("squeue",), True),
    ("squeue -l", ("squeue", "-l"), True),
    ("squeue -o", ("squeue", "-o", "%i %j %u %t %M %l %D %R %C %m %b %N"), False),
    ("squeue --start", ("squeue", "--start"), True),
    ("sinfo", ("sinfo",), True),
    ("sinfo -N", ("sinfo", "-N", "-o", "%N %t %C %O"), False),
)
# Divergences not fixed yet (docs/compatibility.md "While jobs run"): a regex over the
# difference lines; every one must match at least one line, and every line one of them.
# None left: priority/basic's count and salloc's record now agree (test_priority_vs_slurm.py,
# test_srun_steps_vs_slurm.py check both on the main cluster)
KNOWN: dict[str, str] = {}


@dataclass(eq=False)
class Side:
    """One side's runner, work directory and what it printed."""

    run: Callable[[list[str], Path, str | None], subprocess.CompletedProcess[str]]
    workdir: Path
    ids: dict[str, str] = field(default_factory=dict)  # job name -> id
    tokens: dict[str, str] = field(default_factory=dict)  # id -> token
    seen: dict[str, str] = field(default_factory=dict)  # "phase view" -> normalised text

    def ok(self, argv: list[str], user: str | None = None) -> str:
        done = self.run(argv, self.workdir, user)
        assert done.returncode == 0, (argv, done.stdout, done.stderr)
        return done.stdout

    def submit(self) -> None:
        for name, (options, text) in JOBS.items():
            script = self.workdir / f"{name}.sh"
            script.write_text(text)
            script.chmod(0o755)
            argv = ["sbatch", "--parsable", "-J", name, "-t", "10", "-o", "/dev/null"]
            out = self.ok([*argv, *options, str(script)], "tester")
            self.ids[name] = out.strip().split(";")[0]
            self.tokens[self.ids[name]] = f"<{name}>"
            time.sleep(1.1)  # slurmdbd lists jobs submitted in one second in write order

    def queue(self, fmt: str) -> list[str]:
        return self.ok(["squeue", "-h", "-o", fmt]).split()

    def snapshot(self, phase: str) -> None:
        records = {n: self.ok(["scontrol", "show", "job", i]) for n, i in self.ids.items()}
        arr = self.ids["arr"]
        for rec in records["arr"].split("\n\n"):  # array tasks: <arr#k>, by task id
            got = re.match(r"JobId=(\d+) ArrayJobId=(\d+) ArrayTaskId=(\d+) ", rec)
            if got and got.group(1) != arr:
                self.tokens[got.group(1)] = f"<arr#{got.group(3)}>"
        for view, argv, fixed in VIEWS:
            self.seen[f"{phase} {view}"] = self.norm(self.ok(list(argv)), fixed)
        for name, text in records.items():
            self.seen[f"{phase} scontrol <{name}>"] = self.norm(text, False)
        ids = ",".join(self.ids.values())
        self.seen[f"{phase} sacct"] = self.norm(self.ok(["sacct", "-j", ids, "-o", SACCT]), True)

    def norm(self, text: str, fixed: bool) -> str:
        """Ids as tokens (the first word of a line, in fixed-width columns padded to the
        same width; JobId= and ArrayJobId= of scontrol), times masked, the work directory
        as <dir>."""

        def first(m: re.Match[str]) -> str:
            lead, core, rest, trail = m.group(1), m.group(2), m.group(3), m.group(4)
            if core not in self.tokens:
                return m.group(0)
            new = self.tokens[core] + rest
            if not fixed or (not lead and len(trail) <= 1):
                return lead + new + trail
            if lead:  # right-aligned
                return new.rjust(len(lead) + len(core) + len(rest)) + trail
            return new.ljust(len(core) + len(rest) + len(trail))

        text = re.sub(r"^( *)(\d+)([_.]\S*|)( *)", first, text, flags=re.M)
        text = re.sub(
            r"\b((?:Array)?JobId)=(\d+)\b",
            lambda m: f"{m.group(1)}={self.tokens.get(m.group(2), m.group(2))}",
            text,
        )
        text = text.replace(str(self.workdir), "<dir>")
        text = re.sub(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\b", "<T>", text)
        return re.sub(r"^\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}$", "<date>", text, flags=re.M)


def _wait(side: Side, done: Callable[[Side], bool], what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not done(side):
        assert time.monotonic() < deadline, f"{what}: {side.ok(['squeue'])}"
        time.sleep(0.5)


def _standing(side: Side) -> bool:
    """Three jobs (four records) run, and the rest wait for the reasons meant."""
    got = side.queue("%j:%t:%r")
    return sorted(got) == sorted(
        ["two:R:None", "one:R:None", "arr:R:None", "arr:PD:Resources", "excl:PD:Priority",
         "held:PD:JobHeldUser"]
    )  # fmt: skip


def _play(side: Side, real: bool) -> None:
    side.submit()
    _wait(side, _standing, "the jobs never stood as meant")
    if real:  # its backfill pass comes every bf_interval (30 s)
        _wait(side, lambda s: all(v != "N/A" for v in _pending_starts(s)), "no estimates", 45)
    side.snapshot("running")
    (side.workdir / "go").write_text("")
    _wait(side, lambda s: s.queue("%j") == ["held"], "the jobs never ended")
    side.ok(["scontrol", "release", side.ids["held"]], "tester")
    _wait(side, lambda s: not s.queue("%j"), "the held job never ended")
    _wait(side, _accounted, "sacct never listed the finished jobs")
    side.snapshot("finished")
    _salloc(side)


def _accounted(side: Side) -> bool:
    """slurmdbd has every job's end (the array's tasks as rows of their own)."""
    got = side.ok(["sacct", "-X", "-n", "-P", "-j", ",".join(side.ids.values()), "-o", "state"])
    return got.split() == ["COMPLETED"] * 8


def _pending_starts(side: Side) -> list[str]:
    lines = side.ok(["squeue", "-h", "-t", "PD", "-o", "%j %S"]).splitlines()
    return [line.split()[1] for line in lines if not line.startswith("held")]


def _salloc(side: Side) -> None:
    done = side.run(["salloc", "-N1", "true"], side.workdir, None)
    assert done.returncode == 0, done.stderr
    got = re.search(r"Granted job allocation (\d+)", done.stderr)
    assert got, done.stderr
    job = got.group(1)
    argv = ["sacct", "-n", "-P", "-j", job, "-o", "JobID,JobName,State,ExitCode"]
    # slurmdbd first has the job without its name ("allocation"), then the end record
    rows, deadline = "", time.monotonic() + 30
    while time.monotonic() < deadline:
        time.sleep(1)
        last, rows = rows, side.ok(argv)
        if rows == last and "COMPLETED" in rows and "|allocation|" not in rows:
            break
    side.seen["salloc sacct"] = rows.replace(job, "<alloc>")


def _records(text: str) -> list[dict[str, str]]:
    return [dict(re.findall(r"([\w:/]+)=(\S*)", rec)) for rec in text.split("\n\n") if rec.strip()]


MASKED = {"AllocNode:Sid", "Account", "Scheduler"}
# slurmctld sets an array's AccrueTime in its scheduling passes: whether the first task split
# off before it did is a race (seen both ways); Caldera leaves an array's Unknown
ARRAY_MASKED = {"AccrueTime"}
# the same race for the held job once released: slurmctld sets AccrueTime only if a
# scheduling pass saw it pending before it started (CI saw Unknown, earlier runs a time)
RELEASED_MASKED = {"AccrueTime"}
TIMES = ("RunTime",)


def _differences(real: Side, ours: Side) -> list[str]:
    """One line per difference of the normalised views."""
    out: list[str] = []
    base = {s: int(_records(s.seen["running scontrol <two>"])[0]["Priority"]) for s in (real, ours)}
    racing = {"<arr#1>", "<arr#2>", "<arr#3>", "<arr>"}  # started when the first jobs ended
    for key, theirs in real.seen.items():
        mine = ours.seen.get(key, "")
        if key.split()[1] == "scontrol":
            out += _record_diffs(key, theirs, mine, base[real], base[ours], racing)
        elif key == "salloc sacct":
            a, b = set(theirs.splitlines()), set(mine.splitlines())
            out += [f"{key}: slurm only: {x}" for x in sorted(a - b)]
            out += [f"{key}: caldera only: {x}" for x in sorted(b - a)]
        else:
            out += _text_diffs(key, theirs, mine)
    return out


def _mask_view(key: str, text: str) -> str:
    """Durations and the CPU load of the text views, and the nodes of the array tasks that
    started when the first jobs ended."""
    view = key.split(" ", 1)[1]
    lines = text.splitlines()
    if view == "squeue -o":
        lines = [" ".join("<M>" if i == 4 else w for i, w in enumerate(ln.split(" ")))
                 for ln in lines]  # fmt: skip
    elif view in ("squeue", "squeue -l") and lines:
        h = 1 if view == "squeue -l" else 0
        end = lines[h].index("    TIME ") + len("    TIME")
        lines[h + 1 :] = [ln[: end - 10] + "<M>".rjust(10) + ln[end:] for ln in lines[h + 1 :]]
    elif view == "squeue --start" and lines:
        # ordered by the expected start, which is masked (each side's jobs started seconds
        # apart, so their estimates tie on one side and not on the other): the lines as a set
        lines[1:] = sorted(lines[1:])
    elif view == "sinfo -N":
        lines = [re.sub(r" \d+\.\d\d$", " <load>", ln) for ln in lines]
    elif view == "sacct":
        lines = [re.sub(r"\d\d:\d\d:\d\d $", "<elapsed>", ln) for ln in lines]
        if key.startswith("finished"):
            late = ("<arr>_1", "<arr>_2", "<arr>_3")
            lines = [re.sub(r"bnode0\d", "<node>", ln) if ln.startswith(late) else ln
                     for ln in lines]  # fmt: skip
    return "\n".join(lines)


def _text_diffs(key: str, theirs: str, mine: str) -> list[str]:
    a = _mask_view(key, theirs).splitlines()
    b = _mask_view(key, mine).splitlines()
    out = [f"{key}: line {i}: slurm={x!r} caldera={y!r}"
           for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y]  # fmt: skip
    if len(a) != len(b):
        out.append(f"{key}: {len(a)} lines (slurm) vs {len(b)} (caldera)")
    return out


def _record_diffs(
    key: str, theirs: str, mine: str, base_real: int, base_ours: int, racing: set[str]
) -> list[str]:
    a, b = _records(theirs), _records(mine)
    out = []
    if [r.get("JobId") for r in a] != [r.get("JobId") for r in b]:
        out.append(
            f"{key}: records slurm={[r.get('JobId') for r in a]} "
            f"caldera={[r.get('JobId') for r in b]}"
        )
    for ra, rb in zip(a, b, strict=False):
        rec = ra.get("JobId", "?") if ra.get("JobId") != rb.get("JobId") else ""
        for name in dict.fromkeys([*ra, *rb]):
            x, y = ra.get(name), rb.get(name)
            if name in MASKED or (name in TIMES and x and y):
                continue
            if name in ARRAY_MASKED and key.endswith("<arr>"):
                continue
            if name in RELEASED_MASKED and key == "finished scontrol <held>":
                continue
            if name == "Priority" and x not in (None, "0") and y not in (None, "0"):
                x, y = str(int(x) - base_real), str(int(y) - base_ours)
            late = key.startswith("finished") and ra.get("JobId") in racing
            if name in ("NodeList", "BatchHost") and late:
                continue
            if x != y:
                out.append(f"{key}{rec}: {name}: slurm={x} caldera={y}")
    return out


@pytest.fixture(scope="module")
def played(slurm_burst_cluster: SlurmClusters) -> Iterator[tuple[Side, Side]]:
    burst = slurm_burst_cluster.burst
    real_dir = burst.jobs_dir / f"running-diff-{time.time_ns()}"
    real_dir.mkdir(mode=0o777)
    real_dir.chmod(0o777)
    base = Path(tempfile.mkdtemp(prefix="caldera-running-", dir="/tmp"))
    gw: Gateway = start_gateway(base, f'[local]\nslurm_conf = "{burst.slurm_conf}"\n')
    real = Side(lambda a, cwd, u: run_on(burst, a, user=u, cwd=cwd), real_dir)
    ours = Side(lambda a, cwd, u: gw.run(a, cwd=cwd, user=u), gw.workdir / "running")
    ours.workdir.mkdir(mode=0o777)
    ours.workdir.chmod(0o777)
    try:
        _play(real, True)
        _play(ours, False)
        yield real, ours
    finally:
        for side in (real, ours):
            (side.workdir / "go").write_text("")
            if side.ids:
                side.run(["scancel", *side.ids.values()], side.workdir, None)
        stop_gateway(gw)
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(real_dir, ignore_errors=True)


def test_waiting_running_and_finished_jobs_look_as_on_slurm(played: tuple[Side, Side]) -> None:
    real, ours = played
    assert "<two>" in real.seen["running squeue"]  # the ids were found, the views read
    diffs = _differences(real, ours)
    unexplained = [d for d in diffs if not any(re.search(p, d) for p in KNOWN.values())]
    unseen = [k for k, p in KNOWN.items() if not any(re.search(p, d) for d in diffs)]
    assert (unexplained, unseen) == ([], []), "\n".join(diffs)
