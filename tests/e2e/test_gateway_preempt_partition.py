"""PreemptType=preempt/partition_prio on the local runner through the real gateway: a job
of a partition with a higher PriorityTier ends a job of a lower-tier partition sharing the
node, with that partition's PreemptMode and GraceTime; `scontrol show partition` shows
the settings as slurmctld prints them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.test_gateway_preempt import _events, _started_at, _started_at_file
from tests.support.gateway_env import Gateway, running_gateway

# job seconds run 20x faster: GraceTime=60 is 3 s
CONFIG = """time_scale = 0.05
kill_wait_s = 2
preempt_type = "preempt/partition_prio"
preempt_mode = "REQUEUE"
[[nodes]]
name = "pnode"
cpus = 2
memory_mb = 2000
[[partitions]]
name = "low"
default = true
preempt_mode = "CANCEL"
grace_time = 60
[[partitions]]
name = "high"
priority_tier = 5
"""


@pytest.fixture
def tgw() -> Iterator[Gateway]:
    """One 2-CPU node in two partitions: `low` (tier 1, CANCEL, GraceTime 60) and `high`."""
    with running_gateway(CONFIG, "caldera-e2e-ptier-") as gw:
        yield gw


def test_scontrol_shows_each_partitions_tier_mode_and_grace(tgw: Gateway) -> None:
    low = tgw.ok(["scontrol", "show", "partition", "low"])
    high = tgw.ok(["scontrol", "show", "partition", "high"])
    assert "PriorityJobFactor=1 PriorityTier=1 RootOnly=NO" in low
    assert "PreemptMode=CANCEL" in low
    assert " GraceTime=60 " in low
    assert "PriorityJobFactor=1 PriorityTier=5 RootOnly=NO" in high
    assert "PreemptMode=REQUEUE" in high  # not set: the site's, as slurmctld prints it
    assert " GraceTime=0 " in high
    one = tgw.ok(["scontrol", "-o", "show", "partition", "high"])
    assert " PriorityTier=5 " in one


def test_a_higher_tier_job_ends_a_lower_tier_job_with_its_partitions_mode(tgw: Gateway) -> None:
    gw = tgw
    got_term = gw.workdir / "victim.term"
    running = gw.workdir / "victim.running"
    victim = gw.sbatch(
        "-p", "low", "-n", "2", "-o", "/dev/null",
        "--wrap", f"trap 'date +%s.%N >> {got_term}' TERM; touch {running}; "
        "while :; do sleep 0.1; done",
        user="tester",
    )  # fmt: skip
    _started_at_file(running)
    # a job of the same tier waits; it never preempts
    same = gw.sbatch("-p", "low", "-n", "1", "-o", "/dev/null", "--wrap", "true", user="tester")
    stamp = gw.workdir / "high.started"
    high = gw.sbatch(
        "-p", "high", "-n", "2", "-o", "/dev/null",
        "--wrap", f"date +%s.%N > {stamp}; sleep 1",
        user="tester",
    )  # fmt: skip
    began = _started_at(stamp)
    assert gw.wait(high)["state"] == "COMPLETED"
    assert gw.wait(victim, ("PREEMPTED",))["state"] == "PREEMPTED"

    termed = float(got_term.read_text().split()[0])
    events = {k: t for k, t, _ in _events(gw, victim)}
    assert events["preempt-end"] - events["preempt"] >= 60 * 0.05  # the partition's grace
    assert termed < events["preempt-end"] <= began
    preempt = next(d for k, _, d in _events(gw, victim) if k == "preempt")
    assert preempt == {"by": high, "mode": "CANCEL", "grace_s": 60}
    assert "preempt" not in [k for k, _, _ in _events(gw, same)]
    assert "preempting" not in [k for k, _, _ in _events(gw, same)]
    acct = gw.ok(["sacct", "-n", "-P", "-o", "JobID,State,ExitCode", "-j", str(victim)])
    assert acct.split() == [f"{victim}|PREEMPTED|0:0", f"{victim}.batch|CANCELLED|0:9"]
    assert gw.wait(same)["state"] == "COMPLETED"
