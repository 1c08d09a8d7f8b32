"""End to end: how runs end and where their batch step ran, as Slurm 22.05 records them.

The expected values were observed on the real test cluster (docs/compatibility.md, "Lifecycle
of the corpus, against real Slurm", items 1, 2 and 10):

- `-o log/%j.out` without `log/`: FAILED, ExitCode 0:53 and Reason JobLaunchFailure in
  `scontrol show job` (no words after it), 0:53 in sacct, whose `batch` step is CANCELLED 0:53;
  the open error only in the node's log.
- the `batch` step's node is the job's BatchHost, the first node of its allocation.
- TIMEOUT: `scontrol show job` has the batch shell's status (0:15 after the SIGTERM, 0:9 when
  it ignored it and KillWait's SIGKILL ended it); sacct's job row keeps 0:0 and its `batch`
  step is CANCELLED with that status.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.support.gateway_env import Gateway, running_gateway

CONFIG = (
    "time_scale = 0.016666\nkill_wait_s = 2\n"
    '[[nodes]]\nname = "fid01"\ncpus = 2\nmemory_mb = 2000\n'
    '[[nodes]]\nname = "fid02"\ncpus = 2\nmemory_mb = 2000\ngpus = 1\n'
)


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[Gateway]:
    """A gateway with two virtual nodes, the second with a GPU (`-t 1` is one second)."""
    with running_gateway(CONFIG) as gw:
        yield gw


def _show(gw: Gateway, job: int) -> dict[str, str]:
    """`scontrol show job`'s Key=Value pairs (Reason's own words would break the pattern)."""
    text = gw.ok(["scontrol", "show", "job", str(job)])
    return dict(re.findall(r"(\S+?)=(\S*)", text))


def _acct(gw: Gateway, job: int, fields: str) -> list[str]:
    return gw.ok(["sacct", "-n", "-P", "-j", str(job), "-o", fields]).splitlines()


def test_output_that_cannot_be_opened_fails_the_launch_as_slurmstepd_does(
    two_nodes: Gateway,
) -> None:
    gw = two_nodes
    assert not (gw.workdir / "log").exists()
    job = gw.sbatch("-o", "log/%j.out", "--wrap", "true")
    gw.wait(job)
    show = gw.ok(["scontrol", "show", "job", str(job)])
    assert "JobState=FAILED Reason=JobLaunchFailure Dependency=(null)" in show
    assert _show(gw, job)["ExitCode"] == "0:53"
    assert "Could not open" not in show  # Slurm has the error in the node's log only
    assert _acct(gw, job, "JobID,State,ExitCode") == [
        f"{job}|FAILED|0:53",
        f"{job}.batch|CANCELLED|0:53",
    ]
    log = (gw.home / "gateway.log").read_text()
    assert f"Could not open stdout file {gw.workdir}/log/{job}.out" in log


def test_the_batch_step_runs_on_the_first_node_of_the_allocation(two_nodes: Gateway) -> None:
    gw = two_nodes
    gpu = gw.sbatch("--gres=gpu:1", "-o", "gpu-%j-%N.out", "--wrap", "echo $SLURMD_NODENAME")
    pair = gw.sbatch("-N", "2", "-o", "pair-%j.out", "--wrap", "echo $SLURMD_NODENAME")
    for job in (gpu, pair):
        gw.wait(job)
    assert _show(gw, gpu)["NodeList"] == "fid02"  # the only node with a GPU
    for job in (gpu, pair):
        show = _show(gw, job)
        host = show["BatchHost"]
        assert (show["JobState"], show["NumNodes"]) == ("COMPLETED", "2" if job == pair else "1")
        assert _acct(gw, job, "JobID,NodeList") == [
            f"{job}|{show['NodeList']}",
            f"{job}.batch|{host}",
        ]
        name = f"gpu-{gpu}-{host}.out" if job == gpu else f"pair-{pair}.out"
        assert (gw.workdir / name).read_text() == f"{host}\n"
    assert _show(gw, pair)["NodeList"] == "fid[01-02]"


@pytest.mark.parametrize(
    ("script", "status"),
    [("sleep 300", "0:15"), ("trap '' TERM; sleep 300", "0:9")],
    ids=["sigterm", "sigkill-after-killwait"],
)
def test_a_timeout_keeps_the_batch_status_in_scontrol_and_0_0_in_sacct(
    two_nodes: Gateway, script: str, status: str
) -> None:
    gw = two_nodes
    job = gw.sbatch("-t", "1", "--wrap", script)
    gw.wait(job, timeout=90)
    show = _show(gw, job)
    assert (show["JobState"], show["Reason"], show["ExitCode"]) == ("TIMEOUT", "TimeLimit", status)
    assert _acct(gw, job, "JobID,State,ExitCode") == [
        f"{job}|TIMEOUT|0:0",
        f"{job}.batch|CANCELLED|{status}",
    ]
