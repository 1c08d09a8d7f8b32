"""preempt/qos at run time against real Slurm 22.05 (the burst test cluster).

The burst cluster gets a temporary slurm.conf (PreemptType=preempt/qos, site PreemptMode
CANCEL, a partition `pq` on bnode01, restored in a `finally`:
tests/support/slurm_burst_conf.py) and three QOS in the shared slurmdbd, deleted again
afterwards: `pqlo` (PreemptMode=CANCEL, GraceTime=3), `pqrq` (PreemptMode=REQUEUE) and
`pqhi` (Preempt=pqlo,pqrq). A Caldera gateway gets the same partition and QOS through its
own sacctmgr. The same steps run on both and are reduced to what must agree whatever the
timing (test_preempt_vs_slurm.py's facts: the victim's states through its QOS's GraceTime
and KillWait, PreemptTime and EndTime, its batch shell's signals, the sacct rows,
slurmstepd's line, the preemptor starting after the victim's processes are gone; a
requeued victim's pending state and records), plus a job of the victim's own QOS, which
preempts nothing and waits.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from collections.abc import Iterator
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
from tests.support.slurm_burst_conf import temporary_slurm_conf

pytestmark = [pytest.mark.slurm]

SLURM_LINES = (
    "PreemptType=preempt/qos",
    "PreemptMode=CANCEL",
    "SchedulerParameters=bf_interval=1",  # a victim whose grace is over ends at a pass
    "PartitionName=pq Nodes=bnode01",
)
QOS = (
    ["-i", "add", "qos", "pqlo", "PreemptMode=cancel", f"GraceTime={GRACE_S}"],
    ["-i", "add", "qos", "pqrq", "PreemptMode=requeue"],
    ["-i", "add", "qos", "pqhi", "Preempt=pqlo,pqrq", "Priority=100"],
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
    try:
        for argv in QOS:
            done = run_on(stack, ["sacctmgr", *argv])
            assert done.returncode == 0, done.stderr
        with temporary_slurm_conf(stack, SLURM_LINES):
            yield Side(lambda argv, user: run_on(stack, argv, user=user).stdout, stack.jobs_dir)
    finally:
        run_on(stack, ["sacctmgr", "-i", "delete", "qos", "pqhi,pqlo,pqrq"])


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
