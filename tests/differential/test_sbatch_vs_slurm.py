"""Caldera's sbatch parsing against the real `sbatch --hold` of the Slurm 22.05 test cluster.

Every script of the shared corpus and every case of `test_sbatch_cases.py` runs with the
options in the script, on the command line, through SBATCH_* variables and mixed (decoys
that CLI > env > script must override). For each run, the request fields of
`scontrol show job` must equal Caldera's `request_fields` of the parsed JobSpec, and a
rejection must have the same stderr and exit status. Run with `-s` to see the per-field
agreement table as the tests go; it is printed at the end in any case.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.compat.getopt import ParsedArg, getopt_long
from gateway.compat.optypes import Origin
from gateway.compat.script import read_directives
from tests.differential.conftest import AGREEMENT, HeldJobs, Invocation, SbatchDiff
from tests.differential.test_sbatch_cases import (
    CASES,
    DECOY_ENV,
    DECOY_LINES,
    Case,
    Mode,
    _as_env,
    _as_line,
    build,
)
from tests.support.slurm_stack import CORPUS_DIR

pytestmark = pytest.mark.slurm

# Differences kept on purpose, by (case or corpus file, mode or "*"): reason. Each is also
# listed in docs/compatibility.md.
DOCUMENTED: dict[tuple[str, str], str] = {}

PLUGIN_REASON = (
    "pyxis/shifter options: Caldera implements them (it runs the image itself); this "
    "Debian Slurm has no such SPANK plugin and rejects them"
)


def _corpus() -> list[Path]:
    if not CORPUS_DIR.is_dir():
        return []
    return sorted(p for p in CORPUS_DIR.iterdir() if p.is_file() and p.name != "SOURCES.tsv")


def test_the_corpus_is_there() -> None:
    assert len(_corpus()) >= 60, f"sbatch corpus missing or short: {CORPUS_DIR}"


# ---------------------------------------------------------------------------------------
# Corpus scripts in the four modes


def _components(text: str) -> list[list[ParsedArg]]:
    """Each component's options, as getopt reads the directives (None on a bad word)."""
    out: list[list[ParsedArg]] = []
    component = 0
    while True:
        found = read_directives(text, "corpus.sh", component)
        items, _ = getopt_long(found.argv, found.origins)
        out.append([i for i in items if isinstance(i, ParsedArg)])
        if not found.more_components:
            return out
        component += 1


def _words(text: str) -> list[str]:
    words: list[str] = []
    component = 0
    while True:
        found = read_directives(text, "corpus.sh", component)
        if component:
            words.append(":")
        words += found.argv[1:]
        if not found.more_components:
            return words
        component += 1


def _strip_directives(text: str) -> str:
    """The script without its `#SBATCH`/`#SLURM` lines (those before the first command)."""
    lines = text.split("\n")
    out: list[str] = []
    reading = True
    for i, line in enumerate(lines):
        if reading and i > 0:
            stripped = line.lstrip(" \t\n\v\f\r")
            if line.startswith(("#SBATCH", "#SLURM")):
                continue
            if stripped and not stripped.startswith("#"):
                reading = False
        out.append(line)
    return "\n".join(out)


def _with_lines(text: str, lines: list[str]) -> str:
    head, sep, rest = _strip_directives(text).partition("\n")
    return head + sep + "".join(f"#SBATCH {line}\n" for line in lines) + rest


def _is_plugin(item: ParsedArg) -> bool:
    return item.option.origin is not Origin.SLURM


def corpus_mode(text: str, mode: str, drop_plugin: bool = False) -> Mode | None:
    """A corpus script in `mode`; None when the mode does not apply to it."""
    comps = _components(text)
    if drop_plugin:
        comps = [[i for i in comp if not _is_plugin(i)] for comp in comps]
    lines: list[str] = []
    for k, comp in enumerate(comps):
        if k:
            lines.append("hetjob")
        lines += [_as_line(i) for i in comp]
    if mode == "script":
        return Mode(_with_lines(text, lines) if drop_plugin else text, (), {})
    if mode == "cli":
        words = [w for line in lines for w in _line_words(line)]
        return Mode(_strip_directives(text), tuple(words), {})
    if len(comps) > 1:
        return None  # SBATCH_* variables apply to every component alike
    items = comps[0]
    if mode == "env":
        env: dict[str, str] = {}
        kept = []
        for item in items:
            if item.option.env or item.option.long == "switches":
                env |= _as_env(item)
            else:
                kept.append(_as_line(item))
        if not env:
            return None
        return Mode(_with_lines(text, kept), (), env)
    half = len(lines) // 2
    cli = tuple(w for line in lines[half:] for w in _line_words(line))
    return Mode(_with_lines(text, [*DECOY_LINES, *lines[:half]]), cli, dict(DECOY_ENV))


def _line_words(line: str) -> list[str]:
    return [":"] if line == "hetjob" else _words(f"#!/bin/sh\n#SBATCH {line}\n")


CORPUS_RUNS = [
    pytest.param(path, mode, id=f"{path.name}-{mode}")
    for path in _corpus()
    for mode in ("script", "cli", "env", "mixed")
]


def _check(diff: SbatchDiff, mode: str, label: str, inv: Invocation, real: Invocation) -> None:
    out = diff.run(inv, real)
    differences = diff.compare(mode, label, out)
    documented = DOCUMENTED.get((label, mode)) or DOCUMENTED.get((label, "*"))
    if documented:
        return
    assert not differences, "\n".join(differences)


@pytest.mark.parametrize(("path", "mode"), CORPUS_RUNS)
def test_corpus_script_agrees_with_real_sbatch(
    sbatch_diff: SbatchDiff, path: Path, mode: str
) -> None:
    text = path.read_text(encoding="utf-8", errors="surrogateescape")
    built = corpus_mode(text, mode)
    if built is None:
        return  # not applicable (hetjob with SBATCH_* variables, or no SBATCH_* option)
    name = path.name if mode == "script" else f"{mode}-{path.name}"
    inv = Invocation(name, built.script, built.argv, built.env)
    has_plugin = any(_is_plugin(i) for comp in _components(text) for i in comp)
    if not has_plugin:
        _check(sbatch_diff, mode, path.name, inv, inv)
        return
    # Real Slurm here has no pyxis/shifter plugin: it must refuse the original...
    out = sbatch_diff.run(inv, inv)
    assert out.returncode == 255, out.stderr
    assert "unrecognized option '--" in out.stderr
    AGREEMENT.record(mode, "plugin options (documented)", False)
    AGREEMENT.differences.append(f"[{mode}] {path.name}: {PLUGIN_REASON}")
    # ...and agree on everything else once the plugin options are taken out for Slurm.
    stripped = corpus_mode(text, mode, drop_plugin=True)
    assert stripped is not None
    real = Invocation(name, stripped.script, stripped.argv, stripped.env)
    _check(sbatch_diff, mode, path.name, inv, real)


# ---------------------------------------------------------------------------------------
# The project's own cases


CASE_RUNS = [
    pytest.param(case, mode, id=f"{case.id}-{mode}") for case in CASES for mode in case.modes()
]


@pytest.mark.parametrize(("case", "mode"), CASE_RUNS)
def test_case_agrees_with_real_sbatch(
    sbatch_diff: SbatchDiff, held_jobs: HeldJobs, case: Case, mode: str
) -> None:
    built = build(case, mode, held_jobs.substitutions())
    inv = Invocation(
        f"{case.id}-{mode}.sh",
        built.script,
        built.argv,
        built.env,
        script_args=case.script_args,
    )
    _check(sbatch_diff, mode, case.id, inv, inv)
