"""Delayed job-level preemption (WillEvict) on the local runner through the real gateway.

A job of QOS `vip` (Flags=Privileged, Preempt=low, GraceTime 100 job s = a 5 s notice)
that cannot start marks the fewest running `low` jobs WillEvict: they keep running with
Reason=WillEvict, receive no signal during the notice, and are preempted as Slurm does
afterwards (SIGTERM, their own GraceTime, PREEMPTED). The marks are withdrawn, and the
victims never signalled, when the preemptor is cancelled or starts because room freed up,
and a crashed gateway's marks are read back by the next one, notices unchanged.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_gateway_preempt import _events, _started_at, _started_at_file
from tests.e2e.test_gateway_restart import _gateway_pid
from tests.support.gateway_env import Gateway, restart, running_gateway

SCALE = 0.05
NOTICE_JOB_S = 100  # the vip QOS's GraceTime: 5 s of wall time
CONFIG = f"""time_scale = {SCALE}
kill_wait_s = 2
preempt_type = "preempt/qos"
preempt_mode = "REQUEUE"
[[nodes]]
name = "wnode"
cpus = 2
memory_mb = 2000
"""


@pytest.fixture
def wgw() -> Iterator[Gateway]:
    """One 2-CPU node, preempt/qos; QOS low (CANCEL, GraceTime 20) and vip (Privileged)."""
    with running_gateway(CONFIG, "caldera-e2e-willevict-") as gw:
        gw.ok(["sacctmgr", "-i", "add", "qos", "low", "preemptmode=cancel", "gracetime=20"])
        gw.ok(
            [
                "sacctmgr", "-i", "add", "qos", "vip", "flags=Privileged", "preempt=low",
                f"gracetime={NOTICE_JOB_S}",
            ]
        )  # fmt: skip
        yield gw


def _low(gw: Gateway, name: str, until: Path | None = None) -> tuple[int, Path]:
    """A 1-CPU job of QOS low that records SIGTERM (runs until `until` exists, or forever)."""
    term = gw.workdir / f"{name}.term"
    running = gw.workdir / f"{name}.running"
    loop = f"until [ -e {until} ]; do sleep 0.1; done" if until else "while :; do sleep 0.1; done"
    job = gw.sbatch(
        "--qos=low", "-n", "1", "-o", "/dev/null", "-J", name,
        "--wrap", f"trap 'date +%s.%N >> {term}' TERM; touch {running}; {loop}",
        user="tester",
    )  # fmt: skip
    _started_at_file(running)
    return job, term


def _vip(gw: Gateway) -> tuple[int, Path]:
    stamp = gw.workdir / "vip.started"
    job = gw.sbatch(
        "--qos=vip", "-n", "1", "-o", "/dev/null",
        "--wrap", f"date +%s.%N > {stamp}; sleep 1",
        user="tester",
    )  # fmt: skip
    return job, stamp


def _reason(gw: Gateway, job: int) -> list[str]:
    return gw.ok(["squeue", "-h", "-j", str(job), "-o", "%T %r"]).split()


def _wait_reason(gw: Gateway, job: int, want: list[str], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while _reason(gw, job) != want:
        assert time.monotonic() < deadline, f"job {job}: {_reason(gw, job)}, not {want}"
        time.sleep(0.1)


def _kinds(gw: Gateway, job: int) -> list[str]:
    return [k for k, _, _ in _events(gw, job)]


def test_marked_jobs_run_out_their_notice_then_are_preempted(wgw: Gateway) -> None:
    gw = wgw
    first, first_term = _low(gw, "first")
    second, second_term = _low(gw, "second")  # submitted later: the lower priority
    vip, stamp = _vip(gw)
    _wait_reason(gw, second, ["RUNNING", "WillEvict"])
    marked_at = time.time()
    assert _reason(gw, first) == ["RUNNING", "None"]  # the fewest: one job is enough
    assert "Reason=WillEvict" in gw.ok(["scontrol", "show", "job", str(second)])
    assert _reason(gw, vip) == ["PENDING", "Resources"]

    began = _started_at(stamp)
    assert gw.wait(vip)["state"] == "COMPLETED"
    assert gw.wait(second, ("PREEMPTED",))["state"] == "PREEMPTED"
    # no signal during the notice; SIGTERM after it, then the victim's own grace (1 s)
    termed = float(second_term.read_text().split()[0])
    assert termed - marked_at >= NOTICE_JOB_S * SCALE - 0.5
    events = dict((k, t) for k, t, _ in _events(gw, second))
    assert events["will-evict"] <= events["preempt"] - NOTICE_JOB_S * SCALE
    assert events["preempt-end"] - events["preempt"] >= 20 * SCALE
    assert termed < events["preempt-end"] <= began
    kinds = _kinds(gw, second)
    assert kinds.index("will-evict") < kinds.index("preempt") < kinds.index("preempt-end")
    assert "will-evict-withdrawn" not in kinds
    mark = next(d for k, _, d in _events(gw, second) if k == "will-evict")
    assert (mark["by"], mark["notice_s"]) == (vip, NOTICE_JOB_S)
    vip_kinds = _kinds(gw, vip)
    assert vip_kinds.index("will-evict-marked") < vip_kinds.index("preempting")
    assert vip_kinds.index("preempting") < vip_kinds.index("preempt-start")
    # the other job was never touched, and the finished victim no longer shows WillEvict
    assert not first_term.exists()
    assert _reason(gw, first) == ["RUNNING", "None"]
    assert "Reason=WillEvict" not in gw.ok(["scontrol", "show", "job", str(second)])
    gw.ok(["scancel", str(first)])


def test_cancelling_the_preemptor_withdraws_the_marks(wgw: Gateway) -> None:
    gw = wgw
    first, first_term = _low(gw, "first")
    second, second_term = _low(gw, "second")
    vip, _ = _vip(gw)
    _wait_reason(gw, second, ["RUNNING", "WillEvict"])
    gw.ok(["scancel", str(vip)])
    _wait_reason(gw, second, ["RUNNING", "None"])
    time.sleep(NOTICE_JOB_S * SCALE + 1)  # past the notice: still no signal
    assert not second_term.exists()
    assert not first_term.exists()
    assert _reason(gw, second) == ["RUNNING", "None"]
    withdrawn = [d for k, _, d in _events(gw, second) if k == "will-evict-withdrawn"]
    assert [(d["by"], d["why"]) for d in withdrawn] == [(vip, "ended")]
    assert "preempt" not in _kinds(gw, second)
    vip_withdrawn = [d for k, _, d in _events(gw, vip) if k == "will-evict-withdrawn"]
    assert [(d["victims"], d["why"]) for d in vip_withdrawn] == [([second], "ended")]
    gw.ok(["scancel", str(first), str(second)])


def test_room_freeing_up_starts_the_preemptor_and_withdraws_the_marks(wgw: Gateway) -> None:
    gw = wgw
    release = gw.workdir / "release"
    first, first_term = _low(gw, "first", until=release)
    second, second_term = _low(gw, "second")
    vip, stamp = _vip(gw)
    _wait_reason(gw, second, ["RUNNING", "WillEvict"])
    release.touch()  # the first job ends by itself: its CPU is the vip's
    _started_at(stamp)
    assert gw.wait(vip)["state"] == "COMPLETED"
    assert gw.wait(first)["state"] == "COMPLETED"
    time.sleep(NOTICE_JOB_S * SCALE)
    assert _reason(gw, second) == ["RUNNING", "None"]
    assert not second_term.exists()
    assert not first_term.exists()
    withdrawn = [d for k, _, d in _events(gw, second) if k == "will-evict-withdrawn"]
    assert [(d["by"], d["why"]) for d in withdrawn] == [(vip, "started")]
    assert "preempt" not in _kinds(gw, second)
    gw.ok(["scancel", str(second)])


def _crash(gw: Gateway) -> None:
    pid = _gateway_pid(gw)
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while _alive(pid):
        assert time.monotonic() < deadline, "the gateway did not die"
        time.sleep(0.05)


def test_a_restart_keeps_the_notice_running(wgw: Gateway) -> None:
    """A crash mid-notice neither gives the victim a new notice nor forgets the mark: the
    restarted gateway reads it back from the store and preempts at the first deadline."""
    gw = wgw
    first, first_term = _low(gw, "first")
    second, second_term = _low(gw, "second")
    vip, stamp = _vip(gw)
    _wait_reason(gw, second, ["RUNNING", "WillEvict"])
    time.sleep(2.0)  # 2 s of the 5 s notice
    _crash(gw)
    restart(gw)
    restarted = time.time()
    assert gw.wait(second, ("PREEMPTED",))["state"] == "PREEMPTED"
    termed = float(second_term.read_text().split()[0])
    # a new notice would end 5 s after the restart; the first one ends within 3 s of it
    assert termed - restarted < NOTICE_JOB_S * SCALE - 1.0
    marks = [d for k, _, d in _events(gw, second) if k == "will-evict"]
    assert [(d["by"], d["notice_s"]) for d in marks] == [(vip, NOTICE_JOB_S)]  # not again
    assert "will-evict-withdrawn" not in _kinds(gw, second)
    _started_at(stamp)
    assert gw.wait(vip)["state"] == "COMPLETED"
    assert not first_term.exists()
    gw.ok(["scancel", str(first)])


def test_a_restart_reads_back_a_mark_and_withdraws_it_when_room_freed_up(wgw: Gateway) -> None:
    """After a crash the store still shows WillEvict; the restarted gateway reads the mark
    back, and withdraws it when its preemptor starts in room that freed up meanwhile."""
    gw = wgw
    release = gw.workdir / "release"
    first, _ = _low(gw, "first", until=release)
    second, second_term = _low(gw, "second")
    vip, stamp = _vip(gw)
    _wait_reason(gw, second, ["RUNNING", "WillEvict"])
    _crash(gw)
    release.touch()  # the first job ends while the gateway is down
    restart(gw)
    _started_at(stamp)
    assert gw.wait(vip)["state"] == "COMPLETED"
    _wait_reason(gw, second, ["RUNNING", "None"])
    withdrawn = [d for k, _, d in _events(gw, second) if k == "will-evict-withdrawn"]
    assert [(d["by"], d["why"]) for d in withdrawn] == [(vip, "started")]
    assert not second_term.exists()
    assert gw.wait(first)["state"] == "COMPLETED"
    gw.ok(["scancel", str(second)])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
