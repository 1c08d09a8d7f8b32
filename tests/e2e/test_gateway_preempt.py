"""Preemption on the local runner through the real gateway (`caldera up`): PreemptType
preempt/qos, a job of QOS `high` (Preempt=low) that cannot start ends a running job of QOS
`low` and starts only once that run has ended.

REQUEUE: the victim runs again later, its runs never overlap and never overlap the
preemptor (every run records with flock, tests/support/attempt_log.py). CANCEL with
GraceTime: the victim gets SIGTERM, is ended after the grace, and scontrol and sacct show
it as Slurm does (tests/data/slurm_preempt_22.05.json: State PREEMPTED, ExitCode the batch
shell's, 0:9 for one that outlived KillWait; sacct's job row 0:0, its batch step
CANCELLED 0:9). Every step is in the jobs' event logs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.store.sqlite import SqliteStore
from tests.support.attempt_log import AttemptLog
from tests.support.gateway_env import Gateway, running_gateway

# job seconds run 20x faster: a requeued victim waits 121 job seconds (6 s), GraceTime=60 is 3 s
CONFIG = """time_scale = 0.05
kill_wait_s = 2
preempt_type = "preempt/qos"
preempt_mode = "REQUEUE"
[[nodes]]
name = "pnode"
cpus = 2
memory_mb = 2000
"""


@pytest.fixture
def pgw() -> Iterator[Gateway]:
    """A gateway with one 2-CPU node and preempt/qos (site mode REQUEUE)."""
    with running_gateway(CONFIG, "caldera-e2e-preempt-") as gw:
        yield gw


def _events(gw: Gateway, job: int) -> list[tuple[str, float, dict[str, object]]]:
    store = SqliteStore(gw.home / "caldera.db")
    return [(e.kind, e.time, dict(e.detail)) for e in store.events(job)]


def _started_at(path: Path, timeout: float = 60) -> float:
    deadline = time.monotonic() + timeout
    while not path.exists() or not path.read_text().strip():
        assert time.monotonic() < deadline, f"{path} never written"
        time.sleep(0.05)
    return float(path.read_text().split()[0])


def _preemptor(gw: Gateway, stamp: Path) -> int:
    """A 2-CPU job of QOS high that records when it started."""
    return gw.sbatch(
        "--qos=high", "-n", "2", "-o", "/dev/null",
        "--wrap", f"date +%s.%N > {stamp}; sleep 1",
        user="tester",
    )  # fmt: skip


def test_a_high_qos_job_requeues_a_low_one_and_their_runs_never_overlap(pgw: Gateway) -> None:
    gw = pgw
    gw.ok(["sacctmgr", "-i", "add", "qos", "low"])
    gw.ok(["sacctmgr", "-i", "add", "qos", "high", "preempt=low", "priority=100"])
    log = AttemptLog(gw.workdir)
    script = gw.workdir / "victim.sh"
    script.write_text(log.script(1, "--requeue", "--qos=low", "-n", "2", "-o", "/dev/null"))
    script.chmod(0o644)
    victim = gw.sbatch(str(script), user="tester")
    log.wait_for(victim, 0)

    stamp = gw.workdir / "high.started"
    high = _preemptor(gw, stamp)
    began = _started_at(stamp)
    # pending again as slurmctld leaves a requeued job: BeginTime, eligible 121 s later
    assert gw.ok(["squeue", "-h", "-j", str(victim), "-o", "%T %r"]).split() == [
        "PENDING",
        "BeginTime",
    ]
    assert gw.wait(high)["state"] == "COMPLETED"
    assert gw.wait(victim, timeout=90)["state"] == "COMPLETED"

    # the victim ran twice, never overlapping itself, and its first run was over before
    # the preemptor started
    log.assert_never_twice(victim, 2)
    log.assert_all_gone(victim)
    first_run = [r.time for r in log.records(victim) if r.attempt == 0]
    second_run = [r.time for r in log.records(victim) if r.attempt == 1]
    assert max(first_run) < began < min(second_run)
    show = gw.ok(["scontrol", "show", "job", str(victim)])
    assert "Restarts=1" in show

    kinds = [k for k, _, _ in _events(gw, victim)]
    assert kinds.index("preempt") < kinds.index("preempt-end")
    assert "preempt-signal" not in kinds  # no GraceTime: ended at once
    preempt = next(d for k, _, d in _events(gw, victim) if k == "preempt")
    assert preempt["by"] == high
    assert preempt["mode"] == "REQUEUE"
    high_kinds = [k for k, _, _ in _events(gw, high)]
    assert high_kinds.index("preempting") < high_kinds.index("preempt-start")
    page = gw.ok(["curl", "-s", "--unix-socket", str(gw.socket), "http://caldera/metrics"])
    assert 'caldera_preemptions_total{cluster="caldera",mode="requeue"} 1' in page


def test_cancel_with_grace_time_signals_then_ends_the_victim_as_preempted(pgw: Gateway) -> None:
    gw = pgw
    gw.ok(["sacctmgr", "-i", "add", "qos", "low", "preemptmode=cancel", "gracetime=60"])
    gw.ok(["sacctmgr", "-i", "add", "qos", "high", "preempt=low", "priority=100"])
    got_term = gw.workdir / "victim.term"
    running = gw.workdir / "victim.running"
    victim = gw.sbatch(
        "--qos=low", "-n", "2", "-o", "/dev/null",
        "--wrap", f"trap 'date +%s.%N >> {got_term}' TERM; touch {running}; "
        "while :; do sleep 0.1; done",
        user="tester",
    )  # fmt: skip
    _started_at_file(running)
    stamp = gw.workdir / "high.started"
    high = _preemptor(gw, stamp)
    began = _started_at(stamp)
    assert gw.wait(high)["state"] == "COMPLETED"
    record = gw.wait(victim, ("PREEMPTED",))
    assert record["state"] == "PREEMPTED"

    # SIGTERM first; the run ended only once the grace was over; then the preemptor began
    termed = float(got_term.read_text().split()[0])
    events = {k: t for k, t, _ in _events(gw, victim)}
    assert events["preempt-end"] - events["preempt"] >= 60 * 0.05
    assert termed < events["preempt-end"] <= began
    acct = gw.ok(["sacct", "-n", "-P", "-o", "JobID,State,ExitCode", "-j", str(victim)])
    assert acct.split() == [f"{victim}|PREEMPTED|0:0", f"{victim}.batch|CANCELLED|0:9"]
    show = gw.ok(["scontrol", "show", "job", str(victim)])
    assert "JobState=PREEMPTED " in show
    assert " ExitCode=0:9" in show  # its TERM trap kept it running: killed after KillWait


def _started_at_file(path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never created"
        time.sleep(0.05)
