"""The corpus's lifecycle on real Slurm and on Caldera, field by field (issue 14, item 1).

Every script of the shared corpus, adapted only in sizes (`corpus_adapt.adapt_script`), is
submitted at once to the real 4-node Slurm 22.05 test cluster and to a Caldera gateway whose
local site is that cluster's own slurm.conf; both run them to completion (no time_scale:
Elapsed is compared). Then, per script: sbatch's answer, sacct's rows (job, array tasks,
batch and srun steps), `scontrol show job` after the end, and the files the job wrote
(names and contents, with job ids, the work directory, the spool copy of the script, clocks
and node names normalised). Node lists are compared as placements: the same number of
nodes, all fit for the job (see `corpus_lifecycle.placement`).

Each field's test asserts that every disagreement is one of KNOWN (legitimate, with its
reason) or OPEN (Caldera's divergences still to fix, listed in docs/compatibility.md and
counted apart, never silently). The per-field table (agreed / known / open / differ / total)
is printed and written to `$CALDERA_TEST_LOG_DIR/lifecycle-agreement.md`.
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.differential.corpus_adapt import adapt_script
from tests.differential.corpus_lifecycle import (
    SACCT_FIELDS,
    Collected,
    Side,
    Verdict,
    agreement_table,
    compare,
)
from tests.support.gateway_env import start_gateway, stop_gateway
from tests.support.shared_data import CORPUS_DIR
from tests.support.slurm_stack import SlurmStack

pytestmark = pytest.mark.slurm

# The real cluster runs the corpus in about four minutes: one job per scheduling pass
# (~3 s), and two scripts that loop until their one-minute limit hold nodes meanwhile.
WAIT_S = 420


@dataclass(frozen=True)
class Known:
    """A field where Caldera legitimately differs, when `applies`, and why."""

    field: str
    reason: str
    applies: Callable[[Verdict, Collected], bool]


def _timeout_or_stalled(v: Verdict, real: Collected) -> bool:
    state = real.sacct_state(v.row)
    stalled = any("Temporary failure in name resolution" in t for t in real.files.values())
    return state.startswith("TIMEOUT") or stalled


KNOWN: tuple[Known, ...] = (
    Known(
        "show:Account",
        "the cluster's slurmdbd gives root its default account `root`; the gateway was given "
        "the cluster's slurm.conf, not its accounting associations",
        lambda v, _: (v.real, v.ours) == ("root", ""),
    ),
    Known(
        "show:Scheduler",
        "which of slurmctld's two schedulers (Main, Backfill) started the job depends on "
        "when it was submitted relative to the backfill cycle; Caldera has one scheduler",
        lambda v, _: {v.real, v.ours} == {"Main", "Backfill"},
    ),
    Known(
        "show:TimeLimit",
        "a job without a time limit that slurmctld's backfill scheduler started keeps the "
        "365-day limit backfill plans with (the main scheduler's jobs show UNLIMITED)",
        lambda v, real: (
            (v.real, v.ours) == ("365-00:00:00", "UNLIMITED")
            and real.show_value(v.row, "Scheduler") == "Backfill"
        ),
    ),
    Known(
        "sbatch exit+stderr",
        "`--image` (shifter) is Caldera's container option; the test cluster has no shifter "
        "plugin, so its sbatch stops at the unknown option (docs/compatibility.md)",
        lambda v, _: "unrecognized option '--image=" in v.real,
    ),
    Known(
        "output contents",
        "on the real nodes `hostname -i` finds no resolver (their network namespaces have "
        "none) and prints nothing (the job's output says so); on this machine it prints an "
        "address",
        lambda v, real: any(
            "Temporary failure in name resolution" in t for t in real.files.values()
        ),
    ),
    Known(
        "Elapsed",
        "slurmctld enforces time limits in a periodic check (TIMEOUT jobs run up to ~30 s "
        "past their limit), and on the real nodes `hostname -i` waits ~10 s for a resolver "
        "their network namespaces lack",
        _timeout_or_stalled,
    ),
)


def known_reason(v: Verdict, scripts: dict[str, Collected]) -> str | None:
    """The reason of a known difference, or None."""
    for k in KNOWN:
        if (v.field == k.field or v.field.startswith(k.field + ":")) and k.applies(
            v, scripts[v.script]
        ):
            return k.reason
    return None


@dataclass(frozen=True)
class Open:
    """A divergence that is Caldera's to fix (docs/compatibility.md lists each): the test
    counts it apart, and fails on any difference neither KNOWN nor OPEN explains. An entry
    is removed once fixed; `applies` names the cause as narrowly as the comparison allows."""

    what: str
    applies: Callable[[Verdict, Collected, str], bool]  # (verdict, real side, script text)


def _tres_items(text: str) -> dict[str, str]:
    return dict(item.partition("=")[::2] for item in text.split(",") if item)


def _typed_or_licence_only(v: Verdict) -> bool:
    """The values differ only in typed GRES / licence items Slurm accounts
    (AccountingStorageTRES names gres/gpu:a100 and the licences)."""
    if "TRES" not in v.field or v.ours == "<absent>":
        return False
    real = {k: x for k, x in _tres_items(v.real).items() if ":" not in k and "license/" not in k}
    return real == _tres_items(v.ours)


def _whole_node_share(v: Verdict) -> bool:
    """--exclusive gets every GPU of its nodes and --mem=0 all their memory in Slurm's TRES;
    Caldera accounts what the job asked for."""
    if "TRES" not in v.field or v.ours == "<absent>":
        return False
    real = {k: x for k, x in _tres_items(v.real).items() if ":" not in k and "license/" not in k}
    ours = _tres_items(v.ours)
    differing = {k for k in real.keys() | ours.keys() if real.get(k) != ours.get(k)}
    return differing <= {"gres/gpu", "mem"} and (ours.get("mem") == "0" or "gres/gpu" in differing)


def _script_has(*words: str) -> Callable[[Verdict, Collected, str], bool]:
    return lambda v, real, text: any(w in text for w in words)


OPEN: tuple[Open, ...] = (
    Open(
        "typed GRES and licences are not in Caldera's TRES (Slurm adds gres/gpu:a100=N and "
        "license/<name>=N because AccountingStorageTRES names them)",
        lambda v, real, text: _typed_or_licence_only(v),
    ),
    Open(
        "--exclusive takes every GPU of its nodes, --mem=0 all their memory, in Slurm's TRES",
        lambda v, real, text: _whole_node_share(v),
    ),
    Open(
        "DerivedExitCode: Slurm leaves 0:0 when the failing step was the script's last "
        "command and counts later steps otherwise (varies between runs); unconfirmed",
        lambda v, real, text: v.field == "DerivedExitCode",
    ),
    Open(
        "a login shell (#!/bin/bash -l) resets PATH: the spool's srun is lost and the "
        "machine's own Slurm srun runs",
        lambda v, real, text: re.match(r"#!\S*bash\s+(-l|--login)\b", text) is not None,
    ),
    Open(
        "srun --kill-on-bad-exit (-K): Slurm terminates a step's other tasks once one fails "
        "(`srun: Force Terminated StepId=...`); Caldera's srun lets them run to their end",
        _script_has("--kill-on-bad-exit", "srun -K"),
    ),
    Open(
        "--signal B:SIG@N with N beyond the time limit: Caldera signals at once, slurmctld at "
        "its next periodic check (short jobs end first)",
        _script_has("--signal"),
    ),
)


def open_divergence(v: Verdict, scripts: dict[str, Collected], texts: dict[str, str]) -> bool:
    """Whether an open divergence explains this difference."""
    return any(o.applies(v, scripts[v.script], texts[v.script]) for o in OPEN)


@dataclass(frozen=True)
class Run:
    """Every compared value of the run, what real Slurm did per script, and the scripts."""

    verdicts: tuple[Verdict, ...]
    real: dict[str, Collected]
    texts: dict[str, str]

    def kind(self, v: Verdict) -> str | None:
        """ "known", "open", or None: a difference nothing explains."""
        if known_reason(v, self.real) is not None:
            return "known"
        return "open" if open_divergence(v, self.real, self.texts) else None

    def unexplained(self, fields: Sequence[str]) -> list[Verdict]:
        """The disagreements of these fields that no known or open difference explains."""
        return [
            v
            for v in self.verdicts
            if (v.field in fields or v.field.split(":")[0] in fields)
            and not v.agreed
            and self.kind(v) is None
        ]


def _corpus() -> dict[str, str]:
    return {
        p.name: adapt_script(p.read_text(errors="surrogateescape"))
        for p in sorted(CORPUS_DIR.iterdir())
        if p.name != "SOURCES.tsv"
    }


@pytest.fixture(scope="module")
def run(cluster: SlurmStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    scripts = _corpus()
    real_root = cluster.jobs_dir / f"caldera-lifecycle-{os.getpid()}"
    real_root.mkdir(mode=0o777)
    real_root.chmod(0o777)
    base = Path(tempfile.mkdtemp(prefix="caldera-lifecycle-", dir="/tmp"))
    gw = start_gateway(base, f'[local]\nslurm_conf = "{cluster.slurm_conf}"\n')

    def real_run(argv: Sequence[str], cwd: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv), env=dict(cluster.env), cwd=cwd, capture_output=True, text=True,
            timeout=120,
        )  # fmt: skip

    real = Side("slurm", real_run, real_root)
    ours = Side("caldera", lambda argv, cwd: gw.run(list(argv), cwd=cwd), gw.workdir)
    try:
        real.submit_all(scripts)
        ours.submit_all(scripts)
        assert real.job_ids(), "real Slurm accepted none of the corpus"
        left = real.wait_all(WAIT_S), ours.wait_all(WAIT_S)
        assert left == ([], []), f"still queued after {WAIT_S} s: {left}"
        real.collect()
        ours.collect()
        verdicts = tuple(v for name in scripts for v in compare(real.scripts[name],
                                                               ours.scripts[name]))  # fmt: skip
        done = Run(verdicts, real.scripts, scripts)
        _report(done, tmp_path_factory)
        yield done
    finally:
        real.cancel_all()
        ours.cancel_all()
        stop_gateway(gw)
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(real_root, ignore_errors=True)


def _report(done: Run, tmp_path_factory: pytest.TempPathFactory) -> None:
    table = agreement_table(done.verdicts, done.kind)

    def listed(kind: str | None) -> str:
        return "\n".join(
            f"- {_shown(v)}" for v in done.verdicts if not v.agreed and done.kind(v) == kind
        )

    known = "\n".join(f"- {k.field}: {k.reason}" for k in KNOWN)
    opened = "\n".join(f"- {o.what}" for o in OPEN)
    text = (
        f"{table}\n\nKnown differences:\n{known}\n\nOpen divergences (Caldera's):\n{opened}"
        f"\n\nDifferences nothing explains:\n{listed(None)}\n\nOpen, by value:\n{listed('open')}"
    )
    log_dir = Path(os.environ.get("CALDERA_TEST_LOG_DIR", str(tmp_path_factory.getbasetemp())))
    (log_dir / "lifecycle-agreement.md").write_text(text + "\n")
    print("\ncorpus lifecycle vs real Slurm (agreed/known/open/differ/total)\n" + table)


def _explain(bad: list[Verdict]) -> str:
    return "\n".join(_shown(v) for v in bad[:30])


def _shown(v: Verdict) -> str:
    """One difference; for files, only the lines one side has (`-` Slurm, `+` Caldera)."""
    if v.field == "output contents":
        lines = difflib.ndiff(v.real.splitlines(), v.ours.splitlines())
        delta = " | ".join(x for x in lines if x[:1] in "-+")
        return f"{v.script} [{v.row}] {v.field}: {delta[:600]}"
    return f"{v.script} [{v.row}] {v.field}: slurm={v.real[:400]!r} caldera={v.ours[:400]!r}"


def test_the_real_cluster_ran_the_corpus(run: Run) -> None:
    """The comparison means something: most scripts ran on real Slurm, with steps."""
    ran = [c for c in run.real.values() if c.job_id]
    assert len(ran) >= 50, len(ran)
    assert sum(any(".batch" in k for k in c.sacct) for c in ran) >= 50
    assert sum(any(k.split(".")[-1].isdigit() for k in c.sacct) for c in ran) >= 10


@pytest.mark.parametrize(
    "fields",
    [
        ("sbatch exit+stderr",),
        ("steps",),
        *[(f,) for f in SACCT_FIELDS[1:]],
        ("show",),
        ("output file names",),
        ("output contents",),
    ],
    ids=lambda f: f[0],
)
def test_field_agrees_with_real_slurm(run: Run, fields: tuple[str, ...]) -> None:
    bad = run.unexplained(fields)
    assert not bad, f"{len(bad)} unexplained differences:\n{_explain(bad)}"
