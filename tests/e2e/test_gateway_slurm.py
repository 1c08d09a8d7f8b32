"""A gateway in front of the real Slurm cluster: jobs submitted with Caldera's sbatch run on
Slurm's nodes, show in Caldera's squeue and sacct, and keep Slurm's exit codes."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.gateway_env import Gateway, start_gateway, stop_gateway
from tests.support.slurm_stack import SlurmStack

pytestmark = pytest.mark.slurm


@pytest.fixture
def slurm_gateway(slurm_cluster: SlurmStack) -> Iterator[Gateway]:
    base = Path(tempfile.mkdtemp(prefix="caldera-slurm-", dir="/tmp"))
    config = (
        '[[partitions]]\nname = "local"\ndefault = true\n'
        '[slurm]\n[[slurm.cluster]]\nname = "hpc"\ntransport = "cli"\n'
        f'slurm_conf = "{slurm_cluster.slurm_conf}"\n'
        f'instance = "e2e-{base.name}"\n'
        '[[slurm.cluster.partition]]\nslurm = "real"\nname = "hpc-real"\n'
    )
    gw = start_gateway(base, config)
    try:
        yield gw
    finally:
        gw.run(["scancel", "-u", "root"])
        stop_gateway(gw)
        shutil.rmtree(base, ignore_errors=True)


def test_a_job_routed_to_a_slurm_partition_runs_there_and_is_accounted(slurm_gateway: Gateway):
    gw = slurm_gateway
    out = Path("/tmp/caldera-slurm/jobs")
    job = gw.sbatch(
        "-p",
        "hpc-real",
        "-o",
        str(out / "e2e-%j.out"),
        "--wrap",
        'echo "on $(hostname) as $SLURM_JOB_ID"; exit 3',
    )
    final = gw.wait(job, timeout=240)
    assert final["state"] == "FAILED"
    assert final["cluster"] == "hpc"
    assert str(final["nodes"][0]).startswith("node0")  # type: ignore[index]
    acct = gw.ok(["sacct", "-X", "-n", "-P", "-j", str(job), "-o", "JobID,State,ExitCode,NodeList"])
    jobid, state, exit_code, nodes = acct.strip().split("|")
    assert (jobid, state, exit_code) == (str(job), "FAILED", "3:0")
    assert nodes.startswith("node0")


def test_dependencies_between_jobs_of_one_slurm_cluster(slurm_gateway: Gateway):
    gw = slurm_gateway
    first = gw.sbatch("-p", "hpc-real", "-o", "/dev/null", "--wrap", "sleep 1")
    second = gw.sbatch(
        "-p", "hpc-real", "-o", "/dev/null", f"--dependency=afterok:{first}", "--wrap", "true"
    )
    final = gw.wait(second, timeout=240)
    assert final["state"] == "COMPLETED"
    assert final["start_time"] >= gw.job(first)["end_time"] - 1  # type: ignore[operator]


def test_a_partition_the_site_does_not_offer_is_refused_as_slurm_refuses_it(
    slurm_gateway: Gateway,
):
    r = slurm_gateway.run(["sbatch", "-p", "real", "--wrap", "true"])
    assert r.returncode == 1
    assert r.stderr == (
        "sbatch: error: invalid partition specified: real\n"
        "sbatch: error: Batch job submission failed: Invalid partition name specified\n"
    )
