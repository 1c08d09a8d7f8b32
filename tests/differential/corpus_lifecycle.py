"""Run the adapted corpus on one side (real Slurm or a Caldera gateway) and compare.

A `Side` submits every script from a directory of its own (so that the files a job writes
are its own), waits for all of them, and collects per job: sbatch's answer, sacct's rows
(the job, its array tasks and steps), `scontrol show job` after the end, and the files the
job left. `compare` turns two sides' records into per-field verdicts; the test decides
which disagreements are known and explained.
"""

from __future__ import annotations

import re
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gateway.compat.hostlist import expand
from tests.support.slurm_stack import parse_scontrol_records

__all__ = [
    "SACCT_FIELDS",
    "Collected",
    "Side",
    "Verdict",
    "agreement_table",
    "compare",
    "placement",
]

Runner = Callable[[Sequence[str], Path], subprocess.CompletedProcess[str]]

SACCT_FIELDS = (
    "JobID",
    "JobName",
    "Partition",
    "State",
    "ExitCode",
    "DerivedExitCode",
    "NodeList",
    "NNodes",
    "AllocCPUS",
    "AllocTRES",
    "ReqTRES",
    "Elapsed",
)
# `scontrol show job` keys that are clocks, ids or the submitting host: never compared
SHOW_IGNORED = frozenset(
    {"JobId", "ArrayJobId", "UserId", "GroupId", "Priority", "SubmitTime", "EligibleTime",
     "AccrueTime", "StartTime", "EndTime", "Deadline", "SuspendTime", "SecsPreSuspend",
     "LastSchedEval", "PreemptEligibleTime", "PreemptTime", "ResizeTime", "AllocNode:Sid",
     "RunTime"}
)  # fmt: skip
_FINISHED = re.compile(
    r"^(COMPLETED|FAILED|CANCELLED|TIMEOUT|OUT_OF_MEMORY|NODE_FAIL|PREEMPTED|BOOT_FAIL)"
)
_CLOCK = re.compile(
    r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d|"
    r"\b(Mon|Tue|Wed|Thu|Fri|Sat|Sun) \w{3} +\d+ \d\d:\d\d:\d\d \w+ \d{4}\b"
)
# cron-hourly.slurm ends with `for f in *.slurm; do sbatch "$f"; done` in the directory it
# failed to `cd` out of, its own: under its own name it resubmits itself for ever, on both
# sides. Its file is named otherwise (its job name is set by `--job-name`).
FILE_NAMES = {"stas00_ml-engineering__orchestration__slurm__cron-hourly.slurm": "cron-hourly.sh"}
_BEFORE_ID = (
    r"((?<=[/_.-])|(?<=\.[oe])|(?<=job)|(?<=job )|(?<=JOB )|(?<=STEP )|(?<=\bis )|(?<=StepId=)"
    r"|(?<=--jobid )|(?<=--jobid=))"
)
_SPOOL = re.compile(r"/\S*/slurm_script")
_NODE = re.compile(r"\bnode0[1-4]\b|\bnode\[[0-9,-]+\]")


@dataclass
class Collected:
    """What one side knows about one script after the run."""

    name: str
    returncode: int
    stderr: str
    job_id: str | None
    where: Path  # the directory it was submitted from
    ids: list[str] = field(default_factory=list)  # every job id it produced, in order
    sacct: dict[str, dict[str, str]] = field(default_factory=dict)  # by JobID
    show: dict[str, dict[str, str]] = field(default_factory=dict)  # by JobId or id_task
    files: dict[str, str] = field(default_factory=dict)  # path below `where` -> text

    def ids_out(self, text: str) -> str:
        """Its job ids as J0, J1 .. (in id order) where a job id stands: after `job`, `/`,
        `-`, `_`, `.`, or before `.`/`_` (a Caldera id is a small number, so a bare
        number in a message is not taken for one). The script's own file name is left as
        it is: its digits are no job id (NERSC's `..._14_advanced_pilot_...` met Caldera's
        job 14 in one CI run)."""
        pieces = text.split(self.name) if self.name else [text]
        for i, piece in enumerate(pieces):
            for k, job in sorted(enumerate(self.ids), key=lambda kv: -len(kv[1])):
                piece = re.sub(rf"{_BEFORE_ID}{job}(?!\d)", f"J{k}", piece)
                if i == 0:
                    piece = re.sub(rf"^{job}(?=[._+]|$)", f"J{k}", piece)
            pieces[i] = piece
        return self.name.join(pieces) if self.name else pieces[0]

    def sacct_state(self, row: str) -> str:
        """The State of the job (or array task) a normalised sacct row belongs to."""
        top = row.split(".")[0]
        return next((r["State"] for k, r in self.sacct.items() if self.ids_out(k) == top), "")

    def show_value(self, row: str, key: str) -> str:
        """A value of `scontrol show job` for a normalised row."""
        return next((r.get(key, "") for k, r in self.show.items() if self.ids_out(k) == row), "")

    def norm(self, text: str) -> str:
        """Job ids, the work directory, the script's spool copy and clocks out."""
        text = text.replace(str(self.where), "ROOT")
        text = _SPOOL.sub("SPOOL/slurm_script", text)
        # the real nodes live in network namespaces without a resolver (a test-cluster
        # artefact); Caldera's virtual nodes all answer `hostname` with the machine's name
        text = text.replace("hostname: Temporary failure in name resolution\n", "")
        text = re.sub(rf"\b{re.escape(socket.gethostname())}\b", "node01", text)
        return _CLOCK.sub("TIME", self.ids_out(text))


@dataclass
class Side:
    """Real Slurm or Caldera: how to run its commands, and where its jobs live."""

    label: str
    run: Runner
    root: Path
    scripts: dict[str, Collected] = field(default_factory=dict)

    def ok(self, argv: Sequence[str]) -> str:
        done = self.run(argv, self.root)
        assert done.returncode == 0, f"{self.label}: {argv}: {done.stderr}"
        return done.stdout

    def submit_all(self, scripts: Mapping[str, str]) -> None:
        """`sbatch --parsable NAME` of each script, in its own directory."""
        for name, text in scripts.items():
            where = self.root / name
            where.mkdir(parents=True)
            where.chmod(0o777)
            script = FILE_NAMES.get(name, name)
            (where / script).write_text(text, errors="surrogateescape")
            done = self.run(["sbatch", "--parsable", script], where)
            job = done.stdout.strip().split(";")[0] if done.returncode == 0 else None
            self.scripts[name] = Collected(name, done.returncode, done.stderr, job, where)

    def cancel_all(self) -> None:
        """scancel every job whose work directory is below this side's root (the corpus's
        jobs and any job they submitted)."""
        queue = self.run(["squeue", "-h", "-o", "%i %Z"], self.root).stdout
        mine = [ln.split()[0] for ln in queue.splitlines() if f" {self.root}/" in ln]
        if mine:
            self.run(["scancel", *mine], self.root)

    def job_ids(self) -> list[str]:
        return [c.job_id for c in self.scripts.values() if c.job_id]

    def wait_all(self, timeout: float) -> list[str]:
        """Wait until none of the jobs is pending, running or completing; those left."""
        ids = ",".join(self.job_ids())
        deadline = time.monotonic() + timeout
        while True:
            left = self.run(["squeue", "-h", "-j", ids, "-o", "%i %T"], self.root).stdout
            if not left.strip() or time.monotonic() > deadline:
                return left.split()
            time.sleep(2)

    def collect(self, timeout: float = 60) -> None:
        """sacct (once accounting has every finished job), scontrol show job, files."""
        ids = self.job_ids()
        fields = ",".join(SACCT_FIELDS)
        deadline = time.monotonic() + timeout
        while True:
            out = self.ok(["sacct", "-P", "-n", "-j", ",".join(ids), "-o", fields])
            rows = [dict(zip(SACCT_FIELDS, ln.split("|"), strict=True)) for ln in out.splitlines()]
            tops = {r["JobID"].split("_")[0]: r for r in rows if "." not in r.get("JobID", ".")}
            done = all(
                _FINISHED.match(r["State"]) and r["Partition"]
                for r in rows
                if "." not in r.get("JobID", ".")
            )
            if (done and set(ids) <= set(tops)) or time.monotonic() > deadline:
                break
            time.sleep(1)
        for col in self.scripts.values():
            if col.job_id:
                self._collect_one(col, rows)

    def _collect_one(self, col: Collected, rows: list[dict[str, str]]) -> None:
        assert col.job_id is not None
        shown = self.run(["scontrol", "show", "job", col.job_id], self.root).stdout
        records = parse_scontrol_records(shown)
        col.ids = sorted(
            {col.job_id, *(r.get("JobId", "") for r in records)} - {""}, key=lambda j: int(j)
        )
        for rec in records:
            key = rec.get("JobId", "")
            if rec.get("ArrayTaskId"):
                key = f"{rec.get('ArrayJobId')}_{rec['ArrayTaskId']}"
            col.show[key] = rec
        for row in rows:
            head = re.split(r"[_.+]", row.get("JobID", ""))[0]
            if head in col.ids:
                col.sacct[row["JobID"]] = row
        for path in sorted(col.where.rglob("*")):
            if path.is_file() and path.name != FILE_NAMES.get(col.name, col.name):
                col.files[str(path.relative_to(col.where))] = path.read_text(errors="replace")


@dataclass(frozen=True)
class Verdict:
    """One compared value: which script, field and row, and whether both sides agree."""

    script: str
    field: str
    row: str
    real: str
    ours: str

    @property
    def agreed(self) -> bool:
        return self.real == self.ours


def _elapsed_s(text: str) -> int:
    days, _, clock = text.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    return int(days or 0) * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2]


def _near(a: str, b: str) -> bool:
    return bool(a and b) and abs(_elapsed_s(a) - _elapsed_s(b)) <= 1


def placement(real: str, ours: str, eligible: frozenset[str]) -> str:
    """`ours` as `real` when both name as many nodes, all of them eligible: where a job
    runs among equally fit free nodes depends on what else runs at that moment."""
    if real == ours or not real or not ours or real == "None assigned":
        return ours
    mine, theirs = expand(ours), expand(real)
    fits = set(mine) <= eligible and set(theirs) <= eligible
    return real if fits and len(mine) == len(theirs) else ours


def _eligible(request: str) -> frozenset[str]:
    """The real nodes a job could run on, from what it asked for (ReqTRES, TresPer*)."""
    if "gpu:a100" in request:
        return frozenset({"node04"})
    if "gpu" in request:
        return frozenset({"node03", "node04"})
    return frozenset({"node01", "node02", "node03", "node04"})


def _rows(col: Collected, table: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    return {col.ids_out(key): row for key, row in table.items()}


def _sacct_verdicts(name: str, real: Collected, ours: Collected) -> Iterator[Verdict]:
    theirs_rows, my_rows = _rows(real, real.sacct), _rows(ours, ours.sacct)
    yield Verdict(name, "steps", "", " ".join(theirs_rows), " ".join(my_rows))
    for row, r in theirs_rows.items():
        o = my_rows.get(row, {})
        for key in SACCT_FIELDS[1:]:
            theirs, mine = r.get(key, ""), o.get(key, "<absent>")
            if key == "JobName":  # a step's program may be named after the job id
                theirs, mine = real.ids_out(theirs), ours.ids_out(mine)
            if key == "NodeList":
                top = theirs_rows.get(re.split(r"\.", row)[0], r)
                mine = placement(theirs, mine, _eligible(top.get("ReqTRES", "")))
            # the clocks of two runs: a second either way is the same lifecycle
            if key == "Elapsed" and "<" not in mine + theirs and _near(mine, theirs):
                mine = theirs
            yield Verdict(name, key, row, theirs, mine)


# `scontrol show job` values that name a job id or the work directory
_PATHS = frozenset({"StdOut", "StdErr", "StdIn", "Command", "WorkDir", "Dependency"})


def _show_verdicts(name: str, real: Collected, ours: Collected) -> Iterator[Verdict]:
    my_rows = _rows(ours, ours.show)
    for row, r in _rows(real, real.show).items():
        o = my_rows.get(row, {})
        for key in sorted((set(r) | set(o)) - SHOW_IGNORED):
            theirs, mine = r.get(key, "<absent>"), o.get(key, "<absent>")
            if key in _PATHS:
                theirs, mine = real.norm(theirs), ours.norm(mine)
            if key in ("NodeList", "BatchHost", "SchedNodeList"):
                asked = " ".join(r.get(k, "") for k in ("TresPerNode", "TresPerJob", "TresPerTask"))
                mine = placement(theirs, mine, _eligible(asked))
            yield Verdict(name, f"show:{key}", row, theirs, mine)


def _lines(text: str) -> str:
    """Node names out, and the lines as a sorted multiset: the tasks of a step write to
    the same file at once, in an order neither Slurm nor Caldera fixes."""
    return "\n".join(sorted(_NODE.sub("NODE", text).splitlines()))


def compare(real: Collected, ours: Collected) -> Iterator[Verdict]:
    """Every compared value of one script."""
    name = real.name
    yield Verdict(name, "sbatch exit+stderr", "", f"{real.returncode} {real.stderr}",
                  f"{ours.returncode} {ours.stderr}")  # fmt: skip
    if real.job_id is None or ours.job_id is None:
        return
    yield from _sacct_verdicts(name, real, ours)
    yield from _show_verdicts(name, real, ours)
    theirs = {real.norm(f): real.norm(t) for f, t in real.files.items()}
    mine = {ours.norm(f): ours.norm(t) for f, t in ours.files.items()}
    yield Verdict(name, "output file names", "", " ".join(theirs), " ".join(mine))
    for fname, text in theirs.items():
        yield Verdict(name, "output contents", fname, _lines(text), _lines(mine.get(fname, "-")))


def agreement_table(verdicts: Sequence[Verdict], kind: Callable[[Verdict], str | None]) -> str:
    """Markdown: field | agreed | known difference | open divergence | differ | total
    (`kind`: "known", "open" or None for an unexplained difference)."""
    counts: dict[str, list[int]] = {}
    for v in verdicts:
        cell = counts.setdefault(v.field, [0, 0, 0, 0])
        cell[0 if v.agreed else {"known": 1, "open": 2}.get(kind(v) or "", 3)] += 1
    lines = [
        "| field | agreed | known difference | open divergence | differ | total |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    grand = [0, 0, 0, 0]
    for name in sorted(counts, key=lambda f: (f.startswith("show:"), f)):
        cell = counts[name]
        grand = [g + c for g, c in zip(grand, cell, strict=True)]
        lines.append(f"| {name} | {' | '.join(map(str, cell))} | {sum(cell)} |")
    lines.append(f"| **all** | {' | '.join(map(str, grand))} | {sum(grand)} |")
    return "\n".join(lines)
