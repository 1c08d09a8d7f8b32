"""Accounting policy on a real gateway: sacctmgr through the shims (operators change,
everyone lists; the commit question; kept across a restart), and priority/multifactor
ordering the queue: a QOS with priority starts before an older job, sprio and sshare
show why."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.support.gateway_env import CALDERA, Gateway, running_gateway, stop_gateway

MULTIFACTOR = """time_scale = 0.016666
kill_wait_s = 2
[priority]
PriorityType = "priority/multifactor"
PriorityWeightQOS = 1000
PriorityWeightFairshare = 100
PriorityWeightAge = 10
"""


@pytest.fixture
def mf_gateway() -> Iterator[Gateway]:
    """A gateway with priority/multifactor."""
    with running_gateway(MULTIFACTOR, "caldera-e2e-") as gw:
        yield gw


def _restart(gw: Gateway) -> None:
    stop_gateway(gw)
    env = {**os.environ, "CALDERA_HOME": str(gw.home), "CALDERA_SOCKET": str(gw.socket)}
    up = subprocess.run([*CALDERA, "up"], env=env, capture_output=True, text=True, timeout=60)
    assert up.returncode == 0, up.stderr


def test_sacctmgr_changes_are_for_operators_asked_and_kept(gateway: Gateway) -> None:
    gw = gateway
    out = gw.ok(["sacctmgr", "-i", "add", "account", "physics", "Description=Physics dept"])
    assert out.startswith(" Adding Account(s)\n  physics\n Settings\n")
    gw.ok(["sacctmgr", "-i", "add", "user", "tester", "account=physics", "MaxJobs=4"])
    gw.ok(["sacctmgr", "-i", "add", "qos", "high", "priority=100", "MaxJobsPerUser=2"])
    listing = gw.ok(["sacctmgr", "-P", "show", "assoc", "format=account,user,maxjobs"])
    assert listing == "Account|User|MaxJobs\nroot||\nroot|root|\nphysics||\nphysics|tester|4\n"

    # another user lists, but may not change (slurmdbd's answer)
    assert "high" in gw.ok(["sacctmgr", "-nP", "show", "qos", "format=name"], user="tester")
    denied = gw.run(["sacctmgr", "-i", "delete", "qos", "high"], user="tester")
    assert denied.returncode == 1
    assert "Error with request: Access/permission denied" in denied.stderr

    # without -i, sacctmgr asks; "n" discards, "y" commits
    no = gw.run(["sacctmgr", "add", "account", "bio"], stdin="n\n")
    assert no.returncode == 0
    assert no.stdout.endswith(
        "Would you like to commit changes? (You have 30 seconds to decide)\n"
        "(N/y): \n Changes Discarded\n"
    )
    assert "bio" not in gw.ok(["sacctmgr", "-nP", "show", "account", "format=account"])
    yes = gw.run(["sacctmgr", "add", "account", "bio"], stdin="y\n")
    assert yes.returncode == 0
    assert "Changes Discarded" not in yes.stdout

    _restart(gw)
    accounts = gw.ok(["sacctmgr", "-nP", "show", "account", "format=account"])
    assert accounts.split() == ["bio", "physics", "root"]
    assert gw.ok(["sacctmgr", "-nP", "show", "qos", "high", "format=priority,maxjobspu"]) == (
        "100|2\n"
    )
    bad = gw.run(["sacctmgr", "-i", "modify", "qos", "high", "set", "MaxWall=soon"])
    assert bad.returncode == 1
    assert bad.stderr == " Bad MaxWall time format: MaxWall=soon\n"


def test_multifactor_priority_orders_the_queue(mf_gateway: Gateway) -> None:
    gw = mf_gateway
    gw.ok(["sacctmgr", "-i", "add", "qos", "high", "priority=100"])
    cpus = int(gw.ok(["sinfo", "-h", "-o", "%c"]).split()[0])
    holder = gw.sbatch("-c", str(cpus), "-t", "5", "--wrap", "sleep 4")
    older = gw.sbatch("-c", str(cpus), "-t", "5", "--wrap", "sleep 1")
    urgent = gw.sbatch("-c", str(cpus), "-t", "5", "--qos=high", "--wrap", "sleep 1")
    deadline = time.monotonic() + 30
    while True:
        prio = gw.ok(["squeue", "-h", "-j", f"{older},{urgent}", "-o", "%i %Q"]).split()
        pairs = dict(zip(prio[::2], prio[1::2], strict=True))
        if pairs.get(str(urgent)) == "1100":
            break
        assert time.monotonic() < deadline, pairs
        time.sleep(0.2)
    assert pairs[str(older)] == "100"  # fair share 1.0 x 100, no QOS priority, ~0 age
    sprio = gw.ok(["sprio"]).splitlines()
    assert sprio[0].split() == ["JOBID", "PARTITION", "PRIORITY", "SITE", "AGE", "FAIRSHARE",
                                "QOS"]  # fmt: skip
    rows = {line.split()[0]: line.split() for line in sprio[1:]}
    assert rows[str(urgent)][2:] == ["1100", "0", "0", "100", "1000"]
    assert gw.ok(["sprio", "-w"]).splitlines()[1].split() == ["Weights", "1", "10", "100", "1000"]
    share = gw.ok(["sshare", "-a", "-P"]).splitlines()
    assert share[0] == "Account|User|RawShares|NormShares|RawUsage|EffectvUsage|FairShare"
    assert " root|root|1|1.000000|" in "\n".join(share)

    for job in (holder, older, urgent):
        gw.wait(job, timeout=60)
    starts = {j: float(str(gw.job(j)["start_time"])) for j in (older, urgent)}
    assert starts[urgent] <= starts[older], starts  # the QOS priority went first


def test_a_qos_limit_keeps_jobs_pending_with_slurms_reason(gateway: Gateway) -> None:
    gw = gateway
    gw.ok(["sacctmgr", "-i", "add", "qos", "one", "MaxJobsPerUser=1"])
    first = gw.sbatch("-t", "5", "--qos=one", "--wrap", "sleep 3")
    second = gw.sbatch("-t", "5", "--qos=one", "--wrap", "true")
    deadline = time.monotonic() + 30
    while gw.ok(["squeue", "-h", "-j", str(second), "-o", "%r"]).strip() != (
        "QOSMaxJobsPerUserLimit"
    ):
        assert time.monotonic() < deadline, gw.ok(["squeue"])
        time.sleep(0.2)
    assert gw.ok(["squeue", "-h", "-j", str(first), "-o", "%t"]).strip() == "R"
    # once the first ends, the second starts (nothing was refused)
    assert gw.wait(second, timeout=60)["state"] == "COMPLETED"
    assert gw.job(first)["state"] == "COMPLETED"
