"""A gang the gateway placed on a Kubernetes node that is then deleted before the gang was
bound: the backend hands it back, the gateway places the same run again and it runs once,
on the node that is there (real gateway, real API server, KWOK nodes).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import pytest

from k8s_bridge.kube import PODS, KubeClient
from tests.integration.test_k8s_bridge_helpers import (
    assert_nothing_left,
    end_rank,
    kube,
    new_namespace,
    wait_until,
)
from tests.integration.test_k8s_withdraw import delete_node, make_node, occupy
from tests.support.gateway_env import Gateway, running_gateway
from tests.support.k8s_env import K8sEnv

pytestmark = pytest.mark.k8s
__all__ = ["kube"]


@pytest.fixture
def ns(k8s_env: K8sEnv) -> Iterator[str]:
    yield from new_namespace(k8s_env, "gwwd")


@pytest.fixture
def k8s_gateway(k8s_env: K8sEnv, ns: str) -> Iterator[Gateway]:
    config = (
        "agents = false\n"
        "[kubernetes]\n"
        "[[kubernetes.cluster]]\n"
        'name = "kwok"\n'
        f'kubeconfig = "{k8s_env.admin_kubeconfig}"\n'
        "volcano = false\n"
        f'namespace = "{ns}"\n'
        "withdraw_after_s = 300\n"  # only the deletion can hand the gang back in this test
    )
    with running_gateway(config, "caldera-e2e-k8s-wd-") as gw:
        yield gw


def _pod(kube: KubeClient, ns: str, name: str) -> tuple[str, str] | None:
    pod = kube.get(PODS, ns, name)
    if pod is None:
        return None
    return (pod["spec"].get("nodeName") or "", (pod.get("status") or {}).get("phase") or "")


def test_a_gang_whose_node_is_deleted_before_binding_runs_once_on_another_node(
    k8s_gateway: Gateway, k8s_env: K8sEnv, kube: KubeClient, ns: str
) -> None:
    gw = k8s_gateway
    part = f"wd{uuid.uuid4().hex[:5]}"
    labels = {"caldera.io/partition": part}
    first = make_node(k8s_env, kube, labels)
    second = ""
    try:
        # a pod outside Caldera holds the node's GPUs: the gateway does not see it, places
        # the job there, and the binder waits for room that does not come
        occupy(kube, ns, first, gpus=8)
        wait_until(
            f"partition {part} in sinfo",
            lambda: gw.ok(["sinfo", "-h", "-p", part, "-o", "%D"]).strip() == "1",
            30,
        )
        job = gw.sbatch("-p", part, "-N", "1", "--gres=gpu:8", "--wrap", "srun hostname")
        rank0 = f"caldera-{job}-0"
        wait_until("the gang created", lambda: _pod(kube, ns, rank0) is not None, 30)
        assert _pod(kube, ns, rank0) == ("", "Pending")
        second = make_node(k8s_env, kube, labels)
        delete_node(k8s_env, first)
        wait_until(
            f"rank 0 running on {second}",
            lambda: _pod(kube, ns, rank0) == (second, "Running"),
            60,
        )
        wait_until("the job RUNNING", lambda: gw.job(job)["state"] == "RUNNING", 30)
        show = gw.ok(["scontrol", "show", "job", str(job)])
        assert re.search(r"\bRestarts=0\b", show)  # handed back, not requeued
        assert re.search(rf"\bNodeList={second}\b", show)
        end_rank(kube, ns, rank0)
        gw.wait(job)
        acct = gw.ok(["sacct", "-j", str(job), "-X", "-P", "-n", "-D", "-o", "State,NodeList"])
        assert acct.strip() == f"COMPLETED|{second}"  # one run only
        assert_nothing_left(kube, ns)
    finally:
        delete_node(k8s_env, first)
        if second:
            delete_node(k8s_env, second)
