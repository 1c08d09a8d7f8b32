"""Smoke tests of the real Slurm 22.05 test cluster itself (testenv/slurm).

They need root and start the cluster when it is not up; it is left running afterwards.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.slurm_stack import (
    CORPUS_DIR,
    REAL_NODES,
    SlurmStack,
    cancel,
    job_id_from_sbatch,
    rest_get,
    run_sbatch,
    sacct_job,
    show_job,
    wait_job,
)

pytestmark = pytest.mark.slurm  # fixture slurm_cluster: tests/conftest.py loads slurm_stack

# Corpus scripts that real sbatch 22.05 rejects, with its exact exit code and stderr.
# --image/--module (NERSC Shifter) and --qpu exist only through site SPANK plugins; the mpmd
# file is documentation whose first line is a shell prompt, not "#!".
_UNRECOGNIZED = "sbatch: unrecognized option '{}'\nTry \"sbatch --help\" for more information\n"
EXPECTED_REJECTIONS: dict[str, tuple[int, str]] = {
    "NERSC_sc23-dl-tutorial__submit_pm.sh": (
        255,
        _UNRECOGNIZED.format("--image=nersc/pytorch:ngc-23.07-v0"),
    ),
    "NERSC_sc23-dl-tutorial__submit_pm_dp.sh": (
        255,
        _UNRECOGNIZED.format("--image=nersc/pytorch:ngc-23.07-v0"),
    ),
    "sparticlesteve_cosmoflow-benchmark__scripts__train_pm_shifter.sh": (
        255,
        _UNRECOGNIZED.format("--image=sfarrell/cosmoflow-gpu:latest"),
    ),
    "ohtanim_SCA-HPCAsia-2026__slurm__2_job_split__execute.sh": (
        255,
        _UNRECOGNIZED.format("--qpu=ibm_fez"),
    ),
    "ohtanim_SCA-HPCAsia-2026__slurm__2_job_split__run_hetjob.sh": (
        255,
        _UNRECOGNIZED.format("--qpu=ibm_fez"),
    ),
    "SJTU-HPC_docs.hpc.sjtu.edu.cn__docs__jobs__examples__mpmd__cori-haswell__mpmd": (
        1,
        "sbatch: error: This does not look like a batch script.  The first\n"
        "sbatch: error: line must start with #! followed by the path to an interpreter.\n"
        "sbatch: error: For instance: #!/bin/sh\n",
    ),
}


_JOB_TIMEOUT = 300.0


def _corpus_scripts() -> list[Path]:
    if not CORPUS_DIR.is_dir():
        return []
    return sorted(p for p in CORPUS_DIR.iterdir() if p.is_file() and p.name != "SOURCES.tsv")


def _submit_and_wait(cluster: SlurmStack, argv: list[str], tmp_path: Path) -> tuple[str, str]:
    """Submit a --wrap job writing to tmp_path, wait for it; return (job id, its output).

    The real nodes are shared with other sessions, so the job may have to wait for them.
    """
    out = tmp_path / "out.txt"
    proc = run_sbatch(None, ["--parsable", "-t", "5", "-o", str(out), *argv], None, tmp_path)
    assert proc.returncode == 0, proc.stderr
    job_id = job_id_from_sbatch(proc.stdout)
    try:
        rec = wait_job(job_id, timeout=_JOB_TIMEOUT)
    finally:
        cancel(job_id)  # a no-op once it ended; frees the nodes if the wait timed out
    assert rec["JobState"] == "COMPLETED", rec
    return job_id, out.read_text()


def test_four_real_nodes_are_up_and_usable(slurm_cluster: SlurmStack) -> None:
    out = subprocess.run(
        ["sinfo", "-h", "-N", "-p", "real", "-o", "%N %T %G"],
        env=slurm_cluster.env_dict(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    states = {line.split()[0]: line.split()[1:] for line in out.splitlines()}
    assert sorted(states) == list(REAL_NODES)
    for node, (state, _gres) in states.items():
        # idle unless another session's jobs are running on it
        assert state in ("idle", "mixed", "allocated", "completing", "planned", "reserved"), (
            node,
            state,
        )
    assert states["node03"][1] == "gpu:2"
    assert states["node04"][1] == "gpu:a100:4"


def test_three_node_srun_hostname_job_runs_on_node01_to_node03(
    slurm_cluster: SlurmStack, tmp_path: Path
) -> None:
    _, output = _submit_and_wait(
        slurm_cluster, ["-N3", "-w", "node[01-03]", "--wrap", "srun hostname"], tmp_path
    )
    assert sorted(output.split()) == ["node01", "node02", "node03"]


def test_gres_job_gets_cuda_visible_devices(slurm_cluster: SlurmStack, tmp_path: Path) -> None:
    job_id, output = _submit_and_wait(
        slurm_cluster,
        ["-p", "real", "--gres=gpu:a100:2", "--wrap", 'echo "$(hostname) $CUDA_VISIBLE_DEVICES"'],
        tmp_path,
    )
    assert output.split() == ["node04", "0,1"]
    assert "gres/gpu=2" in show_job(job_id)["TRES"]


def test_mpi_pmix_job_runs_across_two_nodes(slurm_cluster: SlurmStack, tmp_path: Path) -> None:
    _, output = _submit_and_wait(
        slurm_cluster,
        [
            "-p",
            "real",
            "-N2",
            "--ntasks-per-node=1",
            "--wrap",
            f"srun --mpi=pmix {slurm_cluster.mpi_hello}",
        ],
        tmp_path,
    )
    lines = sorted(output.splitlines())
    # "rank R/2 on HOST sum 1": MPI_Allreduce over PMIx-wired ranks on two hosts
    assert [line.split()[1] for line in lines] == ["0/2", "1/2"], output
    assert all(line.endswith("sum 1") for line in lines), output
    assert len({line.split()[3] for line in lines}) == 2, output


def test_sacct_records_a_failed_job_with_its_exit_code(
    slurm_cluster: SlurmStack, tmp_path: Path
) -> None:
    proc = run_sbatch(
        "#!/bin/bash\nexit 3\n",
        ["--parsable", "-t", "5", "-p", "real", "-A", "xcore"],
        None,
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    job_id = job_id_from_sbatch(proc.stdout)
    try:
        assert wait_job(job_id, timeout=_JOB_TIMEOUT)["JobState"] == "FAILED"
    finally:
        cancel(job_id)
    rec = sacct_job(job_id)
    assert rec["State"] == "FAILED"
    assert rec["ExitCode"] == "3:0"
    assert rec["Account"] == "xcore"
    assert rec["Partition"] == "real"


def test_request_impossible_on_real_nodes_is_rejected_in_partition_real(
    slurm_cluster: SlurmStack, tmp_path: Path
) -> None:
    # Not held: slurmctld 22.05 skips the node-configuration test for held (--hold) jobs.
    proc = run_sbatch(None, ["-p", "real", "--gres=gpu:8", "--wrap", "true"], None, tmp_path)
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == (
        "sbatch: error: Batch job submission failed: "
        "Requested node configuration is not available\n"
    )
    proc = run_sbatch(None, ["-p", "real", "-c", "4", "--wrap", "true"], None, tmp_path)
    assert proc.returncode == 1
    assert proc.stderr == (
        "sbatch: error: CPU count per node can not be satisfied\n"
        "sbatch: error: Batch job submission failed: "
        "Requested node configuration is not available\n"
    )


def test_held_jobs_skip_the_node_configuration_test(
    slurm_cluster: SlurmStack, tmp_path: Path
) -> None:
    proc = run_sbatch(
        None, ["--hold", "--parsable", "-p", "real", "-c", "4", "--wrap", "true"], None, tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    cancel(job_id_from_sbatch(proc.stdout))


def test_slurmrestd_serves_openapi_v0_0_38(slurm_cluster: SlurmStack) -> None:
    spec = rest_get("/openapi", socket_path=slurm_cluster.rest_socket)
    prefixes = {"/".join(p.split("/")[:3]) for p in spec["paths"]}
    assert "/slurm/v0.0.38" in prefixes
    assert "/slurmdb/v0.0.38" in prefixes
    ping = rest_get("/slurm/v0.0.38/ping", socket_path=slurm_cluster.rest_socket)
    assert ping["meta"]["plugin"]["type"] == "openapi/v0.0.38"
    assert ping["meta"]["Slurm"]["release"].startswith("22.05")
    assert ping["pings"][0]["ping"] == "UP"


def test_show_job_keeps_spaces_and_inner_equals(slurm_cluster: SlurmStack, tmp_path: Path) -> None:
    workdir = tmp_path / "dir with space"
    workdir.mkdir()
    script = "#!/bin/bash\n#SBATCH --comment='hello world x=1 Foo=bar'\n#SBATCH -J 'my job'\ntrue\n"
    proc = run_sbatch(script, ["--hold", "--parsable", "-q", "qos_gpu-t3"], None, workdir)
    assert proc.returncode == 0, proc.stderr
    job_id = job_id_from_sbatch(proc.stdout)
    try:
        job = show_job(job_id)
        assert job["JobId"] == job_id
        assert job["JobName"] == "my job"
        assert job["Comment"] == "hello world x=1 Foo=bar"
        assert job["WorkDir"] == str(workdir)
        assert job["Command"].startswith(str(workdir) + "/sbatch-")
        assert job["QOS"] == "qos_gpu-t3"
        assert job["TRES"].startswith("cpu=1,mem=100M,node=1")
        assert job["JobState"] == "PENDING"
        assert job["Reason"] == "JobHeldUser"
    finally:
        cancel(job_id)


@pytest.mark.parametrize("script", _corpus_scripts(), ids=lambda p: p.name)
def test_corpus_script_is_accepted_by_sbatch_hold(
    slurm_cluster: SlurmStack, script: Path, tmp_path: Path
) -> None:
    _check_corpus_submission(script, ["--hold"], "JobHeldUser", tmp_path)


@pytest.mark.parametrize("script", _corpus_scripts(), ids=lambda p: p.name)
def test_corpus_script_fits_the_configured_nodes(
    slurm_cluster: SlurmStack, script: Path, tmp_path: Path
) -> None:
    # A begin time a year away (instead of --hold) makes slurmctld run its full node-config
    # test at submission, against the virtual big* nodes too; the job then waits (BeginTime).
    # (Reason is BeginTime, or ReqNodeNotAvail once the scheduler looked at it.)
    _check_corpus_submission(script, ["--begin=now+365days"], None, tmp_path)


def _check_corpus_submission(script: Path, opts: list[str], reason: str | None, cwd: Path) -> None:
    proc = run_sbatch(None, [*opts, "--parsable", str(script)], None, cwd)
    if script.name in EXPECTED_REJECTIONS:
        code, stderr = EXPECTED_REJECTIONS[script.name]
        assert (proc.returncode, proc.stderr) == (code, stderr)
        assert proc.stdout == ""
        return
    assert proc.returncode == 0, proc.stderr
    job_id = job_id_from_sbatch(proc.stdout)
    try:
        job = show_job(job_id)
        assert job["JobState"] == "PENDING"
        if reason is not None:
            assert job["Reason"] == reason
        assert job["WorkDir"] == str(cwd)
    finally:
        cancel(job_id)


def test_corpus_is_present() -> None:
    scripts = _corpus_scripts()
    assert len(scripts) >= 60, CORPUS_DIR
    assert set(EXPECTED_REJECTIONS) <= {p.name for p in scripts}
