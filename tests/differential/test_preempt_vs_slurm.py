"""Preemption at run time against real Slurm 22.05 (the burst test cluster).

PreemptType=preempt/partition_prio cannot be observed on the caldera cluster (it keeps
preempt/none), so the burst cluster gets a temporary slurm.conf for this module (three
partitions on bnode01, restored with its slurmctld in a `finally`:
tests/support/slurm_burst_conf.py) and a Caldera gateway the same partitions. The same
steps run on both and are reduced to what must agree whatever the timing: the states a
victim goes through (RUNNING through its GraceTime, COMPLETING while KillWait runs,
PREEMPTED or PENDING BeginTime), when its batch shell is signalled, PreemptTime and
EndTime, ExitCode in scontrol and sacct, the rows sacct -D keeps, slurmstepd's line in the
job's output, and the preemptor starting only once the victim's processes are gone; and a
victim whose script ends by itself inside its grace (its srun step died of the grace's
SIGTERM), which Slurm records COMPLETED, not PREEMPTED. What
was first observed, with more cases (SUSPEND with GraceTime, PreemptExemptTime), is in
tests/data/slurm_preempt_22.05.json.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest

from tests.support.gateway_env import Gateway, start_gateway, stop_gateway
from tests.support.slurm_burst import SlurmClusters, run_on
from tests.support.slurm_burst_conf import burst_site

pytestmark = [pytest.mark.slurm]

GRACE_S = 3
KILL_WAIT_S = 5  # the burst cluster's KillWait; the gateway is given the same
SLURM_LINES = (
    "PreemptType=preempt/partition_prio",
    "PreemptMode=CANCEL",
    "SchedulerParameters=bf_interval=1",  # a victim whose grace is over ends at a pass
    f"PartitionName=pc Nodes=bnode01 PriorityTier=1 PreemptMode=CANCEL GraceTime={GRACE_S}",
    "PartitionName=pr Nodes=bnode01 PriorityTier=1 PreemptMode=REQUEUE",
    "PartitionName=ph Nodes=bnode01 PriorityTier=5",
)
CONFIG = f"""kill_wait_s = {KILL_WAIT_S}
preempt_type = "preempt/partition_prio"
preempt_mode = "CANCEL"
[[nodes]]
name = "pnode"
cpus = 2
memory_mb = 2000
[[partitions]]
name = "pc"
default = true
preempt_mode = "CANCEL"
grace_time = {GRACE_S}
[[partitions]]
name = "pr"
preempt_mode = "REQUEUE"
[[partitions]]
name = "ph"
priority_tier = 5
"""
# ticks every 0.25 s; a TERM trap that keeps it running (trap) or none (plain)
TRAP = "trap 'echo TERM $(date +%s.%N) >> {ts}' TERM; "
LOOP = "while :; do echo tick $(date +%s.%N) >> {ts}; sleep 0.25; done"


@dataclass(frozen=True)
class Side:
    """How to run a command on one system, and a directory both it and its jobs see."""

    run: Callable[[list[str], str | None], str]  # argv, as whom (None: root) -> stdout
    workdir: Path


@pytest.fixture(scope="module")
def real(slurm_burst_cluster: SlurmClusters) -> Iterator[Side]:
    stack = slurm_burst_cluster.burst
    with burst_site(stack, SLURM_LINES, ("pc", "pr", "ph")):
        yield Side(lambda argv, user: run_on(stack, argv, user=user).stdout, stack.jobs_dir)


@pytest.fixture(scope="module")
def ours() -> Iterator[Side]:
    base = Path(tempfile.mkdtemp(prefix="caldera-preempt-diff-", dir="/tmp"))
    gw = start_gateway(base, CONFIG)
    try:
        yield _gateway_side(gw)
    finally:
        stop_gateway(gw)
        shutil.rmtree(base, ignore_errors=True)


def _gateway_side(gw: Gateway) -> Side:
    return Side(lambda argv, user: gw.run(argv, user=user).stdout, gw.workdir)


def _sbatch(side: Side, *args: str) -> str:
    out = side.run(["sbatch", "--parsable", *args], "tester")
    assert out.strip(), f"sbatch {args} printed nothing"
    return out.strip().split(";")[0]


def _show(side: Side, job: str) -> dict[str, str]:
    text = side.run(["scontrol", "-o", "show", "job", job], None)
    return dict(re.findall(r"(\w+)=(\S*)", text))


def _epoch(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S").timestamp()


def _ticks(path: Path, word: str) -> list[float]:
    text = path.read_text() if path.exists() else ""
    return [float(w[1]) for w in (line.split() for line in text.splitlines()) if w[0] == word]


def _victim(side: Side, where: Sequence[str], trap: bool, tag: str) -> tuple[str, Path, Path]:
    """A job ticking in its file (`where`: its partition or QOS options), once it ticks."""
    ts = side.workdir / f"pre-{tag}-{time.time_ns()}.ticks"
    out = ts.with_suffix(".out")
    body = (TRAP if trap else "") + LOOP
    job = _sbatch(side, *where, "-c", "2", "-t", "5", "-o", str(out),
                  "--wrap", body.format(ts=ts))  # fmt: skip
    deadline = time.monotonic() + 60
    while len(_ticks(ts, "tick")) < 4:
        assert time.monotonic() < deadline, f"victim {job} never ran"
        time.sleep(0.1)
    return job, ts, out


def _preemptor(side: Side, tag: str, where: Sequence[str] = ("-p", "ph")) -> tuple[str, Path]:
    stamp = side.workdir / f"pre-{tag}-{time.time_ns()}.high"
    job = _sbatch(side, *where, "-c", "2", "-t", "5", "-o", "/dev/null",
                  "--wrap", f"date +%s.%N > {stamp}; sleep 1")  # fmt: skip
    return job, stamp


def _follow(
    side: Side, victim: str, until: Callable[[dict[str, str]], bool]
) -> list[dict[str, str]]:
    """The victim's `scontrol show job` every 0.2 s until `until` holds: each change of
    JobState or PreemptTime kept."""
    seen: list[dict[str, str]] = []
    deadline = time.monotonic() + 90
    while True:
        now = _show(side, victim)
        key = ("JobState", "PreemptTime")
        if not seen or any(now.get(k) != seen[-1].get(k) for k in key):
            seen.append(now)
        if until(now):
            return seen
        assert time.monotonic() < deadline, f"job {victim}: {[s.get('JobState') for s in seen]}"
        time.sleep(0.2)


def _sacct(side: Side, job: str) -> list[str]:
    rows = side.run(["sacct", "-D", "-n", "-P", "-o", "JobID,State,ExitCode", "-j", job], None)
    return [re.sub(r"^\d+", "<id>", r) for r in rows.split()]


def cancel_with_grace(
    side: Side, low: Sequence[str] = ("-p", "pc"), high: Sequence[str] = ("-p", "ph")
) -> dict[str, object]:
    """A CANCEL victim with GraceTime whose TERM trap outlives KillWait (`low`: its
    partition or QOS; `high`: the preemptor's)."""
    victim, ts, out = _victim(side, low, trap=True, tag="c")
    high_job, stamp = _preemptor(side, "c", high)
    seen = _follow(side, victim, lambda s: s.get("JobState") == "PREEMPTED")
    states = [s["JobState"] for s in seen]
    graced = next(s for s in seen if s.get("PreemptTime", "None") != "None")
    facts: dict[str, object] = {
        "states": [s for i, s in enumerate(states) if i == 0 or states[i - 1] != s],
        "graced state": (graced["JobState"], graced["Reason"]),
        "end = preempt + grace": _epoch(graced["EndTime"]) - _epoch(graced["PreemptTime"]),
    }
    final = seen[-1]
    while not stamp.exists() or not stamp.read_text().strip():
        time.sleep(0.1)
    began = float(stamp.read_text().split()[0])
    term = _ticks(ts, "TERM")
    facts["batch shell's TERM after the grace"] = (
        bool(term) and term[0] >= _epoch(graced["PreemptTime"]) + GRACE_S - 1
    )
    facts["killed after KillWait"] = (
        KILL_WAIT_S - 1.5 <= max(_ticks(ts, "tick")) - term[0] <= KILL_WAIT_S + 1.5
    )
    facts["preemptor after the victim"] = began > max(_ticks(ts, "tick"))
    facts["final"] = (final["JobState"], final["Reason"], final["ExitCode"])
    facts["end = preempt time"] = final["EndTime"] == final["PreemptTime"]
    facts["eligible = start"] = final["PreemptEligibleTime"] == final["StartTime"]
    line = f"CANCELLED AT {final['PreemptTime']} DUE TO PREEMPTION ***"
    facts["stepd line"] = any(line in row for row in out.read_text().splitlines())
    time.sleep(1)
    facts["sacct"] = _sacct(side, victim)
    side.run(["scancel", high_job], None)
    for path in (ts, out, stamp):
        path.unlink(missing_ok=True)
    return facts


def requeue_victim(
    side: Side, low: Sequence[str] = ("-p", "pr"), high: Sequence[str] = ("-p", "ph")
) -> dict[str, object]:
    """A REQUEUE victim without GraceTime that dies on SIGTERM (`low`: its partition or
    QOS; `high`: the preemptor's)."""
    victim, ts, out = _victim(side, low, trap=False, tag="r")
    high_job, stamp = _preemptor(side, "r", high)
    # pending again: slurmctld gives the requeued job its Reason at its next pass
    final = _follow(side, victim, lambda s: s.get("JobState") == "PENDING")[-1]
    deadline = time.monotonic() + 10
    while final.get("Reason") == "None" and time.monotonic() < deadline:
        time.sleep(0.2)
        final = _show(side, victim)
    facts: dict[str, object] = {
        "final": (final["JobState"], final["Reason"], final["Restarts"], final["ExitCode"]),
        "eligible - submit": _epoch(final["EligibleTime"]) - _epoch(final["SubmitTime"]),
        "preempt line while pending": "PreemptTime" in final,
        "stepd line": "DUE TO PREEMPTION ***" in out.read_text(),
    }
    deadline = time.monotonic() + 30
    while _show(side, high_job).get("JobState") != "COMPLETED":
        assert time.monotonic() < deadline, f"preemptor {high_job} never completed"
        time.sleep(0.2)
    deadline = time.monotonic() + 15  # slurmdbd records the new pending run a little later
    while len(rows := _sacct(side, victim)) < 3 and time.monotonic() < deadline:
        time.sleep(0.5)
    facts["sacct -D"] = rows
    side.run(["scancel", victim], None)
    for path in (ts, out, stamp):
        path.unlink(missing_ok=True)
    return facts


def requeue_in_kill_wait(
    side: Side, low: Sequence[str] = ("-p", "pr"), high: Sequence[str] = ("-p", "ph")
) -> dict[str, object]:
    """A REQUEUE victim whose TERM trap keeps it through KillWait, as it is shown then:
    slurmctld has already requeued the record (pending and completing)."""
    victim, ts, out = _victim(side, low, trap=True, tag="k")
    high_job, stamp = _preemptor(side, "k", high)
    _follow(side, victim, lambda s: s.get("JobState") == "COMPLETING")
    time.sleep(1.5)  # inside KillWait (5 s): the view is settled
    view = _show(side, victim)
    # (StartTime: Unknown here, `now` when recorded without bf_interval=1: timing)
    facts: dict[str, object] = {
        "in KillWait": (view["JobState"], view["Reason"], view["Restarts"], view["RunTime"]),
        "preempt line": "PreemptTime" in view,
        "nodes": (view["NodeList"] != "(null)", view["NumNodes"]),
        "squeue": side.run(["squeue", "-h", "-j", victim, "-o", "%t %M %r"], None).strip(),
    }
    final = _follow(side, victim, lambda s: s.get("JobState") == "PENDING")[-1]
    facts["then"] = (final["JobState"], final["Restarts"])
    side.run(["scancel", victim, high_job], None)
    for path in (ts, out, stamp):
        path.unlink(missing_ok=True)
    return facts


def _ends_in_grace(side: Side) -> dict[str, object]:
    """A CANCEL victim with GraceTime whose srun step dies of the grace's SIGTERM and whose
    script then ends by itself, inside the grace (the common shape: `srun prog; ...`)."""
    out = side.workdir / f"pre-g-{time.time_ns()}.out"
    victim = _sbatch(side, "-p", "pc", "-c", "2", "-t", "5", "-o", str(out),
                     "--wrap", "srun sleep 100; echo after-srun $?")  # fmt: skip
    deadline = time.monotonic() + 60
    while "R" not in side.run(["squeue", "-h", "-j", victim, "-o", "%t"], None):
        assert time.monotonic() < deadline, f"victim {victim} never ran"
        time.sleep(0.2)
    time.sleep(1)  # the step started
    high, stamp = _preemptor(side, "g")
    done = ("COMPLETED", "FAILED", "PREEMPTED")
    seen = _follow(side, victim, lambda s: s.get("JobState") in done)
    final = seen[-1]
    ended = _epoch(final["EndTime"]) - _epoch(final["PreemptTime"])
    time.sleep(1)
    facts: dict[str, object] = {  # (how many RUNNING views precede the end is timing)
        "final": (final["JobState"], final["ExitCode"]),
        "ended inside the grace": ended < GRACE_S,
        "script went on": "after-srun 143" in out.read_text(),
        "sacct": sorted(_sacct(side, victim)),
    }
    side.run(["scancel", high], None)
    for path in (out, stamp):
        path.unlink(missing_ok=True)
    return facts


def test_cancel_with_grace_time_agrees_with_slurm(real: Side, ours: Side) -> None:
    slurm = cancel_with_grace(real)
    # what the recording showed, so that agreeing means something
    assert slurm["final"] == ("PREEMPTED", "None", "0:9")
    assert slurm["states"] == ["RUNNING", "COMPLETING", "PREEMPTED"]
    assert slurm["end = preempt + grace"] == GRACE_S
    assert slurm["sacct"] == ["<id>|PREEMPTED|0:0", "<id>.batch|CANCELLED|0:9"]
    for fact in ("batch shell's TERM after the grace", "killed after KillWait", "stepd line"):
        assert slurm[fact] is True, fact
    assert cancel_with_grace(ours) == slurm


def test_requeue_agrees_with_slurm(real: Side, ours: Side) -> None:
    slurm = requeue_victim(real)
    assert slurm["final"] == ("PENDING", "BeginTime", "1", "0:0")
    assert slurm["eligible - submit"] == 121
    assert slurm["sacct -D"] == [
        "<id>|PREEMPTED|0:0",
        "<id>.batch|CANCELLED|0:15",
        "<id>|PENDING|0:0",
    ]
    assert requeue_victim(ours) == slurm


def test_a_requeue_victim_in_kill_wait_is_shown_as_slurm_shows_it(real: Side, ours: Side) -> None:
    slurm = requeue_in_kill_wait(real)
    assert slurm["in KillWait"] == ("COMPLETING", "None", "1", "00:00:00")
    assert slurm["preempt line"] is False
    assert requeue_in_kill_wait(ours) == slurm


def test_a_victim_ending_by_itself_in_its_grace_agrees_with_slurm(real: Side, ours: Side) -> None:
    slurm = _ends_in_grace(real)
    assert slurm["final"] == ("COMPLETED", "0:0")
    assert slurm["ended inside the grace"] is True
    assert slurm["sacct"] == [
        "<id>.0|CANCELLED|0:15",
        "<id>.batch|COMPLETED|0:0",
        "<id>|COMPLETED|0:0",
    ]
    assert _ends_in_grace(ours) == slurm
