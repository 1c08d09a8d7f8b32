"""Submit-time limits through the real gateway and the sbatch shim: a submission over
MaxSubmitJobsPerUser (QOS) or MaxSubmitJobs (association) is refused with slurmctld's reason
and ESLURM_ACCOUNTING_POLICY, exit status 1, and nothing is stored; an array counts one per
task. (The Slurm test cluster runs with AccountingStorageEnforce=none, so it does not
enforce these; the text is slurmctld's for an enforcing site.)"""

from __future__ import annotations

from tests.support.gateway_env import Gateway

REFUSED = (
    "sbatch: error: {reason}\n"
    "sbatch: error: Batch job submission failed: Job violates accounting/QOS policy "
    "(job submit limit, user's size and/or time limits)\n"
)


def _ids(gw: Gateway) -> list[str]:
    return gw.ok(["squeue", "-h", "-o", "%i"]).split()


def test_qos_max_submit_per_user_refuses_and_stores_nothing(gateway: Gateway) -> None:
    gw = gateway
    gw.ok(["sacctmgr", "-i", "modify", "qos", "normal", "set", "maxsubmitjobsperuser=3"])
    first = gw.sbatch("--hold", "--array=0-1", "--wrap", "true", user="tester")
    gw.sbatch("--hold", "--wrap", "true", user="tester")
    before = _ids(gw)
    over = gw.run(["sbatch", "--hold", "--wrap", "true"], user="tester")
    assert over.returncode == 1
    assert over.stdout == ""
    assert over.stderr == REFUSED.format(reason="QOSMaxSubmitJobPerUserLimit")
    assert _ids(gw) == before
    # another user is not counted against tester's limit
    assert gw.run(["sbatch", "--hold", "--wrap", "true"], user="root").returncode == 0
    # once tester's jobs are gone, tester may submit again (ids keep growing)
    gw.ok(["scancel", str(first)])
    again = gw.sbatch("--hold", "--wrap", "true", user="tester")
    assert again > first


def test_association_max_submit_counts_array_tasks(gateway: Gateway) -> None:
    gw = gateway
    gw.ok(["sacctmgr", "-i", "add", "account", "lab"])
    gw.ok(["sacctmgr", "-i", "add", "user", "tester", "account=lab", "maxsubmitjobs=4"])
    over = gw.run(["sbatch", "--hold", "--array=0-4", "--wrap", "true"], user="tester")
    assert over.returncode == 1
    assert over.stderr == REFUSED.format(reason="AssocMaxSubmitJobLimit")
    assert _ids(gw) == []
    assert (
        gw.run(["sbatch", "--hold", "--array=0-3", "--wrap", "true"], user="tester").returncode == 0
    )
