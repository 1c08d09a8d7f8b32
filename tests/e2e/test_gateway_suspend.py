"""`scontrol suspend` / `scontrol resume` on the local runner through the real gateway: the
job's processes really stop (a script stamping the time every 0.2 s writes nothing while
suspended) and continue, squeue/scontrol/sacct show what slurmctld shows (state S, RunTime
and Elapsed without the pause, SuspendTime, SecsPreSuspend, sacct Suspended, EndTime moved
by the pause), the refusals print Slurm's messages, a suspended job stays suspended
across a gateway restart, its time limit clock stands still, a requeue holds it for the
operator; and PreemptMode=SUSPEND (a higher-tier job stops a lower one, which continues
after it, also across a restart). The reference outputs are
tests/data/slurm_suspend_22.05.json.
"""

from __future__ import annotations

import itertools
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.gateway_env import Gateway, restart, running_gateway

DATA = Path(__file__).parents[1] / "data" / "slurm_suspend_22.05.json"
CONFIG = """[[nodes]]
name = "snode"
cpus = 2
memory_mb = 2000
"""


@pytest.fixture
def sgw() -> Iterator[Gateway]:
    """A gateway with one 2-CPU node; time limits in real seconds."""
    with running_gateway(CONFIG, "caldera-e2e-susp-") as gw:
        yield gw


def _stamper(gw: Gateway, name: str, *args: str) -> tuple[int, Path]:
    out = gw.workdir / f"{name}.ts"
    job = gw.sbatch(
        "-o", "/dev/null", *args,
        "--wrap", f"while :; do date +%s.%N >> {out}; sleep 0.2; done",
        user="tester",
    )  # fmt: skip
    return job, out


def _stamps(path: Path) -> list[float]:
    return [float(x) for x in path.read_text().split()] if path.exists() else []


def _wait_stamps(path: Path, count: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while len(_stamps(path)) < count:
        assert time.monotonic() < deadline, f"{path}: fewer than {count} stamps"
        time.sleep(0.05)


def _field(text: str, key: str) -> str:
    m = re.search(rf"\b{key}=(\S+)", text)
    assert m, f"{key} not in {text}"
    return m.group(1)


def _secs(hms: str) -> int:
    parts = [int(p) for p in hms.replace("-", ":").split(":")]
    total = 0
    for p in parts:
        total = total * 60 + p
    return total


def test_suspend_stops_the_processes_and_resume_continues_them(sgw: Gateway) -> None:
    gw = sgw
    job, ts = _stamper(gw, "a", "-t", "10")
    _wait_stamps(ts, 5)
    denied = gw.run(["scontrol", "suspend", str(job)], user="tester")
    assert (denied.returncode, denied.stderr) == (1, f"Access/permission denied for job {job}\n")

    gw.ok(["scontrol", "suspend", str(job)])
    stopped_at = time.time()
    before = len(_stamps(ts))
    time.sleep(2.0)
    assert len(_stamps(ts)) == before  # not a single stamp while suspended
    squeue = gw.ok(["squeue", "-h", "-j", str(job), "-o", "%t %T %r"]).split()
    assert squeue == ["S", "SUSPENDED", "None"]
    show = gw.ok(["scontrol", "show", "job", str(job)])
    assert _field(show, "JobState") == "SUSPENDED"
    assert _field(show, "Priority") == "0"  # held for the operator, as slurmctld does
    pre = int(_field(show, "SecsPreSuspend"))
    assert _secs(_field(show, "RunTime")) == pre
    assert 1 <= pre <= stopped_at - _stamps(ts)[0] + 2
    end_before = _field(show, "EndTime")
    again = gw.run(["scontrol", "suspend", str(job)])
    assert (again.returncode, again.stderr) == (0, "")  # re-suspend: success, as slurmctld

    gw.ok(["scontrol", "resume", str(job)])
    resumed_at = time.time()
    _wait_stamps(ts, before + 3)
    stamps = _stamps(ts)
    gap = max(b - a for a, b in itertools.pairwise(stamps))
    assert gap >= 2.0  # the pause shows in the script's own clock
    show = gw.ok(["scontrol", "show", "job", str(job)])
    assert _field(show, "JobState") == "RUNNING"
    assert _field(show, "Priority") != "0"
    assert _field(show, "SecsPreSuspend") == str(pre)
    assert _field(show, "EndTime") > end_before  # the time limit clock stood still
    not_susp = gw.run(["scontrol", "resume", str(job)])
    assert (not_susp.returncode, not_susp.stderr) == (1, f"Job is not suspended for job {job}\n")

    gw.ok(["scancel", str(job)])
    done = gw.wait(job)
    assert done["state"] == "CANCELLED"
    row = gw.ok(["sacct", "-X", "-n", "-P", "-o", "JobID,State,Elapsed,Suspended", "-j", str(job)])
    jid, state, elapsed, suspended = row.strip().split("|")
    assert (jid, state) == (str(job), "CANCELLED by 0")
    paused = _secs(suspended)
    assert resumed_at - stopped_at - 1 <= paused <= resumed_at - stopped_at + 1
    start, end = float(str(done["start_time"])), float(str(done["end_time"]))
    assert abs(_secs(elapsed) - (int(end) - int(start) - paused)) <= 1


def test_refusals_print_slurms_messages(sgw: Gateway) -> None:
    gw = sgw
    held = gw.sbatch("--hold", "-o", "/dev/null", "--wrap", "true", user="tester")
    for verb in ("suspend", "resume"):
        r = gw.run(["scontrol", verb, str(held)])
        assert (r.returncode, r.stderr) == (1, f"Job is pending execution for job {held}\n")
    done = gw.sbatch("-o", "/dev/null", "--wrap", "true", user="tester")
    gw.wait(done)
    r = gw.run(["scontrol", "suspend", str(done)])
    assert r.stderr == f"Job/step already completing or completed for job {done}\n"
    assert r.returncode == 1
    r = gw.run(["scontrol", "suspend", "999999"])
    assert (r.returncode, r.stderr) == (1, "Unexpected message received for job 999999\n")
    r = gw.run(["scontrol", "suspend", "abc"])
    assert (r.returncode, r.stderr) == (1, "Invalid job id specified for job abc\n")
    r = gw.run(["scontrol", "suspend"])
    assert (r.returncode, r.stderr) == (1, "too few arguments for keyword:suspend\n")
    gw.ok(["scancel", str(held)])


def test_a_suspended_job_stays_suspended_across_a_gateway_restart(sgw: Gateway) -> None:
    gw = sgw
    job, ts = _stamper(gw, "r", "-t", "10")
    _wait_stamps(ts, 3)
    gw.ok(["scontrol", "suspend", str(job)])
    count = len(_stamps(ts))
    gw.ok(["caldera", "down"])
    restart(gw)
    time.sleep(1.5)
    assert len(_stamps(ts)) == count
    assert gw.ok(["squeue", "-h", "-j", str(job), "-o", "%t"]).split() == ["S"]
    # nothing else was started in its place: the job has one run, still the same
    assert gw.job(job)["restart_count"] == 0
    gw.ok(["scontrol", "resume", str(job)])
    _wait_stamps(ts, count + 3)
    # cancelled while suspended: its processes end (SIGCONT, SIGTERM); for the record it
    # ended when it was suspended (slurmctld: EndTime = SuspendTime, Elapsed = RunTime)
    gw.ok(["scontrol", "suspend", str(job)])
    show = gw.ok(["scontrol", "show", "job", str(job)])
    gw.ok(["scancel", str(job)])
    done = gw.wait(job)
    assert done["state"] == "CANCELLED"
    count = len(_stamps(ts))
    time.sleep(1)
    assert len(_stamps(ts)) == count
    after = gw.ok(["scontrol", "show", "job", str(job)])
    assert _field(after, "EndTime") == _field(show, "SuspendTime")
    assert _field(after, "RunTime") == _field(show, "RunTime")
    row = gw.ok(["sacct", "-X", "-n", "-P", "-o", "Elapsed", "-j", str(job)]).strip()
    assert _secs(row) == _secs(_field(show, "RunTime"))


# PreemptMode=SUSPEND (preempt/partition_prio, GANG required as slurmctld requires it)
PREEMPT_CONFIG = """preempt_type = "preempt/partition_prio"
preempt_mode = "SUSPEND,GANG"
[[nodes]]
name = "pnode"
cpus = 2
memory_mb = 2000
[[partitions]]
name = "lo"
default = true
[[partitions]]
name = "hi"
priority_tier = 5
"""


@pytest.fixture
def pgw() -> Iterator[Gateway]:
    """One 2-CPU node in two partitions: `lo` (tier 1) and `hi` (tier 5), SUSPEND,GANG."""
    with running_gateway(PREEMPT_CONFIG, "caldera-e2e-psusp-") as gw:
        yield gw


def _events(gw: Gateway, job: int) -> list[tuple[str, float, dict[str, object]]]:
    from gateway.store.sqlite import SqliteStore

    store = SqliteStore(gw.home / "caldera.db")
    return [(e.kind, e.time, dict(e.detail)) for e in store.events(job)]


def test_a_higher_tier_job_suspends_the_lower_one_which_resumes_after_it(pgw: Gateway) -> None:
    gw = pgw
    part = gw.ok(["scontrol", "show", "partition", "lo"])
    assert "PreemptMode=GANG,SUSPEND" in part  # the site's mode, as slurmctld prints it
    victim, ts = _stamper(gw, "victim", "-p", "lo", "-n", "2", "-t", "10")
    _wait_stamps(ts, 5)
    began, ended = gw.workdir / "hi.began", gw.workdir / "hi.ended"
    high = gw.sbatch(
        "-p", "hi", "-n", "2", "-o", "/dev/null",
        "--wrap", f"date +%s.%N > {began}; sleep 2; date +%s.%N > {ended}",
        user="tester",
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not began.exists():
        assert time.monotonic() < deadline, "the preemptor never started"
        time.sleep(0.05)
    assert gw.ok(["squeue", "-h", "-j", str(victim), "-o", "%t %r"]).split() == ["S", "None"]
    show = gw.ok(["scontrol", "show", "job", str(victim)])
    assert _field(show, "Priority") != "0"  # a preemption's suspend is no operator hold
    assert gw.wait(high)["state"] == "COMPLETED"
    t0, t1 = float(began.read_text()), float(ended.read_text())
    _wait_stamps(ts, len(_stamps(ts)) + 3)
    stamps = _stamps(ts)
    # the victim wrote nothing while its preemptor ran, and runs again after it
    assert not [t for t in stamps if t0 <= t <= t1]
    assert stamps[-1] > t1
    assert gw.ok(["squeue", "-h", "-j", str(victim), "-o", "%t"]).split() == ["R"]
    kinds = [k for k, _, _ in _events(gw, victim)]
    for kind in ("preempt", "preempt-suspend", "preempt-resume"):
        assert kind in kinds
    assert kinds.index("preempt-suspend") < kinds.index("preempt-resume")
    detail = next(d for k, _, d in _events(gw, victim) if k == "preempt")
    assert detail["mode"] == "SUSPEND"
    assert detail["by"] == high
    assert "preempt-start" in [k for k, _, _ in _events(gw, high)]
    gw.ok(["scancel", str(victim)])
    gw.wait(victim)
    row = gw.ok(["sacct", "-X", "-n", "-P", "-o", "Suspended", "-j", str(victim)])
    assert t1 - t0 - 1 <= _secs(row.strip()) <= t1 - t0 + 3
    assert gw.job(victim)["restart_count"] == 0  # the same run, never started again


def test_a_preempted_suspended_job_is_resumed_after_a_gateway_restart(pgw: Gateway) -> None:
    gw = pgw
    victim, ts = _stamper(gw, "victim", "-p", "lo", "-n", "2", "-t", "10")
    _wait_stamps(ts, 3)
    ended = gw.workdir / "hi.ended"
    high = gw.sbatch(
        "-p", "hi", "-n", "2", "-o", "/dev/null",
        "--wrap", f"sleep 5; date +%s.%N > {ended}",
        user="tester",
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while gw.ok(["squeue", "-h", "-j", str(high), "-o", "%t"]).strip() != "R":
        assert time.monotonic() < deadline, "the preemptor never started"
        time.sleep(0.1)
    gw.ok(["caldera", "down"])
    restart(gw)  # while the preemptor runs on the stopped victim's room
    assert gw.ok(["squeue", "-h", "-j", str(victim), "-o", "%t"]).split() == ["S"]
    count = len(_stamps(ts))
    assert gw.wait(high)["state"] == "COMPLETED"
    _wait_stamps(ts, count + 3)  # resumed by the restarted gateway once the preemptor ended
    assert min(_stamps(ts)[count:]) > float(ended.read_text())
    assert "preempt-resume" in [k for k, _, _ in _events(gw, victim)]
    assert gw.job(victim)["restart_count"] == 0
    gw.ok(["scancel", str(victim)])
    gw.wait(victim)


def test_the_time_limit_clock_stands_still_while_suspended() -> None:
    # job minutes run 20x faster: -t 1 is 3 s of run time
    with running_gateway(
        "time_scale = 0.05\nkill_wait_s = 1\n" + CONFIG, "caldera-e2e-sustl-"
    ) as gw:
        job, ts = _stamper(gw, "tl", "-t", "1")
        _wait_stamps(ts, 4)
        gw.ok(["scontrol", "suspend", str(job)])
        time.sleep(4.0)  # longer than the whole limit
        assert gw.ok(["squeue", "-h", "-j", str(job), "-o", "%T"]).split() == ["SUSPENDED"]
        gw.ok(["scontrol", "resume", str(job)])
        done = gw.wait(job, timeout=30)
        assert done["state"] == "TIMEOUT"
        stamps = _stamps(ts)
        ran = sum(b - a for a, b in itertools.pairwise(stamps) if b - a < 1.0)
        assert 2.0 <= ran <= 4.5  # about the 3 s limit of run time, the pause left out
        assert stamps[-1] - stamps[0] >= 3.0 + 4.0 - 1.0


def test_a_suspended_job_requeued_waits_held_for_the_operator(sgw: Gateway) -> None:
    gw = sgw
    job, ts = _stamper(gw, "rq", "-t", "10")
    _wait_stamps(ts, 3)
    gw.ok(["scontrol", "suspend", str(job)])
    gw.ok(["scontrol", "requeue", str(job)])
    show = gw.ok(["scontrol", "show", "job", str(job)])
    # as recorded on the burst cluster (tests/data/slurm_suspend_22.05.json)
    want = json.loads(DATA.read_text())["requeue_while_suspended"]["show"]
    for key in ("Priority", "JobState", "Reason", "Restarts", "SuspendTime", "SecsPreSuspend"):
        assert _field(show, key) == _field(want, key)
    count = len(_stamps(ts))
    time.sleep(1.0)
    assert len(_stamps(ts)) == count  # its stopped run was ended, not continued
    gw.ok(["scancel", str(job)])
