"""Jobs with an image run in a container through the Docker API (real Podman, local image).

The socket is CALDERA_DOCKER_HOST or DOCKER_HOST when set, else the one that
testenv/containers/up.sh starts (it also builds localhost/caldera-test:busybox without any
registry). These tests never skip: without Podman they fail and say how to install it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.model.backend import EventKind
from gateway.model.job import exit_code_pair
from gateway.model.state import JobState
from tests.integration.test_local_backend_support import (
    NODE,
    Env,
    finish,
    make_launch,
    temporary_env,
    wait_for,
    wait_until,
)

pytestmark = pytest.mark.containers


@pytest.fixture
def local_env() -> Iterator[Env]:
    yield from temporary_env()


REPO = Path(__file__).resolve().parents[2]
IMAGE = os.environ.get("CALDERA_TEST_IMAGE", "localhost/caldera-test:busybox")


@pytest.fixture(scope="module")
def docker_host() -> str:
    host = os.environ.get("CALDERA_DOCKER_HOST") or os.environ.get("DOCKER_HOST")
    if not host:
        if shutil.which("podman") is None:
            pytest.fail(
                "podman is not installed: run testenv/containers/install.sh (as root) "
                "or set CALDERA_DOCKER_HOST to a Docker API socket"
            )
        proc = subprocess.run(
            [str(REPO / "testenv" / "containers" / "up.sh")],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if proc.returncode != 0:
            pytest.fail(f"testenv/containers/up.sh failed:\n{proc.stdout}{proc.stderr}")
        host = "unix://" + proc.stdout.strip().splitlines()[-1]
    import docker

    client = docker.DockerClient(base_url=host)
    try:
        client.ping()
        client.images.get(IMAGE)
    except Exception as exc:  # noqa: BLE001 - any failure here is a set-up failure
        pytest.fail(
            f"Docker API at {host} unusable or image {IMAGE} missing "
            f"(testenv/containers/up.sh builds it): {exc}"
        )
    finally:
        client.close()
    return host


def test_a_container_job_runs_in_its_workdir_with_the_jobs_env_and_uid(
    local_env: Env, docker_host: str
) -> None:
    backend = local_env.backend(docker_host=docker_host)
    script = (
        '#!/bin/sh\necho "$(id -u):$(id -g) $(pwd) $FOO $SLURM_JOB_ID '
        '$SLURM_JOB_NODELIST"\necho made > made.txt\necho oops >&2\nexit 0\n'
    )
    launch = make_launch(
        local_env, script, [f"--container-image={IMAGE}"], user="tester", submit_env={"FOO": "bar"}
    )
    event = finish(backend, launch, timeout=60)
    assert event.state is JobState.COMPLETED
    out = (local_env.work / f"slurm-{launch.job.job_id}.out").read_text()
    assert out == f"1001:1001 {local_env.work} bar {launch.job.job_id} {NODE}\noops\n"
    made = local_env.work / "made.txt"
    assert made.read_text() == "made\n"
    assert made.stat().st_uid == 1001


def test_a_container_jobs_exit_code_is_recorded(local_env: Env, docker_host: str) -> None:
    backend = local_env.backend(docker_host=docker_host)
    launch = make_launch(local_env, "#!/bin/sh\nexit 7\n", [f"--image={IMAGE}"])
    event = finish(backend, launch, timeout=60)
    assert event.state is JobState.FAILED
    assert exit_code_pair(event.exit_code) == (7, 0)


def test_container_mounts_are_honoured(local_env: Env, docker_host: str) -> None:
    data = local_env.root / "data"
    data.mkdir()
    (data / "in.txt").write_text("mounted\n")
    data.chmod(0o755)
    backend = local_env.backend(docker_host=docker_host)
    launch = make_launch(
        local_env,
        "#!/bin/sh\ncat /data/in.txt\ntouch /data/x || echo ro\n",
        [f"--container-image={IMAGE}", f"--container-mounts={data}:/data:ro"],
    )
    event = finish(backend, launch, timeout=60)
    assert event.state is JobState.COMPLETED
    out = (local_env.work / f"slurm-{launch.job.job_id}.out").read_text()
    assert out.startswith("mounted\n")
    assert "ro\n" in out


def test_a_container_job_over_its_time_limit_times_out(local_env: Env, docker_host: str) -> None:
    backend = local_env.backend(docker_host=docker_host, kill_wait=1.0)
    launch = make_launch(local_env, "#!/bin/sh\nsleep 60\n", [f"--image={IMAGE}", "-t", "1"])
    event = finish(backend, launch, timeout=60)
    assert event.state is JobState.TIMEOUT
    out = (local_env.work / f"slurm-{launch.job.job_id}.out").read_text()
    assert "DUE TO TIME LIMIT" in out


def test_a_container_job_can_be_cancelled(local_env: Env, docker_host: str) -> None:
    backend = local_env.backend(docker_host=docker_host, kill_wait=1.0)
    launch = make_launch(local_env, "#!/bin/sh\necho up\nsleep 60\n", [f"--image={IMAGE}"])
    backend.submit(launch)
    out = local_env.work / f"slurm-{launch.job.job_id}.out"
    wait_until(lambda: out.exists() and "up" in out.read_text(), timeout=60)
    backend.cancel(launch.job)
    wait_for(backend, launch.job.job_id, timeout=60)
    states = [e.state for e in backend.poll() if e.kind is EventKind.FINISHED]
    assert states == [JobState.CANCELLED]


def test_a_container_job_over_its_memory_is_out_of_memory(local_env: Env, docker_host: str) -> None:
    backend = local_env.backend(docker_host=docker_host)
    script = "#!/bin/sh\nx=$(head -c 200000000 /dev/zero | tr '\\0' a)\necho survived\n"
    launch = make_launch(local_env, script, [f"--image={IMAGE}", "--mem=32M"], memory_mb=32)
    event = finish(backend, launch, timeout=60)
    assert event.state is JobState.OUT_OF_MEMORY
    assert exit_code_pair(event.exit_code) == (0, 125)
