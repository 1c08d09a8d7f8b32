"""`scontrol suspend` / `scontrol resume` against real Slurm 22.05 (the burst test cluster).

The same steps run on the burst cluster (tests/support/slurm_burst.py; its slurm.conf is
left as up.sh renders it: suspend/resume need no preemption settings) and on a Caldera
gateway with the local runner: the refusals (stderr and exit status, job ids replaced by
tokens) and one whole lifecycle of a running job, reduced to what must agree whatever the
timing (state letters, Reason, the operator's Priority 0, RunTime = SecsPreSuspend while
suspended, EndTime moved by the pause, sacct's Suspended and Elapsed = End - Start -
Suspended). The outputs these were first compared with are in
tests/data/slurm_suspend_22.05.json.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest

from tests.support.gateway_env import Gateway, start_gateway, stop_gateway
from tests.support.slurm_burst import SlurmClusters, run_on

pytestmark = [pytest.mark.slurm]

PAUSE_S = 3.0
CONFIG = '[[nodes]]\nname = "snode"\ncpus = 2\nmemory_mb = 2000\n'


@dataclass(frozen=True)
class Out:
    """What a command printed."""

    stdout: str
    stderr: str
    rc: int


Run = Callable[[list[str], str | None], Out]


@pytest.fixture(scope="module")
def caldera() -> Iterator[Gateway]:
    base = Path(tempfile.mkdtemp(prefix="caldera-suspend-diff-", dir="/tmp"))
    gw = start_gateway(base, CONFIG)
    try:
        yield gw
    finally:
        stop_gateway(gw)
        shutil.rmtree(base, ignore_errors=True)


def _real(clusters: SlurmClusters) -> tuple[Run, Path]:
    def run(argv: list[str], user: str | None) -> Out:
        p = run_on(clusters.burst, argv, user=user)
        return Out(p.stdout, p.stderr, p.returncode)

    return run, clusters.burst.jobs_dir


def _ours(gw: Gateway) -> tuple[Run, Path]:
    def run(argv: list[str], user: str | None) -> Out:
        p = gw.run(argv, user=user)
        return Out(p.stdout, p.stderr, p.returncode)

    return run, gw.workdir


def _sbatch(run: Run, *args: str) -> str:
    out = run(["sbatch", "--parsable", "-o", "/dev/null", *args], "tester")
    assert out.rc == 0, out
    return out.stdout.strip().split(";")[0]


def _wait(run: Run, job: str, states: tuple[str, ...], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        got = run(["squeue", "-h", "-j", job, "-o", "%T"], None).stdout.strip()
        if got in states or (not got and "" in states):
            return
        assert time.monotonic() < deadline, f"job {job}: {got!r}, not {states}"
        time.sleep(0.2)


def _field(text: str, key: str) -> str:
    m = re.search(rf"\b{re.escape(key)}=(\S+)", text)
    assert m, f"{key} not in {text}"
    return m.group(1)


def _secs(text: str) -> int:
    days, _, hms = text.rpartition("-")
    total = 0
    for part in hms.split(":"):
        total = total * 60 + int(part)
    return total + 86400 * int(days or 0)


def _epoch(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S").timestamp()


def _refusals(run: Run) -> list[tuple[str, str, int]]:
    """Each refusal as (what, stderr with the ids as tokens, exit status)."""
    running = _sbatch(run, "-t", "5", "--wrap", "sleep 60")
    held = _sbatch(run, "--hold", "--wrap", "true")
    done = _sbatch(run, "--wrap", "true")
    _wait(run, running, ("RUNNING",))
    _wait(run, done, ("", "COMPLETED"))
    time.sleep(1)
    names = {running: "<running>", held: "<held>", done: "<done>"}

    def case(what: str, argv: list[str], user: str | None = None) -> tuple[str, str, int]:
        out = run(argv, user)
        text = re.sub(r"\b\d+\b", lambda m: names.get(m.group(0), m.group(0)), out.stderr)
        return what, text, out.rc

    got = [
        case("user suspends", ["scontrol", "suspend", running], "tester"),
        case("user resumes", ["scontrol", "resume", running], "tester"),
        case("resume running", ["scontrol", "resume", running]),
        case("suspend pending", ["scontrol", "suspend", held]),
        case("resume pending", ["scontrol", "resume", held]),
        case("suspend done", ["scontrol", "suspend", done]),
        case("suspend unknown", ["scontrol", "suspend", "999999"]),
        case("bad id", ["scontrol", "suspend", "abc"]),
        case("no id", ["scontrol", "suspend"]),
    ]
    run(["scancel", running, held], None)
    return got


def test_refusals_agree_with_slurm(slurm_burst_cluster: SlurmClusters, caldera: Gateway) -> None:
    real, _ = _real(slurm_burst_cluster)
    ours, _ = _ours(caldera)
    assert _refusals(ours) == _refusals(real)


def _lifecycle(run: Run, workdir: Path) -> dict[str, object]:
    """Suspend a running job for PAUSE_S, resume it, cancel it: what must agree."""
    stamps = workdir / f"susp-{time.time_ns()}.ts"
    job = _sbatch(run, "-t", "5", "--wrap", f"while :; do date +%s.%N >> {stamps}; sleep 0.2; done")
    _wait(run, job, ("RUNNING",))
    time.sleep(2)
    assert run(["scontrol", "suspend", job], None).rc == 0
    time.sleep(0.5)
    count = len(stamps.read_text().split())
    time.sleep(PAUSE_S)
    facts: dict[str, object] = {"stopped": len(stamps.read_text().split()) == count}
    facts["squeue"] = run(["squeue", "-h", "-j", job, "-o", "%t %T %r"], None).stdout.split()
    show = run(["scontrol", "show", "job", job], None).stdout
    facts["priority while suspended"] = _field(show, "Priority")
    facts["runtime is presuspend"] = _secs(_field(show, "RunTime")) == int(
        _field(show, "SecsPreSuspend")
    )
    facts["resuspend"] = run(["scontrol", "suspend", job], None)
    end_before = _epoch(_field(show, "EndTime"))
    assert run(["scontrol", "resume", job], None).rc == 0
    time.sleep(1.5)
    show = run(["scontrol", "show", "job", job], None).stdout
    facts["state after resume"] = _field(show, "JobState")
    moved = _epoch(_field(show, "EndTime")) - end_before
    facts["endtime moved by the pause"] = PAUSE_S - 1 <= moved <= PAUSE_S + 3
    facts["continued"] = len(stamps.read_text().split()) > count
    run(["scancel", job], None)
    _wait(run, job, ("",))
    row = run(
        ["sacct", "-X", "-n", "-P", "-o", "State,Elapsed,Suspended,Start,End", "-j", job], None
    ).stdout.split("|")
    state, elapsed, suspended, start, end = (c.strip() for c in row)
    facts["sacct state"] = state
    facts["suspended about the pause"] = PAUSE_S - 1 <= _secs(suspended) <= PAUSE_S + 3
    span = _epoch(end) - _epoch(start)
    facts["elapsed leaves the pause out"] = abs(_secs(elapsed) - (span - _secs(suspended))) <= 1
    stamps.unlink(missing_ok=True)
    return facts


def test_lifecycle_agrees_with_slurm(slurm_burst_cluster: SlurmClusters, caldera: Gateway) -> None:
    real = _lifecycle(*_real(slurm_burst_cluster))
    ours = _lifecycle(*_ours(caldera))
    assert real["stopped"] is True
    assert real["continued"] is True
    assert ours == real
