"""A 3-node MPI job (srun --mpi=pmix and mpirun) and a container job, through the backend."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.model.state import JobState
from slurm_plugin.backend import SlurmBackend
from slurm_plugin.config import ContainerConfig
from slurm_plugin.container import archive_name
from tests.integration.test_slurm_backend import (
    backend_for,
    cancel_all_of,
    config,
    launch,
    shared_workdir,
)
from tests.support.slurm_jobs import EventLog
from tests.support.slurm_stack import SlurmStack

pytestmark = pytest.mark.slurm

_IDS = itertools.count(4000)


@pytest.fixture
def workdir(slurm_cluster: SlurmStack) -> Iterator[Path]:
    yield from shared_workdir(slurm_cluster)


@pytest.fixture
def backend(slurm_cluster: SlurmStack) -> Iterator[SlurmBackend]:
    yield from backend_for(slurm_cluster)


IMAGE = "localhost/caldera-slurm-test:busybox"
MARKER = "caldera slurm test image"


def test_a_three_node_mpi_job_runs_with_srun_pmix_and_mpirun(
    backend: SlurmBackend, workdir: Path, slurm_cluster: SlurmStack
) -> None:
    log = EventLog(backend)
    jid = next(_IDS)
    hello = slurm_cluster.mpi_hello
    job = launch(
        jid,
        f"srun --mpi=pmix {hello}\necho ---\nmpirun {hello}",
        workdir,
        user="tester",
        nodes_min=3,
        ntasks_per_node=1,
    )
    backend.submit(job)
    running = log.state(jid, JobState.RUNNING)
    assert len(running.nodes) == 3
    done = log.finished(jid)
    out = (workdir / f"slurm-{jid}.out").read_text()
    assert done.state is JobState.COMPLETED, out
    srun_part, mpirun_part = out.split("---\n")
    for part in (srun_part, mpirun_part):
        lines = sorted(part.splitlines())
        # "rank R/3 on HOST sum 3": an allreduce over ranks on three different nodes
        assert [line.split()[1] for line in lines] == ["0/3", "1/3", "2/3"], out
        assert all(line.endswith("sum 3") for line in lines), out
        assert {line.split()[3] for line in lines} == set(running.nodes), out


def _podman(*args: str, env: dict[str, str]) -> None:
    subprocess.run(["podman", *args], env=env, check=True, capture_output=True, text=True)


@pytest.fixture(scope="module")
def image_dir(slurm_cluster: SlurmStack) -> Iterator[Path]:
    """A tiny busybox image, imported locally (no registry) and saved as an archive that
    the job's rootless podman loads on the node."""
    busybox = shutil.which("busybox") or "/bin/busybox"
    assert Path(busybox).exists(), "busybox is needed to build the test image"
    out = Path(tempfile.mkdtemp(prefix="images-", dir=slurm_cluster.jobs_dir))
    out.chmod(0o755)
    conf = out / "containers.conf"
    conf.write_text(
        '[containers]\ndefault_ulimits = ["nofile=20000:20000", "nproc=20000:20000"]\n'
        '[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\nevents_logger = "file"\n'
    )
    conf.chmod(0o644)
    env = {**os.environ, "CONTAINERS_CONF": str(conf)}
    build = Path(tempfile.mkdtemp(prefix="rootfs-"))
    try:
        root = build / "root"
        for d in ("bin", "etc", "proc", "sys", "dev", "tmp"):
            (root / d).mkdir(parents=True)
        (root / "tmp").chmod(0o1777)
        shutil.copy(busybox, root / "bin" / "busybox")
        for applet in ("sh", "cat", "id", "pwd", "echo", "ls", "hostname"):
            (root / "bin" / applet).symlink_to("busybox")
        (root / "etc" / "caldera-marker").write_text(MARKER + "\n")
        (root / "etc" / "passwd").write_text(
            "root:x:0:0::/:/bin/sh\ntester:x:1001:1001::/:/bin/sh\n"
        )
        tar = build / "rootfs.tar"
        subprocess.run(["tar", "-C", str(root), "-cf", str(tar), "."], check=True)
        _podman("import", "--change", 'CMD ["/bin/sh"]', str(tar), IMAGE, env=env)
        archive = out / archive_name(IMAGE)
        _podman("save", "-o", str(archive), IMAGE, env=env)
        archive.chmod(0o644)
    finally:
        shutil.rmtree(build, ignore_errors=True)
    yield out
    shutil.rmtree(out, ignore_errors=True)


def test_a_job_that_asks_for_an_image_runs_in_it_on_the_node(
    slurm_cluster: SlurmStack, workdir: Path, image_dir: Path
) -> None:
    containers = ContainerConfig(
        containers_conf=str(image_dir / "containers.conf"), image_archive_dir=str(image_dir)
    )
    b = SlurmBackend(config(slurm_cluster, containers=containers))
    log = EventLog(b)
    jid = next(_IDS)
    try:
        script = 'cat /etc/caldera-marker; id -u; pwd; echo "job=$CALDERA_JOB_ID"; exit 5'
        b.submit(launch(jid, script, workdir, user="tester", container_image=IMAGE))
        done = log.finished(jid)
        out = (workdir / f"slurm-{jid}.out").read_text()
        assert (done.state, done.exit_code) == (JobState.FAILED, 5 << 8), out
        assert out.splitlines()[-4:] == [MARKER, "1001", str(workdir), f"job={jid}"], out
    finally:
        cancel_all_of(b)
