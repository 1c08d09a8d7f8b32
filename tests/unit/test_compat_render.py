"""JobSpec -> sbatch argv: parse(render(spec)) == spec for every spec the parser produces."""

from __future__ import annotations

import shlex
from dataclasses import fields
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.compat.errors import CompatError
from gateway.compat.optypes import EarlyExit, ParseContext
from gateway.compat.render import render_argv
from gateway.compat.sbatch import parse_sbatch
from gateway.model.jobspec import JobSpec
from tests.support.slurm_stack import CORPUS_DIR

NOW = 1_800_000_000.0
CTX = ParseContext(
    cwd="/home/alice/work",
    now=NOW,
    max_array_size=100_001,
    gres_names=("gpu", "craynetwork", "qpu"),
)
PLAIN = "#!/bin/bash\nsrun hostname\n"
SCRIPT = "/home/alice/work/job.sh"

_NAME = st.text(alphabet="abcXYZ019_-. ", min_size=1, max_size=10).map(str.strip).filter(bool)
_TEXT = st.text(alphabet="abc xyz#'\"=,:%", min_size=1, max_size=12)
_SMALL = st.integers(1, 16).map(str)

# Every option with values sbatch accepts (and a few it refuses): the generated option sets.
CATALOGUE: dict[str, st.SearchStrategy[str]] = {
    "--job-name": _NAME,
    "--partition": st.sampled_from(["cpu", "gpu", "cpu,gpu", "debug"]),
    "--account": _NAME,
    "--qos": st.sampled_from(["normal", "debug"]),
    "--reservation": _NAME,
    "--wckey": _NAME,
    "--comment": _TEXT,
    "--nodes": st.sampled_from(["1", "2", "4", "1-3", "2-0", "-3", "0"]),
    "--ntasks": _SMALL,
    "--cpus-per-task": st.integers(1, 8).map(str),
    "--ntasks-per-node": st.integers(1, 4).map(str),
    "--ntasks-per-socket": st.integers(1, 4).map(str),
    "--ntasks-per-core": st.integers(1, 2).map(str),
    "--mincpus": st.integers(1, 8).map(str),
    "--sockets-per-node": st.integers(1, 4).map(str),
    "--cores-per-socket": st.integers(1, 4).map(str),
    "--threads-per-core": st.integers(1, 2).map(str),
    "--extra-node-info": st.sampled_from(["2", "2:4", "2:4:1", "*:2", "0", "1:0:*"]),
    "--hint": st.sampled_from(["nomultithread", "compute_bound", "memory_bound", "multithread"]),
    "--mem": st.sampled_from(["4G", "1500", "0", "512K", "2T", "8GB"]),
    "--mem-per-cpu": st.sampled_from(["2G", "500M", "100"]),
    "--mem-per-gpu": st.sampled_from(["8G", "1024"]),
    "--tmp": st.sampled_from(["10G", "100"]),
    "--gres": st.sampled_from(
        ["gpu:2", "gpu:a100:1", "gpu", "craynetwork:1", "gpu:0", "none", "gpu:2k", "gres:gpu:1"]
    ),
    "--gpus": st.sampled_from(["2", "a100:1", "4", "1,a100:1"]),
    "--gpus-per-node": st.sampled_from(["1", "2", "v100:2", "a100:2,v100:1"]),
    "--gpus-per-socket": st.sampled_from(["1", "2"]),
    "--gpus-per-task": st.sampled_from(["1", "2"]),
    "--cpus-per-gpu": st.integers(1, 4).map(str),
    "--ntasks-per-gpu": st.integers(1, 3).map(str),
    "--time": st.sampled_from(
        ["30", "0", "1:30", "0:59", "2:00:00", "1-0", "1-2:30", "2-03:04:05", "UNLIMITED", "-1"]
    ),
    "--time-min": st.sampled_from(["10", "0:30", "1:00:00"]),
    "--begin": st.sampled_from(["now+1hour", "16:00", "2030-01-01", "today", "tomorrow", "noon"]),
    "--deadline": st.sampled_from(["now+3days", "2031-01-01T00:00:00"]),
    "--array": st.sampled_from(["0-9", "1,3,5", "0-20:5", "1-10%2", "[1-5]", "1-5,3-7", "%4"]),
    "--dependency": st.sampled_from(
        [
            "afterok:12",
            "afterany:12+5:13",
            "afterok:12?afternotok:13",
            "singleton",
            "afterok:7_[1-3]",
            "aftercorr:7_*",
            "12",
            "afterok:12(failed)",
            "afterok:12?afterok:12",
        ]
    ),
    "--kill-on-invalid-dep": st.sampled_from(["yes", "no"]),
    "--exclusive": st.sampled_from(["", "user", "mcs"]),
    "--oversubscribe": st.just(""),
    "--requeue": st.just(""),
    "--no-requeue": st.just(""),
    "--signal": st.sampled_from(["USR1", "USR1@120", "B:TERM@60", "R:10", "SIGUSR2@30"]),
    "--switches": st.sampled_from(["1", "2@10:00", "1@1-0", "3@x", "1@UNLIMITED"]),
    "--mail-type": st.sampled_from(["BEGIN,END", "ALL", "NONE", "fail", "ARRAY_TASKS"]),
    "--mail-user": st.sampled_from(["a@b.c"]),
    "--nice": st.sampled_from(["", "10", "-5", "0"]),
    "--priority": st.sampled_from(["100", "TOP"]),
    "--open-mode": st.sampled_from(["append", "truncate"]),
    "--output": st.sampled_from(["out-%j.txt", "/tmp/%x-%u.log", "logs/%A_%a.out", "none"]),
    "--error": st.sampled_from(["err-%j.txt", "/dev/null"]),
    "--input": st.sampled_from(["in.txt", "none"]),
    "--chdir": st.sampled_from(["/tmp", "sub/dir"]),
    "--export": st.sampled_from(["NONE", "ALL,FOO=1"]),
    "--get-user-env": st.sampled_from(["", "10", "30L"]),
    "--distribution": st.sampled_from(["block", "cyclic:cyclic", "plane=2", "*:*", "block,pack"]),
    "--nodelist": st.sampled_from(["node[01-02]", "node01,node03", "node04"]),
    "--exclude": st.sampled_from(["node02", "node[03-04]"]),
    "--constraint": st.sampled_from(["v100", "gpu&a100", "cpu|gpu"]),
    "--licenses": st.sampled_from(["cscratch1:2", "matlab"]),
    "--contiguous": st.just(""),
    "--overcommit": st.just(""),
    "--hold": st.just(""),
    "--clusters": st.sampled_from(["caldera"]),
    "--container-image": st.sampled_from(["ubuntu:22.04"]),
    "--container-mounts": st.sampled_from(["/a:/b,/c:/d"]),
    "--container-workdir": st.sampled_from(["/w"]),
    "--container-name": _NAME,
    "--image": st.sampled_from(["docker:ubuntu"]),
    "--gpu-memory": st.sampled_from(["40G"]),
    "--burst": st.sampled_from(["never", "prefer"]),
    "--acctg-freq": st.sampled_from(["task=30", "30,energy=60"]),
    "--cpu-freq": st.sampled_from(["high", "1000-2000:performance"]),
    "--gres-flags": st.sampled_from(["enforce-binding"]),
    "--bb": _TEXT,
    "--network": _NAME,
    "--no-kill": st.sampled_from(["", "off"]),
    "--propagate": st.sampled_from(["", "STACK"]),
    "--reboot": st.just(""),
    "--spread-job": st.just(""),
    "--use-min-nodes": st.just(""),
    "--wait-all-nodes": st.sampled_from(["0", "1"]),
    "--prefer": st.sampled_from(["a100"]),
    "--delay-boot": st.sampled_from(["10"]),
    "--mem-bind": st.sampled_from(["local", "map_mem:0,1"]),
    "--core-spec": st.sampled_from(["1", "0"]),
    "--profile": st.sampled_from(["task"]),
    "--uid": st.sampled_from(["1000"]),
}
OPTION = st.sampled_from(sorted(CATALOGUE)).flatmap(
    lambda name: CATALOGUE[name].map(lambda v: f"{name}={v}" if v else name)
)


def _parse(argv: list[str], script: str) -> JobSpec | None:
    try:
        return parse_sbatch(["sbatch", *argv, SCRIPT], script, {}, CTX).spec
    except (CompatError, EarlyExit):
        return None


def _roundtrip(spec: JobSpec, script: str) -> JobSpec:
    argv = ["sbatch", *render_argv(spec), SCRIPT, *spec.script_args]
    return parse_sbatch(argv, script, {}, CTX).spec


def _differences(a: JobSpec, b: JobSpec) -> dict[str, tuple[object, object]]:
    return {
        f.name: (getattr(a, f.name), getattr(b, f.name))
        for f in fields(JobSpec)
        if getattr(a, f.name) != getattr(b, f.name)
    }


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(OPTION, max_size=10))
def test_options_on_the_command_line_round_trip(options: list[str]) -> None:
    spec = _parse(options, PLAIN)
    if spec is not None:
        again = _roundtrip(spec, PLAIN)
        assert again == spec, _differences(spec, again)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(OPTION, max_size=10))
def test_options_in_the_script_round_trip(options: list[str]) -> None:
    script = "#!/bin/bash\n" + "".join(f"#SBATCH {shlex.quote(o)}\n" for o in options) + "true\n"
    spec = _parse([], script)
    if spec is not None:
        again = _roundtrip(spec, script)
        assert again == spec, _differences(spec, again)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(st.lists(OPTION, max_size=5), min_size=2, max_size=3))
def test_hetjob_components_round_trip(components: list[list[str]]) -> None:
    argv: list[str] = []
    for k, options in enumerate(components):
        argv += ([":"] if k else []) + options
    spec = _parse(argv, PLAIN)
    if spec is not None:
        again = _roundtrip(spec, PLAIN)
        assert again == spec, _differences(spec, again)


def _corpus() -> list[Path]:
    if not CORPUS_DIR.is_dir():
        return []
    return sorted(p for p in CORPUS_DIR.iterdir() if p.is_file() and p.name != "SOURCES.tsv")


def test_the_corpus_is_available() -> None:
    assert len(_corpus()) >= 60


@pytest.mark.parametrize("path", _corpus(), ids=lambda p: p.name)
def test_every_corpus_script_round_trips(path: Path) -> None:
    text = path.read_text(encoding="utf-8", errors="surrogateescape")
    try:
        spec = parse_sbatch(["sbatch", str(path)], text, {}, CTX).spec
    except CompatError:
        return  # refused scripts have no spec (their refusal is tested against real sbatch)
    again = parse_sbatch(["sbatch", *render_argv(spec), str(path)], text, {}, CTX).spec
    assert again == spec, _differences(spec, again)


def test_rendered_argv_spells_options_as_real_sbatch_accepts_them() -> None:
    spec = parse_sbatch(
        ["sbatch", "-N", "2", "-t", "1:30", "--begin=now+1hour", "--mem=4G", "-a", "1-3%2", SCRIPT],
        PLAIN,
        {},
        CTX,
    ).spec
    argv = render_argv(spec)
    assert "--nodes=2" in argv
    assert "--time=2" in argv
    assert f"--begin=uts{int(NOW) + 3600}" in argv
    assert "--mem=4096" in argv
    assert "--array=1-3%2" in argv
    assert argv[0] == "--job-name=job.sh"


def test_hetjob_components_are_joined_by_colons() -> None:
    spec = parse_sbatch(["sbatch", "-n", "1", ":", "-n", "2", SCRIPT], PLAIN, {}, CTX).spec
    argv = render_argv(spec)
    assert argv.count(":") == 1
    assert _roundtrip(spec, PLAIN) == spec
