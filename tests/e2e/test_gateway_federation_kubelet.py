"""Bursting to Kubernetes for real: home (the gateway's local site) is full, so a user's job
goes to the real kubelet nodes (testenv/kubelet), runs there in a pod, and its output is in
the user's submit directory as it would have been at home.

The home site's partition has the kubelet nodes' partition name, so both clusters offer it;
the kubelet cluster's filesystem map is the tree the user submits from (a hostPath at the
same path on the nodes), which makes the cluster eligible for jobs submitted there.
"""

from __future__ import annotations

import pwd
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from k8s_bridge.kube import KubeClient
from tests.integration.test_k8s_bridge_helpers import admin_client, assert_nothing_left
from tests.support.gateway_env import Gateway, discard_gateway, start_gateway
from tests.support.kubelet_env import KubeletEnv
from tests.support.kubelet_gateway import cluster_config, job_namespace, user_home, user_tree

pytestmark = [pytest.mark.kubelet, pytest.mark.federation]


@pytest.fixture
def ns(kubelet_env: KubeletEnv) -> Iterator[str]:
    yield from job_namespace(kubelet_env, "gw-fedkl")


@pytest.fixture
def base() -> Iterator[Path]:
    yield from user_tree("caldera-e2e-fedkl-")


@pytest.fixture
def gw(kubelet_env: KubeletEnv, ns: str, base: Path) -> Iterator[Gateway]:
    part = kubelet_env.partition
    top = (
        'cluster_name = "home"\n'
        '[[nodes]]\nname = "fedklhome"\ncpus = 2\nmemory_mb = 2000\n'
        f'[[partitions]]\nname = "{part}"\ndefault = true\n'
    )
    config = cluster_config(kubelet_env, ns, base, top=top)
    config += '[routing]\nhome = "home"\nmargin = "30s"\n'
    gw = start_gateway(base / "gw", config)
    try:
        yield gw
    finally:
        gw.run(["scancel", "-u", "root"])
        gw.run(["scancel", "-u", "tester"])
        discard_gateway(gw)


def test_a_full_home_bursts_to_the_kubelet_nodes_and_the_output_is_in_the_submit_directory(
    gw: Gateway, kubelet_env: KubeletEnv, ns: str, base: Path
) -> None:
    home = user_home(base)
    blocker = gw.sbatch("-t", "10", "-c", "2", "-o", "/dev/null", "--wrap", "sleep 300")
    gw.wait(blocker, states=("RUNNING",), timeout=60)
    job = gw.sbatch(
        "-t",
        "5",
        "-o",
        "burst-%j.out",
        "--wrap",
        "echo host=$(hostname); echo dir=$(pwd); echo uid=$(id -u)",
        cwd=home,
        user="tester",
    )
    final = gw.wait(job, timeout=120)
    assert final["state"] == "COMPLETED", final
    assert final["cluster"] == "real"
    lines = dict(
        line.split("=", 1) for line in (home / f"burst-{job}.out").read_text().splitlines()
    )
    assert lines["dir"] == str(home)
    assert lines["uid"] == str(pwd.getpwnam("tester").pw_uid)
    assert lines["host"] != socket.gethostname()  # the pod's, not this machine's
    shown = gw.ok(["scontrol", "show", "job", str(job)])
    assert "FedOrigin=home FedViableSiblings=home,real FedActiveSiblings=real" in shown
    assert "Routing=burst: real starts now, home (home) in " in shown
    node = gw.ok(["sacct", "-j", str(job), "-X", "-P", "-n", "-o", "NodeList"]).strip()
    assert node in {n.name for n in kubelet_env.nodes}, node
    kube: KubeClient = admin_client(kubelet_env.k8s)
    assert_nothing_left(kube, ns)
    gw.ok(["scancel", str(blocker)])
