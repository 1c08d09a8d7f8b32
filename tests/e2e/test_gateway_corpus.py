"""Real scripts on the embedded default: every corpus script is submitted; those accepted run
(missing commands fail as under Slurm), the others get Slurm's own refusal; and a job that asks
for an image runs in a container on Podman's Docker API.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.gateway_env import Gateway, discard_gateway, start_gateway
from tests.support.shared_data import CORPUS_DIR

CORPUS = CORPUS_DIR
PARTITIONS = [
    "normal",
    "development",
    "standard",
    "standard-g",
    "small-g",
    "gpu",
    "gputest",
    "batch",
    "compil",
    "cpu_p1",
    "quantum",
    "xyz-cluster",
    "PARTITION",
    "debug",
    "cpu",
]
# what slurmctld answers for requests this one-node site can never hold, and what sbatch
# itself says about options only site plugins define
SLURM_REFUSALS = (
    "sbatch: error: Batch job submission failed: Requested node configuration is not available\n",
    "sbatch: unrecognized option '--qpu=ibm_fez'\nTry \"sbatch --help\" for more information\n",
    "sbatch: error: This does not look like a batch script.  The first\n"
    "sbatch: error: line must start with #! followed by the path to an interpreter.\n"
    "sbatch: error: For instance: #!/bin/sh\n",
    # a GRES this site lacks (craynetwork, qpu): sbatch checks names against GresTypes
    "sbatch: error: Invalid generic resource (gres) specification\n",
    # sbatch's own GRES validation (the shifter scripts: Caldera knows `--image`)
    "sbatch: error: Failed to validate job spec. --gpus-per-task used without either --gpus "
    "or -n/--ntasks is not allowed.\nsbatch: error: Invalid generic resource (gres) "
    "specification\n",
)


def _site_config() -> str:
    parts = "\n".join(
        f'[[partitions]]\nname = "{p}"\ndefault = {str(p == "debug").lower()}\n' for p in PARTITIONS
    )
    return (
        "time_scale = 0.001\nkill_wait_s = 1\nmax_array_size = 100001\n"
        # the licences the corpus asks for (-L SCRATCH, cscratch1), as the test cluster has
        'licenses = "cscratch1:1000,SCRATCH:1000,cfs:1000,matlab:8"\n'
        '[[nodes]]\nname = "bignode"\ncpus = 256\nmemory_mb = 1000000\ngpus = 8\n'
        'features = ["gpu", "cpu", "a100", "v100", "v100-32g", "v100-16g", "gpu80", "haswell",'
        ' "knl"]\n' + parts
    )


@pytest.fixture
def big_site() -> Iterator[Gateway]:
    base = Path(tempfile.mkdtemp(prefix="caldera-corpus-", dir="/tmp"))
    gw = start_gateway(base, _site_config())
    try:
        yield gw
    finally:
        discard_gateway(gw, base)


def _corpus() -> list[Path]:
    return sorted(p for p in CORPUS.iterdir() if p.name != "SOURCES.tsv")


def test_every_corpus_script_is_submitted_and_runs_or_is_refused_as_slurm_would(
    big_site: Gateway,
):
    assert CORPUS.is_dir(), f"corpus not found at {CORPUS}"
    accepted: dict[str, int] = {}
    refused: dict[str, str] = {}
    for script in _corpus():
        # arrays of up to 1,363 tasks are cut to two tasks (the command line wins over
        # #SBATCH, as in Slurm): enough to see the script run
        short = ["--array=0-1"] if _is_array(script) else []
        r = big_site.run(["sbatch", "--parsable", *short, str(script)])
        if r.returncode == 0:
            accepted[script.name] = int(r.stdout.strip())
        else:
            refused[script.name] = r.stderr
    print(f"\ncorpus: {len(accepted)} accepted, {len(refused)} refused")
    for name, stderr in refused.items():
        assert stderr in SLURM_REFUSALS, f"{name}: {stderr}"
    assert len(accepted) >= 25
    # beyond this one-node site's size: accepted to wait, as Slurm's EnforcePartLimits=NO
    waiting = {
        name: job_id
        for name, job_id in accepted.items()
        if big_site.ok(["squeue", "-h", "-j", str(job_id), "-o", "%r"]).strip()
        in ("PartitionNodeLimit", "PartitionConfig")
    }
    if waiting:
        big_site.ok(["scancel", *map(str, waiting.values())])
    print(f"corpus: {len(waiting)} wait for more nodes than the site has")
    missing_command = 0
    for name, job_id in accepted.items():
        if name in waiting:
            continue
        final = big_site.wait(job_id, timeout=180)
        assert final["state"] in ("COMPLETED", "FAILED", "TIMEOUT"), (name, final["state"])
        status = int(final["exit_code"])
        if final["state"] == "FAILED" and status >> 8 == 127:
            missing_command += 1
            text = _outputs_of(big_site, job_id)
            if text is not None:  # None: the script sends its output to /dev/null
                assert "not found" in text or "No such file" in text, (name, text)
    print(f"corpus: {missing_command} jobs stopped on a command this machine lacks")


def _is_array(script: Path) -> bool:
    lines = script.read_text(errors="replace").splitlines()
    return any(line.startswith("#SBATCH") and "--array" in line for line in lines)


def _outputs_of(gw: Gateway, job_id: int) -> str | None:
    """What the job wrote to its stdout/stderr files (None when both go to /dev/null).
    Patterns like %n are expanded only when the file is opened, so the files are found by
    the job id in their names."""
    show = gw.ok(["scontrol", "show", "job", str(job_id)])
    paths = {
        token.split("=", 1)[1] for token in show.split() if token.startswith(("StdOut=", "StdErr="))
    }
    if paths == {"/dev/null"}:
        return None
    found = [p for p in gw.workdir.rglob(f"*{job_id}*") if p.is_file()]
    return "".join(p.read_text(errors="replace") for p in found)


def _podman_socket() -> str:
    up = Path(__file__).resolve().parents[2] / "testenv" / "containers" / "up.sh"
    r = subprocess.run(["bash", str(up)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"Podman's Docker API is required (testenv/containers): {r.stderr}"
    return r.stdout.strip().splitlines()[-1]


def test_a_job_with_an_image_runs_in_a_container_with_its_workdir_and_environment():
    sock = _podman_socket()
    base = Path(tempfile.mkdtemp(prefix="caldera-ctr-", dir="/tmp"))
    gw = start_gateway(base, f'docker_host = "unix://{sock}"\n')
    try:
        script = gw.workdir / "ctr.sh"
        script.write_text(
            "#!/bin/sh\n#SBATCH -J ctr -o ctr-%j.out\n"
            "#CALDERA --image=localhost/caldera-test:busybox\n"
            'echo "in $(hostname) job=$SLURM_JOB_ID cwd=$(pwd)"\n'
            "echo made > made-in-container.txt\n"
            "test -e /.dockerenv -o -e /run/.containerenv && echo container-marker\n"
        )
        job = gw.sbatch(str(script))
        final = gw.wait(job, timeout=180)
        assert final["state"] == "COMPLETED", final
        text = (gw.workdir / f"ctr-{job}.out").read_text()
        assert f"job={job} cwd={gw.workdir}" in text
        assert "container-marker" in text
        assert (gw.workdir / "made-in-container.txt").read_text() == "made\n"
    finally:
        discard_gateway(gw, base)
