"""Smoke test of the real Kubernetes test environment (testenv/k8s).

Checks what Caldera's Kubernetes tests rely on: a real kube-apiserver answering, KWOK nodes
Ready with GPU and RDMA capacity and topology labels, pods driven through KWOK's stages
(Running, then Succeeded or Failed), RBAC between users, and Volcano gang scheduling.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.support.k8s_env import K8sEnv, k8s_env, k8s_env_volcano

pytestmark = pytest.mark.k8s

# Imported fixtures are used by name; keep them referenced for linters.
__all__ = ["k8s_env", "k8s_env_volcano"]

COMPLETE_AFTER = "kwok.caldera.io/complete-after"
EXIT_CODE = "kwok.caldera.io/exit-code"
VOLCANO_GROUP = "scheduling.k8s.io/group-name"


def wait_until(what: str, predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    """Poll `predicate` until it holds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)


def _exists(read: Callable[[], object]) -> bool:
    try:
        read()
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def create_namespace(core: client.CoreV1Api, prefix: str) -> str:
    """A fresh namespace, ready for pods once kube-controller-manager made its default
    service account (the ServiceAccount admission plugin needs it)."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    wait_until(
        "default service account",
        lambda: _exists(lambda: core.read_namespaced_service_account("default", name)),
    )
    return name


@pytest.fixture
def namespace(k8s_env: K8sEnv) -> Iterator[str]:
    """A fresh namespace, deleted afterwards (kube-controller-manager empties it)."""
    core = client.CoreV1Api(k8s_env.api_client())
    name = create_namespace(core, "smoke")
    yield name
    core.delete_namespace(name)


def make_pod(
    name: str,
    *,
    node: str | None = None,
    annotations: dict[str, str] | None = None,
    scheduler: str | None = None,
    gpus: int = 0,
) -> client.V1Pod:
    limits = {"cpu": "1", "memory": "1Gi"}
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
        limits["rdma/hca"] = str(gpus)
    container = client.V1Container(
        name="main",
        image="caldera.local/job:latest",
        resources=client.V1ResourceRequirements(limits=limits, requests=limits),
    )
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, annotations=annotations),
        spec=client.V1PodSpec(
            containers=[container],
            node_name=node,
            scheduler_name=scheduler,
            restart_policy="Never",
        ),
    )


def pod_phase(core: client.CoreV1Api, namespace: str, name: str) -> str:
    status = core.read_namespaced_pod(name, namespace).status
    return (status.phase if status else None) or ""


def pod_node(core: client.CoreV1Api, namespace: str, name: str) -> str | None:
    spec = core.read_namespaced_pod(name, namespace).spec
    return spec.node_name if spec else None


def wait_phase(core: client.CoreV1Api, namespace: str, name: str, phase: str) -> None:
    wait_until(f"{name} {phase}", lambda: pod_phase(core, namespace, name) == phase)


def terminated_exit_code(core: client.CoreV1Api, namespace: str, name: str) -> int | None:
    status = core.read_namespaced_pod(name, namespace).status
    if status is None or not status.container_statuses:
        return None
    state = status.container_statuses[0].state
    return state.terminated.exit_code if state and state.terminated else None


def test_api_server_answers_with_the_pinned_version(k8s_env: K8sEnv) -> None:
    info = client.VersionApi(k8s_env.api_client()).get_code()
    assert info.git_version == k8s_env.kubernetes_version
    assert k8s_env.server.startswith("https://127.0.0.1:")


def test_nodes_are_ready_with_gpu_rdma_capacity_and_topology(k8s_env: K8sEnv) -> None:
    core = client.CoreV1Api(k8s_env.api_client())
    nodes = core.list_node(label_selector="type=kwok").items
    assert len(nodes) == k8s_env.nodes
    for node in nodes:
        assert node.status is not None
        assert node.metadata is not None
        ready = [c.status for c in node.status.conditions or [] if c.type == "Ready"]
        assert ready == ["True"], node.metadata.name
        capacity = node.status.capacity or {}
        assert capacity["nvidia.com/gpu"] == "8"
        assert capacity["rdma/hca"] == "8"
        labels = node.metadata.labels or {}
        assert labels["topology.caldera.io/leaf"].startswith("leaf-")
        assert labels["topology.caldera.io/spine"].startswith("spine-")
    leaves = {(n.metadata.labels or {})["topology.caldera.io/leaf"] for n in nodes if n.metadata}
    assert len(leaves) == (k8s_env.nodes + 1) // 2


def test_bound_pod_runs_then_succeeds_through_kwok_stages(k8s_env: K8sEnv, namespace: str) -> None:
    core = client.CoreV1Api(k8s_env.api_client())
    pod = make_pod("ok", node="kwok-node-01", annotations={COMPLETE_AFTER: "3s"})
    core.create_namespaced_pod(namespace, pod)
    wait_phase(core, namespace, "ok", "Running")
    wait_phase(core, namespace, "ok", "Succeeded")
    assert terminated_exit_code(core, namespace, "ok") == 0


def test_pod_fails_with_the_annotated_exit_code(k8s_env: K8sEnv, namespace: str) -> None:
    core = client.CoreV1Api(k8s_env.api_client())
    pod = make_pod("bad", node="kwok-node-02", annotations={COMPLETE_AFTER: "0s", EXIT_CODE: "3"})
    core.create_namespaced_pod(namespace, pod)
    wait_phase(core, namespace, "bad", "Failed")
    assert terminated_exit_code(core, namespace, "bad") == 3


def test_default_scheduler_places_an_unbound_gpu_pod(k8s_env: K8sEnv, namespace: str) -> None:
    core = client.CoreV1Api(k8s_env.api_client())
    core.create_namespaced_pod(namespace, make_pod("sched", gpus=8))
    wait_phase(core, namespace, "sched", "Running")
    assert (pod_node(core, namespace, "sched") or "").startswith("kwok-node-")


def test_alice_cannot_read_bobs_namespace(k8s_env: K8sEnv) -> None:
    alice = client.CoreV1Api(k8s_env.api_client("alice"))
    bob = client.CoreV1Api(k8s_env.api_client("bob"))
    alice.list_namespaced_pod("alice")
    bob.list_namespaced_pod("bob")
    with pytest.raises(ApiException) as denied:
        alice.list_namespaced_pod("bob")
    assert denied.value.status == 403
    with pytest.raises(ApiException) as denied:
        bob.create_namespaced_pod("alice", make_pod("intruder"))
    assert denied.value.status == 403


def _podgroup(name: str, min_member: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"minMember": min_member, "queue": "default"},
    }


def test_volcano_schedules_a_podgroup_as_a_gang(k8s_env_volcano: K8sEnv) -> None:
    api = k8s_env_volcano.api_client()
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    ns = create_namespace(core, "gang")
    try:
        # "whole": 2 of 2 members exist; "partial": a gang of 3 with only 2 members.
        for group, size in (("whole", 2), ("partial", 3)):
            custom.create_namespaced_custom_object(
                "scheduling.volcano.sh", "v1beta1", ns, "podgroups", _podgroup(group, size)
            )
            for rank in range(2):
                pod = make_pod(
                    f"{group}-{rank}",
                    annotations={VOLCANO_GROUP: group},
                    scheduler="volcano",
                    gpus=8,
                )
                core.create_namespaced_pod(ns, pod)
        for rank in range(2):
            wait_phase(core, ns, f"whole-{rank}", "Running")
        # 8 GPUs each: the two ranks land on two different nodes.
        assert len({pod_node(core, ns, f"whole-{rank}") for rank in range(2)}) == 2
        whole = custom.get_namespaced_custom_object(
            "scheduling.volcano.sh", "v1beta1", ns, "podgroups", "whole"
        )
        assert isinstance(whole, dict)
        assert whole["status"]["phase"] == "Running"
        # The incomplete gang is never partly placed (several scheduling periods of 1 s).
        time.sleep(5)
        assert [pod_node(core, ns, f"partial-{rank}") for rank in range(2)] == [None, None]
    finally:
        core.delete_namespace(ns)
