"""A gateway in front of the real Slurm cluster: jobs submitted with Caldera's sbatch run on
Slurm's nodes, show in Caldera's squeue and sacct, and keep Slurm's exit codes."""

from __future__ import annotations

import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_plugin.mapping import make_tag
from tests.support.gateway_env import Gateway, discard_gateway, start_gateway
from tests.support.slurm_stack import SlurmStack, parse_scontrol_records, scontrol_lines

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
        discard_gateway(gw, base)


def test_a_job_routed_to_a_slurm_partition_runs_there_and_is_accounted(
    slurm_gateway: Gateway,
) -> None:
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


def test_dependencies_between_jobs_of_one_slurm_cluster(slurm_gateway: Gateway) -> None:
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
) -> None:
    r = slurm_gateway.run(["sbatch", "-p", "real", "--wrap", "true"])
    assert r.returncode == 1
    assert r.stderr == (
        "sbatch: error: invalid partition specified: real\n"
        "sbatch: error: Batch job submission failed: Invalid partition name specified\n"
    )


def test_a_job_without_partition_waits_for_the_default_cluster_and_never_goes_to_slurm(
    slurm_gateway: Gateway,
) -> None:
    """The cluster is decided by cluster selection: no -p means the default partition's
    cluster (local), even while its node is full and Slurm's nodes are idle."""
    gw = slurm_gateway
    filler = gw.sbatch("--exclusive", "-o", "/dev/null", "--wrap", "sleep 60")
    gw.wait(filler, states=("RUNNING",), timeout=60)
    waiting = gw.sbatch("-o", "/dev/null", "--wrap", "true")
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:
        job = gw.job(waiting)
        assert job["state"] == "PENDING", job
        time.sleep(0.5)
    assert job["reason"] == "Resources"
    gw.ok(["scancel", str(filler)])
    final = gw.wait(waiting, timeout=60)
    assert final["state"] == "COMPLETED"
    assert (final["cluster"], final["partition"]) == ("caldera", "local")


def _slurm_runs(gw: Gateway, job: int) -> dict[int, dict[str, str]]:
    """The Slurm jobs of each run of a Caldera job (found by their tag), by run."""
    instance = f"e2e-{gw.home.parent.name}"
    runs: dict[int, dict[str, str]] = {}
    for record in parse_scontrol_records(scontrol_lines(["show", "job"])):
        comment = record.get("Comment", "")
        for run in range(3):
            tag = make_tag(instance, job, run)
            if comment == tag or comment.startswith(tag + " "):
                runs[run] = record
    return runs


def test_requeue_of_a_slurm_job_ends_its_slurm_job_before_the_next_run_starts(
    slurm_gateway: Gateway,
) -> None:
    """scontrol requeue: Slurm confirms the run's Slurm job ended (scancel, end_attempt)
    before the gateway commits the requeue; the next run is a new Slurm job."""
    gw = slurm_gateway
    job = gw.sbatch("-p", "hpc-real", "-o", "/dev/null", "--wrap", "sleep 120")
    deadline = time.monotonic() + 120
    while _slurm_runs(gw, job).get(0, {}).get("JobState") != "RUNNING":
        assert time.monotonic() < deadline, _slurm_runs(gw, job)
        time.sleep(0.5)
    gw.wait(job, states=("RUNNING",), timeout=30)
    gw.ok(["scontrol", "requeue", str(job)])
    assert _slurm_runs(gw, job)[0]["JobState"] == "CANCELLED"  # gone before the answer
    # pending for slurmctld's requeue delay (cred_expire + 1 s), lifted as a user would
    assert gw.ok(["squeue", "-h", "-j", str(job), "-o", "%T %r"]).split() == [
        "PENDING",
        "BeginTime",
    ]
    gw.ok(["scontrol", "update", f"JobId={job}", "StartTime=now"])
    deadline = time.monotonic() + 120
    while gw.job(job)["state"] != "RUNNING" or 1 not in _slurm_runs(gw, job):
        assert time.monotonic() < deadline, gw.job(job)
        time.sleep(0.5)
    runs = _slurm_runs(gw, job)
    assert runs[1]["JobId"] != runs[0]["JobId"]
    assert runs[1]["StartTime"] >= runs[0]["EndTime"]  # ISO times compare as text
    assert re.search(r"\bRestarts=1\b", gw.ok(["scontrol", "show", "job", str(job)]))


def test_a_job_handed_to_slurm_pends_there_until_slurm_starts_it(slurm_gateway: Gateway) -> None:
    """Right after sbatch, squeue shows what slurmctld shows: PD (None), then Slurm's own
    reason; never RUNNING on nodes Slurm has not given it (two jobs that each need every node
    of the partition are never both R)."""
    gw = slurm_gateway
    argv = ["-p", "hpc-real", "-o", "/dev/null", "-N", "4", "--exclusive", "--wrap"]
    first, second = gw.sbatch(*argv, "sleep 2"), gw.sbatch(*argv, "sleep 1")
    seen: list[dict[str, str]] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        out = gw.ok(["squeue", "-h", "-j", f"{first},{second}", "-o", "%i %t %R"])
        states = {line.split()[0]: line.split(" ", 1)[1] for line in out.splitlines()}
        if not states:
            break
        seen.append(states)
        time.sleep(0.05)
    assert seen, "the jobs were never listed"
    assert all(s.startswith("PD") for s in seen[0].values()), seen[0]
    both_running = [s for s in seen if len(s) == 2 and all(v.startswith("R ") for v in s.values())]
    assert not both_running, both_running[:3]
    assert any(v.startswith("R ") for s in seen for v in s.values())  # and they did run
    for job in (first, second):
        assert gw.wait(job, timeout=120)["state"] == "COMPLETED"


def test_scancel_of_one_step_of_a_slurm_job_cancels_that_step_alone(
    slurm_gateway: Gateway,
) -> None:
    """`scancel ID.0` through the gateway reaches Slurm as `scancel SLURMID.0`: the step is
    cancelled (its srun exits 137), the job runs on to COMPLETED, sacct has the step."""
    gw = slurm_gateway
    out = Path("/tmp/caldera-slurm/jobs") / f"e2e-step-{time.time_ns()}.out"
    script = 'srun sleep 60\necho "srun rc=$?"\n'
    job = gw.sbatch("-p", "hpc-real", "-o", str(out), "--wrap", script)
    deadline = time.monotonic() + 120
    while True:  # until the step runs: before, scancel answers that it has no step 0
        done = gw.run(["scancel", f"{job}.0"])
        if done.returncode == 0:
            break
        said = done.stderr.removeprefix(f"scancel: error: Kill job error on job step id {job}: ")
        assert said in ("Invalid job id specified\n", "Job is pending execution\n"), done.stderr
        assert time.monotonic() < deadline, done.stderr
        time.sleep(1)
    final = gw.wait(job, timeout=120)
    assert final["state"] == "COMPLETED"
    text = out.read_text()
    assert "srun rc=137" in text
    assert "CANCELLED AT" in text
    acct = ["sacct", "-n", "-P", "-j", str(job), "-o", "JobID,State,ExitCode"]
    deadline = time.monotonic() + 60
    while f"{job}.0|CANCELLED" not in gw.ok(acct):
        assert time.monotonic() < deadline, gw.ok(acct)
        time.sleep(1)
    out.unlink(missing_ok=True)
