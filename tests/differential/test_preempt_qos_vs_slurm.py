"""preempt/qos at run time against real Slurm 22.05 (the burst test cluster).

The burst cluster gets a temporary slurm.conf (PreemptType=preempt/qos, site PreemptMode
CANCEL, a partition `pq` on bnode01, restored in a `finally`:
tests/support/slurm_burst_conf.py) and four QOS in the shared slurmdbd, deleted again
afterwards: `pqlo` (PreemptMode=CANCEL, GraceTime=3), `pqrq` (PreemptMode=REQUEUE), `pqex`
(PreemptMode=CANCEL, PreemptExemptTime=10 s) and `pqhi` (Preempt=pqlo,pqrq,pqex). A
Caldera gateway gets the same partition and QOS through its own sacctmgr. The same steps
run on both and are reduced to what must agree whatever the timing (test_preempt_vs_slurm.py's
facts: the victim's states through its QOS's GraceTime and KillWait, PreemptTime and
EndTime, its batch shell's signals, the sacct rows, slurmstepd's line, the preemptor
starting after the victim's processes are gone; a requeued victim's pending state and
records), a job of the victim's own QOS, which preempts nothing and waits, and a victim
inside its QOS's PreemptExemptTime, spared until it has run that long.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from tests.differential.test_preempt_vs_slurm import (
    GRACE_S,
    KILL_WAIT_S,
    Side,
    cancel_with_grace,
    requeue_victim,
)
from tests.support.gateway_env import start_gateway, stop_gateway
from tests.support.slurm_burst import SlurmClusters, run_on
from tests.support.slurm_burst_conf import burst_site

pytestmark = [pytest.mark.slurm]

EXEMPT_S = 10
SLURM_LINES = (
    "PreemptType=preempt/qos",
    "PreemptMode=CANCEL",
    "SchedulerParameters=bf_interval=1",  # a victim whose grace is over ends at a pass
    "PartitionName=pq Nodes=bnode01",
)
QOS = (
    ["-i", "add", "qos", "pqlo", "PreemptMode=cancel", f"GraceTime={GRACE_S}"],
    ["-i", "add", "qos", "pqrq", "PreemptMode=requeue"],
    ["-i", "add", "qos", "pqex", "PreemptMode=cancel", f"PreemptExemptTime=00:00:{EXEMPT_S}"],
    ["-i", "add", "qos", "pqhi", "Preempt=pqlo,pqrq,pqex", "Priority=100"],
)
CONFIG = f"""kill_wait_s = {KILL_WAIT_S}
preempt_type = "preempt/qos"
preempt_mode = "CANCEL"
[[nodes]]
name = "pnode"
cpus = 2
memory_mb = 2000
[[partitions]]
name = "pq"
default = true
"""
LOW, HIGH = ("-p", "pq", "--qos=pqlo"), ("-p", "pq", "--qos=pqhi")
REQUEUED = ("-p", "pq", "--qos=pqrq")


@pytest.fixture(scope="module")
def real(slurm_burst_cluster: SlurmClusters) -> Iterator[Side]:
    stack = slurm_burst_cluster.burst
    with burst_site(stack, SLURM_LINES, ("pq",), QOS):
        yield Side(lambda argv, user: run_on(stack, argv, user=user).stdout, stack.jobs_dir)


@pytest.fixture(scope="module")
def ours() -> Iterator[Side]:
    base = Path(tempfile.mkdtemp(prefix="caldera-preempt-qos-", dir="/tmp"))
    gw = start_gateway(base, CONFIG)
    try:
        for argv in QOS:
            gw.ok(["sacctmgr", *argv])
        yield Side(lambda argv, user: gw.run(argv, user=user).stdout, gw.workdir)
    finally:
        stop_gateway(gw)
        shutil.rmtree(base, ignore_errors=True)


def test_a_higher_qos_preempts_with_the_victim_qos_grace_as_slurm(real: Side, ours: Side) -> None:
    slurm = cancel_with_grace(real, LOW, HIGH)
    # what the cluster did, so that agreeing means something
    assert slurm["final"] == ("PREEMPTED", "None", "0:9")
    assert slurm["states"] == ["RUNNING", "COMPLETING", "PREEMPTED"]
    assert slurm["end = preempt + grace"] == GRACE_S
    for fact in ("batch shell's TERM after the grace", "killed after KillWait", "stepd line"):
        assert slurm[fact] is True, fact
    assert cancel_with_grace(ours, LOW, HIGH) == slurm


def test_a_requeue_qos_victim_is_requeued_as_slurm(real: Side, ours: Side) -> None:
    """The victim QOS's PreemptMode=REQUEUE (the site's is CANCEL): requeued, pending
    BeginTime, Restarts 1, and sacct -D keeps the preempted run and the new one."""
    slurm = requeue_victim(real, REQUEUED, HIGH)
    assert slurm["final"] == ("PENDING", "BeginTime", "1", "0:0")
    assert requeue_victim(ours, REQUEUED, HIGH) == slurm


def _same_qos_waits(side: Side) -> dict[str, object]:
    """A job of the running job's own QOS preempts nothing: it waits, the other runs on."""

    def job(*args: str) -> str:
        out = side.run(["sbatch", "--parsable", *LOW, "-c", "2", "-t", "5", "-o", "/dev/null",
                        *args], "tester")  # fmt: skip
        return out.strip().split(";")[0]

    first = job("--wrap", "sleep 30")
    deadline = time.monotonic() + 60
    while "RUNNING" not in side.run(["squeue", "-h", "-j", first, "-o", "%T"], None):
        assert time.monotonic() < deadline, f"{first} never ran"
        time.sleep(0.2)
    second = job("--wrap", "true")
    time.sleep(4)  # passes of the scheduler (and of the backfill, every second)
    view: dict[str, object] = {}
    for name, ident in (("running", first), ("waiting", second)):
        text = side.run(["scontrol", "-o", "show", "job", ident], None)
        fields = dict(re.findall(r"(\w+)=(\S*)", text))
        view[name] = (fields.get("JobState"), fields.get("Reason"), fields.get("PreemptTime"))
    side.run(["scancel", first, second], None)
    return view


def test_a_job_of_the_same_qos_waits_as_slurm(real: Side, ours: Side) -> None:
    slurm = _same_qos_waits(real)
    assert slurm["running"] == ("RUNNING", "None", "None")
    assert _same_qos_waits(ours) == slurm


def _exempt_victim(side: Side) -> dict[str, object]:
    """A victim whose QOS's PreemptExemptTime has not passed: the preemptor waits for it,
    then the victim is preempted (CANCEL, no grace) and the preemptor runs."""
    out = side.run(["sbatch", "--parsable", "-p", "pq", "--qos=pqex", "-c", "2", "-t", "5",
                    "-o", "/dev/null", "--wrap", "sleep 60"], "tester")  # fmt: skip
    victim = out.strip().split(";")[0]
    deadline = time.monotonic() + 60
    while "RUNNING" not in side.run(["squeue", "-h", "-j", victim, "-o", "%T"], None):
        assert time.monotonic() < deadline, f"{victim} never ran"
        time.sleep(0.2)
    out = side.run(["sbatch", "--parsable", *HIGH, "-c", "2", "-t", "5", "-o", "/dev/null",
                    "--wrap", "sleep 1"], "tester")  # fmt: skip
    high = out.strip().split(";")[0]
    time.sleep(3)  # well inside the exempt time

    def show(ident: str) -> dict[str, str]:
        return dict(
            re.findall(r"(\w+)=(\S*)", side.run(["scontrol", "-o", "show", "job", ident], None))
        )

    early_v, early_h = show(victim), show(high)
    deadline = time.monotonic() + 60
    while (late := show(victim)).get("JobState") == "RUNNING":
        assert time.monotonic() < deadline, f"{victim} never preempted"
        time.sleep(0.2)

    stamp = datetime.strptime
    start = stamp(late["StartTime"], "%Y-%m-%dT%H:%M:%S").timestamp()
    eligible = stamp(late["PreemptEligibleTime"], "%Y-%m-%dT%H:%M:%S").timestamp()
    preempted = stamp(late["PreemptTime"], "%Y-%m-%dT%H:%M:%S").timestamp()
    deadline = time.monotonic() + 30
    while (final := show(victim)).get("JobState") not in ("PREEMPTED", "CANCELLED"):
        assert time.monotonic() < deadline, f"{victim} never ended"
        time.sleep(0.2)
    while show(high).get("JobState") == "PENDING":
        assert time.monotonic() < deadline, f"{high} never started"
        time.sleep(0.2)
    side.run(["scancel", victim, high], None)
    return {
        "early": (
            early_v["JobState"],
            early_v["PreemptTime"],
            early_h["JobState"],
            early_h["Reason"],
        ),
        "eligible - start": eligible - start,
        "preempted after the exempt time": preempted - start >= EXEMPT_S,
        "final": (final["JobState"], final["Reason"]),
    }


def test_a_victim_inside_its_qos_preempt_exempt_time_is_spared_as_slurm(
    real: Side, ours: Side
) -> None:
    slurm = _exempt_victim(real)
    assert slurm["early"] == ("RUNNING", "None", "PENDING", "Resources")
    assert slurm["eligible - start"] == EXEMPT_S
    assert slurm["preempted after the exempt time"] is True
    assert _exempt_victim(ours) == slurm
