"""Time limits of Caldera jobs on real kubelet nodes (testenv/kubelet), in an image with
python3 (rank 0 runs the launcher's init, k8s_bridge/pod_init.py, which enforces the limit):
SIGTERM at the limit, SIGKILL after KillWait, TIMEOUT, and `scontrol update TimeLimit=` of
a job whose pods run (the tests in test_gateway_kubelet.py run an image without python3,
where the gateway's backstop asks the kubelet to end the pods). Time limits at a quarter
(-t 1 is 15 s), KillWait 2 s."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from k8s_bridge.kube import KubeClient
from tests.integration.test_k8s_bridge_helpers import admin_client, assert_nothing_left, wait_until
from tests.support.gateway_env import Gateway, discard_gateway, start_gateway
from tests.support.kubelet_env import KubeletEnv
from tests.support.kubelet_gateway import cluster_config, job_namespace, user_home, user_tree

pytestmark = pytest.mark.kubelet


@pytest.fixture
def ns(kubelet_env: KubeletEnv) -> Iterator[str]:
    yield from job_namespace(kubelet_env, "gw-limit")


@pytest.fixture
def kube(kubelet_env: KubeletEnv) -> KubeClient:
    return admin_client(kubelet_env.k8s)


@pytest.fixture
def base() -> Iterator[Path]:
    yield from user_tree("caldera-e2e-limit-")


@pytest.fixture
def home(base: Path) -> Path:
    return user_home(base)


@pytest.fixture
def gw(kubelet_env: KubeletEnv, ns: str, base: Path) -> Iterator[Gateway]:
    config = cluster_config(
        kubelet_env, ns, base, image=kubelet_env.mpi_image, cluster="time_scale = 0.25\n"
    )
    gw = start_gateway(base / "gw", config)
    try:
        yield gw
    finally:
        discard_gateway(gw)


def test_scontrol_update_timelimit_reaches_running_pods_raised_and_lowered(
    gw: Gateway, kubelet_env: KubeletEnv, kube: KubeClient, ns: str, home: Path
) -> None:
    """`scontrol update TimeLimit=` of a job on Kubernetes: raised (-t 1 -> 2: 15 -> 30 s
    here) right after submission, so it usually reaches the pods as they start, and
    lowered (-t 4 -> 1: 60 -> 15 s) once the job runs, counted from its start as Slurm
    counts it. Each job gets SIGTERM at its new limit, SIGKILL KillWait later, TIMEOUT."""
    script = (
        "up() { cut -d' ' -f1 /proc/uptime; }; trap 'echo TERM $(up) >>{log}'  TERM; "
        "while :; do echo alive $(up) >>{log}; sleep 0.2; done"
    )
    part = kubelet_env.partition
    raised = gw.sbatch("-p", part, "-t", "1", "--wrap", script.replace("{log}", "raised"),
                       cwd=home, user="tester")  # fmt: skip
    gw.ok(["scontrol", "update", f"JobId={raised}", "TimeLimit=2"])
    lowered = gw.sbatch("-p", part, "-t", "4", "--wrap", script.replace("{log}", "lowered"),
                        cwd=home, user="tester")  # fmt: skip
    wait_until("the second job running", (home / "lowered").exists, timeout=60)
    gw.ok(["scontrol", "update", f"JobId={lowered}", "TimeLimit=1"], user="tester")
    for job, name, minutes in ((raised, "raised", 2), (lowered, "lowered", 1)):
        gw.wait(job, timeout=90)
        show = gw.ok(["scontrol", "show", "job", str(job)])
        assert re.search(r"\bJobState=TIMEOUT Reason=TimeLimit\b", show), show
        assert f"TimeLimit=00:0{minutes}:00" in show
        limit_s = minutes * 15  # time_scale 0.25
        lines = [line.split() for line in (home / name).read_text().splitlines()]
        term = [float(t) for what, t in lines if what == "TERM"]
        alive = [float(t) for what, t in lines if what == "alive"]
        assert len(term) == 1, (name, lines[-5:])
        assert limit_s - 2 <= term[0] - alive[0] <= limit_s + 10, name
        assert 1.5 <= alive[-1] - term[0] <= 6, name  # KillWait (2 s), then killed
        said = (home / f"slurm-{job}.out").read_text()  # the init's line, not the backstop's
        assert re.search(rf"\*\*\* JOB {job} ON \S+ CANCELLED AT \S+ DUE TO TIME LIMIT", said)
    assert_nothing_left(kube, ns)
