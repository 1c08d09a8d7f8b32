"""priority/multifactor's numbers on the real burst cluster and on a Caldera gateway given the
same site: the job size, partition and QOS factors, nice, and the priority they sum to.

The burst cluster gets a temporary slurm.conf (PriorityType=priority/multifactor, weights for
job size, partition and QOS only, so that nothing depends on time or on the usage earlier
tests left in the shared slurmdbd; partitions `mfa` PriorityJobFactor=10 on bnode01 and
`mfb` PriorityJobFactor=30 on both nodes, both DOWN so that their jobs stay pending and
eligible; restored in a `finally`: tests/support/slurm_burst_conf.py) and two QOS, deleted
again afterwards. The gateway reads the same slurm.conf for its nodes and partitions, its
[priority] table holds the same weights, and its sacctmgr the same QOS. sprio's factors and
squeue's priority are compared job by job.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.differential.test_preempt_vs_slurm import Side
from tests.support.gateway_env import start_gateway, stop_gateway
from tests.support.slurm_burst import SlurmClusters, run_on
from tests.support.slurm_burst_conf import burst_site

pytestmark = [pytest.mark.slurm]

WEIGHTS = {"PriorityWeightJobSize": 1000, "PriorityWeightPartition": 2000}
WEIGHTS |= {"PriorityWeightQOS": 3000, "PriorityWeightAge": 0, "PriorityWeightFairshare": 0}
# down: their jobs stay pending, eligible (sprio leaves out jobs waiting for a begin time)
PARTITIONS = (
    "PartitionName=mfa Nodes=bnode01 PriorityJobFactor=10 State=DOWN",
    "PartitionName=mfb Nodes=bnode[01-02] PriorityJobFactor=30 State=DOWN",
)
SLURM_LINES = (
    "PriorityType=priority/multifactor",
    *(f"{k}={v}" for k, v in WEIGHTS.items()),
    *PARTITIONS,
)
# the highest QOS priority normalises the factor: above any other QOS of the shared slurmdbd
QOS = (
    ["-i", "add", "qos", "mflo", "Priority=10"],
    ["-i", "add", "qos", "mfhi", "Priority=100000"],
)
JOBS = (
    ("-p", "mfa", "-n1", "--qos=mflo"),
    ("-p", "mfb", "-n2", "--qos=mfhi"),
    ("-p", "mfb", "-n1", "--nice=100"),
    ("-p", "mfb", "-N2", "-n4", "--qos=mfhi"),
    ("-p", "mfa", "-n2"),
)
SPRIO = ["sprio", "-h", "-o", "%i|%r|%Y|%J|%P|%Q|%N"]


@pytest.fixture(scope="module")
def real(slurm_burst_cluster: SlurmClusters) -> Iterator[Side]:
    stack = slurm_burst_cluster.burst
    with burst_site(stack, SLURM_LINES, ("mfa", "mfb"), QOS):
        yield Side(lambda argv, user: run_on(stack, argv, user=user).stdout, stack.jobs_dir)


@pytest.fixture(scope="module")
def ours(slurm_burst_cluster: SlurmClusters) -> Iterator[Side]:
    base = Path(tempfile.mkdtemp(prefix="caldera-multifactor-", dir="/tmp"))
    base.chmod(0o755)  # the job user reaches the gateway's shims below it
    conf = base / "slurm.conf"  # the burst cluster's own, with the same partitions added
    text = (slurm_burst_cluster.burst.base / "etc" / "slurm.conf").read_text()
    kept = [line for line in text.splitlines() if line not in SLURM_LINES]  # (if `real` ran)
    conf.write_text("\n".join([*kept, *PARTITIONS]) + "\n")
    weights = "".join(f"{k} = {v}\n" for k, v in WEIGHTS.items())
    config = (
        f'[local]\nslurm_conf = "{conf}"\n'
        f'[priority]\nPriorityType = "priority/multifactor"\n{weights}'
    )
    gw = start_gateway(base / "gw", config)
    try:
        for argv in QOS:
            gw.ok(["sacctmgr", *argv])
        yield Side(lambda argv, user: gw.run(argv, user=user).stdout, gw.workdir)
    finally:
        stop_gateway(gw)
        shutil.rmtree(base, ignore_errors=True)


def _factors(side: Side) -> dict[str, list[str]]:
    """sprio's row and squeue's %Q of each job, by the job's place in JOBS."""
    ids: list[str] = []
    for args in JOBS:
        out = side.run(["sbatch", "--parsable", *args, "-t", "10", "-o", "/dev/null",
                        "--wrap", "true"], "tester")  # fmt: skip
        assert out.strip(), args
        ids.append(out.strip().split(";")[0])
    try:
        # (Caldera's sprio lists a job from the first scheduling cycle after its submission,
        # slurmctld's at once: asked again for a few seconds until every job is there)
        deadline = time.monotonic() + 10
        while True:
            sprio = side.run([*SPRIO, "-j", ",".join(ids)], None)
            if len(sprio.splitlines()) >= len(ids) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        rows = sorted(
            f"{ids.index(cells[0].strip())}|" + "|".join(c.strip() for c in cells[1:])
            for cells in (line.split("|") for line in sprio.splitlines() if line.strip())
        )
        squeue = side.run(["squeue", "-h", "-j", ",".join(ids), "-o", "%i %Q"], None)
        prio = sorted(
            f"{ids.index(i)} {p}" for i, p in (line.split() for line in squeue.splitlines())
        )
    finally:
        side.run(["scancel", *ids], None)
    return {"sprio": rows, "squeue %Q": prio}


def test_multifactor_priorities_agree_with_slurm(real: Side, ours: Side) -> None:
    slurm = _factors(real)
    # what the cluster computed, so that agreeing means something: job 0 is one task on one
    # of 2 nodes and 4 CPUs (size (1/2 + 1/4)/2 of 1000), in mfa (10/30 of 2000), QOS mflo
    # (10/100000 of 3000)
    assert slurm["sprio"][0] == "0|mfa|1041|375|667|0|0", slurm  # (666.67 printed rounded)
    assert slurm["squeue %Q"] == ["0 1041", "1 5500", "2 2275", "3 6000", "4 1166"], slurm
    assert _factors(ours) == slurm
