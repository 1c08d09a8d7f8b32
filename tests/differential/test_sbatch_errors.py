"""Bad sbatch input: Caldera must print real sbatch's exact stderr and exit with its status.

Each case runs through the real `sbatch --hold --parsable` of the test cluster (as root,
or as the unprivileged `tester` through runuser) and through `parse_sbatch`; the
`CompatError` must render (`render('sbatch')`) to sbatch's stderr byte for byte and carry
its exit status. Only request errors are listed here; site checks (unknown partition,
account, QOS) belong to the gateway.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from tests.differential.conftest import AGREEMENT, HeldJobs, Invocation, SbatchDiff

pytestmark = pytest.mark.slurm

OK = "#!/bin/sh\ntrue\n"


@dataclass(frozen=True)
class Bad:
    """One invocation that real sbatch refuses."""

    id: str
    script: str = OK
    argv: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    user: str | None = None
    documented: str = ""  # a difference kept on purpose (docs/compatibility.md)


def _d(id: str, *lines: str) -> Bad:
    """The options as `#SBATCH` lines."""
    return Bad(id, "#!/bin/sh\n" + "".join(f"#SBATCH {line}\n" for line in lines) + "true\n")


def _a(id: str, *argv: str, user: str | None = None, documented: str = "") -> Bad:
    """The options on the command line."""
    return Bad(id, OK, argv, user=user, documented=documented)


PLUGIN = "Caldera implements the pyxis/shifter options; this Slurm has no such SPANK plugin"


CASES: tuple[Bad, ...] = (
    # --- the script itself ---------------------------------------------------------------
    Bad("no-shebang", "echo hello\n"),
    Bad("shebang-not-first", "\n#!/bin/sh\ntrue\n"),
    Bad("dos-line-breaks", "#!/bin/sh\r\n#SBATCH -t 5\r\ntrue\r\n"),
    Bad("empty-script", ""),
    Bad("whitespace-only", "  \n\t\n"),
    Bad("nul-byte", "#!/bin/sh\ntrue\0\n"),
    Bad("unmatched-quote", "#!/bin/sh\n#SBATCH --comment='abc\ntrue\n"),
    Bad("unexpected-colon", "#!/bin/sh\n#SBATCH -n 1 : -n 2\ntrue\n"),
    Bad("invalid-directive-word", "#!/bin/sh\n#SBATCH -n 1 stray\ntrue\n"),
    Bad("slurm-magic-then-error", "#!/bin/sh\n#SLURM -t 5\n#SBATCH --bogus\ntrue\n"),
    # --- time ----------------------------------------------------------------------------
    _a("time-letters-cli", "--time=abc"),
    _d("time-letters-script", "--time=abc"),
    _a("time-two-dashes", "--time=1-2-3"),
    _a("time-three-colons", "--time=1:2:3:4"),
    _a("time-min-bad", "--time-min=x"),
    _a("time-min-above-time", "-t", "10", "--time-min=20"),
    _a("time-min-zero-is-infinite", "-t", "10", "--time-min=0"),
    _a("time-empty", "--time="),
    # --- unknown, ambiguous and incomplete options ------------------------------------------
    _a("unknown-long-cli", "--bogus"),
    _a("unknown-short-cli", "-y"),
    _d("unknown-long-script", "--bogus"),
    _d("unknown-short-script", "-y"),
    _a("ambiguous-cli", "--tim=5"),
    _d("ambiguous-script", "--mem-per=5"),
    _a("ambiguous-gpus", "--gpus-per=1"),
    _a("flag-with-value", "--hold=yes"),
    _a("missing-argument-long", "--job-name"),
    _a("missing-argument-short", "-J"),
    _d("missing-argument-script", "-J"),
    _a("unknown-and-bad-value", "--time=abc", "--bogus"),
    _a("plugin-option-on-slurm", "--container-image=ubuntu", documented=PLUGIN),
    Bad(
        "shifter-image-in-script",
        "#!/bin/sh\n#SBATCH --image=docker:ubuntu\ntrue\n",
        documented=PLUGIN,
    ),
    # --- arrays --------------------------------------------------------------------------
    _a("array-beyond-max", "--array=0-100001"),
    _a("array-reversed", "--array=3-1"),
    _a("array-letters", "--array=a-b"),
    _a("array-zero-step", "--array=1-5:0"),
    _a("array-negative", "--array=-1"),
    _a("array-trailing-junk", "--array=1-3x"),
    # --- dependencies --------------------------------------------------------------------
    _a("dep-letters", "-d", "afterok:abc"),
    _a("dep-unknown-type", "-d", "afterfoo:{job1}"),
    _a("dep-zero-delay", "-d", "afterok:{job1}+0"),
    _a("dep-singleton-junk", "-d", "singletonx"),
    _a("dep-expand", "-d", "expand:{job1}"),
    _a("dep-trailing-comma", "-d", "afterok:{job1},"),
    _a("dep-space", "-d", "afterok:{job1} x"),
    _a("dep-job-zero", "-d", "afterok:0"),
    _a("dep-unclosed-state", "-d", "afterok:{job1}(failed"),
    _a("dep-bad-bracket", "-d", "afterok:{arr}_[3-1]"),
    # --- begin and deadline --------------------------------------------------------------
    _a("begin-garbage", "--begin=abc"),
    _a("begin-hour-25", "--begin=25:00"),
    _a("begin-now-plus-nothing", "--begin=now+"),
    _a("begin-month-13", "--begin=13/01"),
    _a("begin-bad-unit", "--begin=now+5fortnights"),
    _a("deadline-past", "--deadline=2020-01-01"),
    _a("deadline-before-begin", "--begin=now+2days", "--deadline=now+1day"),
    _a(
        "deadline-too-soon-for-time-min",
        "--deadline=now+1hour",
        "--time-min=2:00:00",
        "-t",
        "3:00:00",
    ),
    # --- memory --------------------------------------------------------------------------
    _a("mem-fraction", "--mem=1.5G"),
    _a("mem-letters", "--mem=abc"),
    _a("mem-unknown-unit", "--mem=4X"),
    _a("mem-negative", "--mem=-1"),
    _a("mem-per-cpu-bad", "--mem-per-cpu=lots"),
    _a("mem-exclusive-cli", "--mem=1G", "--mem-per-cpu=1G"),
    _d("mem-exclusive-script", "--mem=1G --mem-per-gpu=1G"),
    Bad("mem-exclusive-env", OK, (), {"SBATCH_MEM_PER_NODE": "1G", "SBATCH_MEM_PER_CPU": "1G"}),
    _a("mem-per-gpu-without-gpus", "--mem-per-gpu=1G"),
    # --- nodes, tasks, cpus --------------------------------------------------------------
    _a("nodes-letters", "-N", "abc"),
    _a("nodes-max-below-min", "-N", "3-1"),
    _a("nodes-bad-max", "-N", "1-x"),
    _a("nodes-open-ended", "-N", "2-"),
    _a("ntasks-zero", "-n", "0"),
    _a("ntasks-negative", "--ntasks=-1"),
    _a("ntasks-letters", "-n", "four"),
    _a("cpus-zero", "-c", "0"),
    _a("ntasks-per-node-bad", "--ntasks-per-node=x"),
    _a("ntasks-per-gpu-and-per-node", "--ntasks-per-gpu=1", "--ntasks-per-node=2"),
    # --- gres ----------------------------------------------------------------------------
    _a("gres-unknown-name", "--gres=foo:1"),
    _a("gres-slash-prefix", "--gres=gres/gpu:1"),
    _a("gres-empty-count", "--gres=gpu:"),
    _a("gres-bad-count", "--gres=gpu:a100:1x"),
    _a("gres-empty-item", "--gres=gpu:1,,craynetwork:1"),
    _a("gres-typed-and-untyped", "--gres=gpu:2,gpu:a100:1"),
    _a("gpus-per-task-without-tasks", "--gpus-per-task=2"),
    _a("gpus-not-multiple-of-per-node", "--gpus=3", "--gpus-per-node=2"),
    _a("gpus-fewer-than-nodes", "--gpus=1", "-N", "2"),
    _a("gpus-per-socket-without-sockets", "--gpus-per-socket=1"),
    _a("cpus-per-gpu-with-cpus-per-task", "--cpus-per-gpu=2", "-c", "2", "--gpus=1"),
    _a("ntasks-per-gpu-alone", "--ntasks-per-gpu=2"),
    _a("gpus-bad-with-clusters", "-M", "caldera", "--gpus-per-task=2"),
    # --- other values --------------------------------------------------------------------
    _a("signal-unknown", "--signal=FOO"),
    _a("signal-time-too-big", "--signal=USR1@70000"),
    _a("mail-type-unknown", "--mail-type=SOMETIMES"),
    _a("nice-out-of-range", "--nice=2147483647"),
    _a("exclusive-bad", "--exclusive=sometimes"),
    _a("open-mode-bad", "--open-mode=overwrite"),
    _a("hint-bad", "--hint=fastest"),
    _a("switches-zero", "--switches=0"),
    _a("switches-letters", "--switches=x@5"),
    _a("kill-on-invalid-dep-bad", "--kill-on-invalid-dep=maybe"),
    _a("distribution-bad", "-m", "zigzag"),
    _a("cpu-freq-bad", "--cpu-freq=turbo"),
    _a("wrap-with-script-args", "--wrap=true", "extra"),
    _a("priority-negative", "--priority=-5"),
    _a("extra-node-info-bad", "-B", "x"),
    _a("tmp-bad", "--tmp=big"),
    _a("mem-bind-bad", "--mem-bind=nowhere"),
    _a("mem-bind-map-without-list", "--mem-bind=map_mem"),
    _a("acctg-freq-bad", "--acctg-freq=often"),
    _a("profile-bad", "--profile=everything-x"),
    _a("gres-flags-bad", "--gres-flags=bind"),
    _a("delay-boot-bad", "--delay-boot=later"),
    _a("wait-all-nodes-bad", "--wait-all-nodes=2"),
    _a("no-kill-bad", "--no-kill=maybe"),
    _a("core-spec-letters", "-S", "x"),
    _a("thread-spec-zero", "--thread-spec=0"),
    _a("distribution-plane-without-size", "-m", "plane"),
    _a("distribution-too-many-levels", "-m", "block:block:block:block"),
    _a("distribution-bad-flag", "-m", "block,tight"),
    _a("cpu-freq-gov-twice", "--cpu-freq=performance:ondemand"),
    _a("cpu-freq-reversed", "--cpu-freq=3000-1000"),
    _a("cpu-freq-gov-without-max", "--cpu-freq=1000:performance"),
    _a("cpu-freq-gov-not-allowed", "--cpu-freq=conservative"),
    _a("arbitrary-without-nodelist", "-m", "arbitrary"),
    _a("cores-per-socket-zero", "--cores-per-socket=0"),
    # --- privileges --------------------------------------------------------------------
    _a("uid-as-non-root", "--uid=0", user="tester"),
    _a("gid-as-non-root", "--gid=0", user="tester"),
    _a("uid-name-as-non-root", "--uid=root", user="tester"),
)


def _fill(text: str, subs: Mapping[str, str]) -> str:
    for key, value in subs.items():
        text = text.replace("{" + key + "}", value)
    return text


def test_there_are_bad_input_cases_for_every_required_kind() -> None:
    ids = " ".join(c.id for c in CASES)
    for word in (
        "no-shebang",
        "dos",
        "empty",
        "nul",
        "time",
        "unknown",
        "ambiguous",
        "missing-argument",
        "array",
        "dep-",
        "begin",
        "mem-",
        "nodes",
        "mem-exclusive",
        "uid-as-non-root",
    ):
        assert word in ids


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_fails_exactly_as_real_sbatch(
    sbatch_diff: SbatchDiff, held_jobs: HeldJobs, case: Bad
) -> None:
    subs = held_jobs.substitutions()
    inv = Invocation(
        f"bad-{case.id}.sh",
        _fill(case.script, subs),
        tuple(_fill(a, subs) for a in case.argv),
        {k: _fill(v, subs) for k, v in case.env.items()},
        user=case.user,
    )
    out = sbatch_diff.run(inv)
    assert out.returncode != 0, f"real sbatch accepted it: {out.stdout!r} {out.stderr!r}"
    if case.documented:
        assert "unrecognized option '--" in out.stderr
        AGREEMENT.record("errors", "plugin options (documented)", False)
        AGREEMENT.differences.append(f"[errors] {case.id}: {case.documented}")
        return
    differences = sbatch_diff.compare("errors", case.id, out)
    assert not differences, "\n".join(differences)
