"""Fixtures of the sbatch differential tests: real Slurm next to Caldera's parser.

* `sbatch_diff` runs one sbatch invocation (script text, argv, environment) through the real
  `sbatch --hold` of the running test cluster and through `gateway.compat.parse_sbatch`, and
  compares what `scontrol show job` records with what Caldera predicts (`request_fields`),
  or, when sbatch refuses, its stderr and exit status with Caldera's `CompatError`.
* Site defaults (default partition, DefMemPerCPU, MaxArraySize, JobRequeue, the user's
  account and QOS) are read from the cluster, never assumed.
* Every held job is cancelled when the session ends.
* The per-field agreement table is printed at the end of the session (also with `-s`) and
  written to `$CALDERA_TEST_LOG_DIR/sbatch-agreement.md` (default: the pytest base temp dir).

A missing or broken cluster is a failure, never a skip: these tests are the evidence that
Caldera reads scripts as Slurm does.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pytest

from gateway.compat.errors import CompatError
from gateway.compat.job_fields import JobIdentity, request_fields
from gateway.compat.optypes import EarlyExit, ParseContext
from gateway.compat.sbatch import SbatchRequest, first_pass, parse_sbatch, render_diagnostics
from gateway.model.jobspec import JobSpec
from tests.differential.site import Site, read_site
from tests.support.slurm_stack import (
    SlurmStack,
    SlurmStackError,
    cancel,
    ensure_up,
    job_id_from_sbatch,
    run_sbatch,
    show_jobs,
    slurm_env,
)

LOG = logging.getLogger("caldera.differential.sbatch")

# The request fields of `scontrol show job` that the issue asks to agree on, in table order.
COMPARED_FIELDS: tuple[str, ...] = (
    "JobName",
    "Partition",
    "TimeLimit",
    "TimeMin",
    "NumTasks",
    "CPUs/Task",
    "NumNodes",
    "MinMemoryNode",
    "MinMemoryCPU",
    "MemPerTres",
    "CpusPerTres",
    "TresPerNode",
    "TresPerSocket",
    "TresPerTask",
    "TresPerJob",
    "Features",
    "Licenses",
    "ReqNodeList",
    "ExcNodeList",
    "Contiguous",
    "Dependency",
    "ArrayTaskId",
    "ArrayTaskThrottle",
    "Requeue",
    "OverSubscribe",
    "StdOut",
    "StdErr",
    "StdIn",
    "WorkDir",
    "Switches",
    "Comment",
    "Nice",
    "MailType",
    "MailUser",
    "EligibleTime",
    "Reservation",
    "QOS",
    "Account",
)
# What scontrol prints for "nothing": a field Caldera leaves out must show one of these.
_EMPTY = frozenset({"", "(null)", "N/A", "Unknown", "None"})
# Failures of the shared test cluster itself, not answers about the request: retried.
_TRANSIENT = (
    "Unable to contact slurm controller",
    "Socket timed out",
    "Resource temporarily unavailable",
)
_RETRIES = 5
TIME_TOLERANCE_S = 5  # --begin forms relative to "now": sbatch and Caldera read the clock apart
OUTCOME = "exit status+stderr"  # the table row of rejected invocations
WARNINGS = "stderr warnings"  # the table row of accepted invocations' stderr


# ---------------------------------------------------------------------------------------
# The agreement table


@dataclass
class Agreement:
    """agreed/total per field and per mode (script, cli, env, mixed, ...)."""

    counts: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    differences: list[str] = field(default_factory=list)

    def record(self, mode: str, name: str, agreed: bool) -> None:
        cell = self.counts.setdefault(name, {}).setdefault(mode, [0, 0])
        cell[0] += int(agreed)
        cell[1] += 1

    def modes(self) -> list[str]:
        seen: dict[str, None] = {}
        for per_mode in self.counts.values():
            for mode in per_mode:
                seen.setdefault(mode, None)
        order = ["script", "cli", "env", "mixed"]
        return sorted(seen, key=lambda m: (order.index(m) if m in order else len(order), m))

    def table(self) -> str:
        """A Markdown table: field | one column per mode | all."""
        modes = self.modes()
        names = [f for f in (*COMPARED_FIELDS, OUTCOME, WARNINGS) if f in self.counts]
        names += sorted(set(self.counts) - set(names))
        lines = [
            "| field | " + " | ".join(modes) + " | all |",
            "| --- | " + " | ".join("---:" for _ in modes) + " | ---: |",
        ]
        grand = [0, 0]
        for name in names:
            cells = []
            total = [0, 0]
            for mode in modes:
                agreed, count = self.counts[name].get(mode, [0, 0])
                cells.append(f"{agreed}/{count}" if count else "")
                total[0] += agreed
                total[1] += count
            grand[0] += total[0]
            grand[1] += total[1]
            lines.append(f"| {name} | " + " | ".join(cells) + f" | {total[0]}/{total[1]} |")
        lines.append(
            "| **all fields** | " + " | ".join("" for _ in modes) + f" | {grand[0]}/{grand[1]} |"
        )
        return "\n".join(lines)


AGREEMENT = Agreement()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the agreement table of the sbatch differential tests (when any ran)."""
    if not AGREEMENT.counts:
        return
    text = AGREEMENT.table()
    terminalreporter.write_sep("=", "sbatch vs real Slurm: per-field agreement (agreed/total)")
    terminalreporter.write_line(text)
    if AGREEMENT.differences:
        terminalreporter.write_sep("-", "differences")
        for line in AGREEMENT.differences:
            terminalreporter.write_line(line)


# ---------------------------------------------------------------------------------------
# Running one invocation through both


@dataclass(frozen=True)
class Invocation:
    """One sbatch command: the script's text, sbatch's options, SBATCH_* variables."""

    name: str  # file name of the script (also the default job name)
    script: str
    argv: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    script_args: tuple[str, ...] = ()
    user: str | None = None  # run real sbatch as this user (runuser), Caldera with its uid


@dataclass(frozen=True)
class Outcome:
    """What both sides did with one invocation."""

    returncode: int
    stdout: str
    stderr: str
    records: tuple[dict[str, str], ...]  # scontrol show job, one per hetjob component
    caldera: SbatchRequest | CompatError | EarlyExit
    now: float

    @property
    def job_id(self) -> str | None:
        """The id real sbatch printed, when it accepted the job."""
        return job_id_from_sbatch(self.stdout) if self.returncode == 0 else None


@dataclass
class SbatchDiff:
    """Runs invocations through real sbatch and Caldera, and compares the results."""

    cluster: SlurmStack
    site: Site
    workdir: Path
    submitted: list[str] = field(default_factory=list)
    arrays: set[int] = field(default_factory=set)  # held job arrays (dependency targets)

    def context(self, now: float, user: str | None = None) -> ParseContext:
        """Caldera's parse context for an invocation made now, in the work directory."""
        uid = 0
        name = self.site.user
        if user is not None:
            import pwd

            uid, name = pwd.getpwnam(user).pw_uid, user
        return ParseContext(
            cwd=str(self.workdir),
            uid=uid,
            now=now,
            user=name,
            max_array_size=self.site.max_array_size,
            gres_names=self.site.gres_names,
            allow_spec_resources=self.site.allow_spec_resources,
        )

    def run(self, inv: Invocation, real: Invocation | None = None) -> Outcome:
        """Submit with `sbatch --hold --parsable` and parse the same with Caldera.

        `real`, when given, is what real sbatch gets instead (same script file name).
        """
        path = self.workdir / inv.name
        argv = ["--hold", "--parsable", *inv.argv]
        sub = real if real is not None else inv
        for attempt in range(_RETRIES):
            now = time.time()
            proc = run_sbatch(
                sub.script,
                ["--hold", "--parsable", *sub.argv],
                slurm_env() | dict(sub.env),
                self.workdir,
                script_args=sub.script_args,
                script_path=path,
                user=sub.user,
            )
            if not any(text in proc.stderr for text in _TRANSIENT):
                break
            time.sleep(1 + attempt)  # the shared controller is busy or restarting
        caldera = self.parse(["sbatch", *argv, str(path), *inv.script_args], inv, now)
        records: tuple[dict[str, str], ...] = ()
        if proc.returncode == 0:
            job_id = job_id_from_sbatch(proc.stdout)
            self.submitted.append(job_id)
            records = tuple(_components(show_jobs(job_id), job_id))
        return Outcome(proc.returncode, proc.stdout, proc.stderr, records, caldera, now)

    def parse(
        self, argv: list[str], inv: Invocation, now: float
    ) -> SbatchRequest | CompatError | EarlyExit:
        """Caldera on the same invocation; the script is what sbatch would read (the file
        the first pass names, or standard input: empty here)."""
        ctx = self.context(now, inv.user)
        try:
            first = first_pass(argv, ctx)
            text: str | None = ""
            if first.script_path == str(self.workdir / inv.name):
                text = inv.script
            elif first.script_path is not None:
                text = Path(first.script_path).read_text()
            return parse_sbatch(argv, text, dict(inv.env), ctx)
        except (CompatError, EarlyExit) as exc:
            return exc
        except OSError:
            return CompatError()

    def compare(self, mode: str, label: str, out: Outcome) -> list[str]:
        """Record every compared field in the agreement table; return the differences."""
        diffs: list[str] = []
        if out.returncode != 0 or not isinstance(out.caldera, SbatchRequest):
            mine = _rendered(out.caldera)
            real = (out.returncode, out.stderr)
            agreed = mine == real
            AGREEMENT.record(mode, OUTCOME, agreed)
            if not agreed:
                diffs.append(f"{OUTCOME}: caldera={mine!r} slurm={real!r}")
        else:
            specs = (out.caldera.spec, *out.caldera.spec.het)
            if len(specs) != len(out.records):
                AGREEMENT.record(mode, "HetJob components", False)
                diffs.append(f"components: caldera={len(specs)} slurm={len(out.records)}")
            for spec, rec in zip(specs, out.records, strict=False):
                diffs += self._compare_fields(mode, spec, rec)
            warnings = render_diagnostics(out.caldera.warnings)
            agreed = warnings == out.stderr
            AGREEMENT.record(mode, WARNINGS, agreed)
            if not agreed:
                diffs.append(f"{WARNINGS}: caldera={warnings!r} slurm={out.stderr!r}")
        for d in diffs:
            AGREEMENT.differences.append(f"[{mode}] {label}: {d}")
            LOG.warning("[%s] %s: %s", mode, label, d)
        return diffs

    def _compare_fields(self, mode: str, spec: JobSpec, rec: Mapping[str, str]) -> list[str]:
        job_id = int(rec["JobId"])
        array_job = int(rec.get("ArrayJobId", "0") or 0) if spec.array is not None else 0
        ident = JobIdentity(
            job_id=job_id,
            user=self.site.user,
            account=self.site.account,
            array_job_id=array_job,
            array_targets=frozenset(self.arrays),
        )
        mine = request_fields(spec, ident, self.site.defaults)
        diffs = []
        for name in COMPARED_FIELDS:
            ours, theirs = mine.get(name), rec.get(name)
            if ours is None and (theirs is None or theirs in _EMPTY):
                continue
            if name == "NumNodes" and ours is None:
                continue  # compared only when requested
            agreed = _same(name, ours, theirs)
            AGREEMENT.record(mode, name, agreed)
            if not agreed:
                diffs.append(f"{name}: caldera={ours!r} slurm={theirs!r}")
        return diffs


def _same(name: str, ours: str | None, theirs: str | None) -> bool:
    if ours == theirs:
        return True
    if name == "EligibleTime" and ours and theirs and theirs not in _EMPTY:
        fmt = "%Y-%m-%dT%H:%M:%S"
        delta = datetime.strptime(ours, fmt) - datetime.strptime(theirs, fmt)
        return abs(delta.total_seconds()) <= TIME_TOLERANCE_S
    return False


def _rendered(result: SbatchRequest | CompatError | EarlyExit) -> tuple[int, str]:
    if isinstance(result, CompatError):
        return result.exit_code, result.render("sbatch")
    if isinstance(result, EarlyExit):
        return result.code, ""
    return 0, render_diagnostics(result.warnings)


def _components(records: list[dict[str, str]], job_id: str) -> Iterator[dict[str, str]]:
    """The record of each hetjob component in offset order (or the one job record)."""
    het = sorted(
        (r for r in records if r.get("HetJobId") == job_id),
        key=lambda r: int(r.get("HetJobOffset", "0")),
    )
    if het:
        yield from het
        return
    for rec in records:
        if rec.get("JobId") == job_id:
            yield rec
            return
    if records:
        yield records[0]


# ---------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="session")
def cluster() -> SlurmStack:
    """The running test cluster; its absence fails the test (never a skip)."""
    if os.geteuid() != 0:
        pytest.fail("the sbatch differential tests need root to reach the Slurm test cluster")
    try:
        return ensure_up()
    except SlurmStackError as exc:
        pytest.fail(f"the Slurm test cluster is not available: {exc}")


@pytest.fixture(scope="session")
def site(cluster: SlurmStack) -> Site:
    """The cluster's defaults, read from scontrol and sacctmgr."""
    return read_site(cluster.env)


@pytest.fixture(scope="session")
def sbatch_diff(
    cluster: SlurmStack, site: Site, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SbatchDiff]:
    """The differential runner; cancels every job it submitted at the end."""
    workdir = cluster.jobs_dir / f"caldera-sbatch-diff-{os.getpid()}"
    workdir.mkdir(mode=0o755, exist_ok=True)
    workdir.chmod(0o777)  # tests run sbatch as `tester` too
    diff = SbatchDiff(cluster, site, workdir)
    try:
        yield diff
    finally:
        for start in range(0, len(diff.submitted), 200):
            cancel(*diff.submitted[start : start + 200], env=cluster.env)
        shutil.rmtree(workdir, ignore_errors=True)  # held jobs never ran: only our scripts
        log_dir = Path(os.environ.get("CALDERA_TEST_LOG_DIR", str(tmp_path_factory.getbasetemp())))
        if AGREEMENT.counts:
            text = AGREEMENT.table()
            if AGREEMENT.differences:
                text += "\n\nDifferences:\n" + "\n".join(AGREEMENT.differences)
            (log_dir / "sbatch-agreement.md").write_text(text + "\n")
            LOG.info("sbatch vs real Slurm agreement:\n%s", text)
            print("\nsbatch vs real Slurm: per-field agreement (agreed/total)\n" + text)


@dataclass(frozen=True)
class HeldJobs:
    """Held jobs that dependency cases refer to: plain jobs and one job array."""

    jobs: tuple[str, ...]
    array: str

    def substitutions(self) -> dict[str, str]:
        """`{job1}`.. and `{arr}` for case templates."""
        subs = {f"job{i + 1}": j for i, j in enumerate(self.jobs)}
        subs["arr"] = self.array
        return subs


@pytest.fixture(scope="session")
def held_jobs(sbatch_diff: SbatchDiff) -> HeldJobs:
    """Three held jobs and a held 8-task array, submitted once per session."""
    ids = []
    for i in range(3):
        out = sbatch_diff.run(
            Invocation(f"held-{i}.sh", "#!/bin/sh\ntrue\n", ("-J", f"dep-target-{i}"))
        )
        assert out.returncode == 0, out.stderr
        ids.append(out.job_id or "")
    out = sbatch_diff.run(Invocation("held-array.sh", "#!/bin/sh\ntrue\n", ("--array=0-7",)))
    assert out.returncode == 0, out.stderr
    sbatch_diff.arrays.add(int(out.job_id or 0))
    return HeldJobs(tuple(ids), out.job_id or "")
