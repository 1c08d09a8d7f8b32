"""A gang the gateway placed is handed back when its placement cannot be bound (real API
server, KWOK nodes): at once when a placed node is deleted, after `withdraw_after_s` when its
node stays full. Nothing of the withdrawn gang is left, and the same run, placed again,
runs once.
"""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace

import pytest
from kubernetes import client

from gateway.model.backend import BackendError, EventKind, Launch
from gateway.model.job import RankPlacement
from gateway.model.state import JobState, Reason
from k8s_bridge.backend import KubernetesBackend
from k8s_bridge.kube import NODES, PODS, KubeClient
from tests.integration.test_k8s_bridge_helpers import (
    Events,
    assert_nothing_left,
    end_rank,
    kube,
    leftovers,
    make_launch,
    new_backend,
    new_namespace,
    wait_until,
)
from tests.support.k8s_env import K8sEnv

pytestmark = pytest.mark.k8s
__all__ = ["kube", "make_node", "occupy"]


@pytest.fixture
def ns(k8s_env: K8sEnv) -> Iterator[str]:
    yield from new_namespace(k8s_env, "withdraw")


def placed(launch: Launch, *nodes: str) -> Launch:
    """The launch as the gateway makes it after placing one rank on each node."""
    where = tuple(RankPlacement(node=n, tasks=1, cpus=1, memory_mb=0) for n in nodes)
    return replace(launch, placement=where, job=replace(launch.job, placement=where))


def make_node(env: K8sEnv, kube: KubeClient, labels: dict[str, str]) -> str:
    """A new KWOK node like the environment's own (KWOK manages every node), Ready."""
    model = kube.get(NODES, None, "kwok-node-01")
    assert model is not None
    name = f"wd-{uuid.uuid4().hex[:6]}"
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": dict(model["metadata"].get("annotations") or {}),
            "labels": {
                **model["metadata"]["labels"],
                "kubernetes.io/hostname": name,
                **labels,
            },
        },
        "spec": {k: v for k, v in model["spec"].items() if k not in ("podCIDR", "podCIDRs")},
        "status": {
            "allocatable": copy.deepcopy(model["status"]["allocatable"]),
            "capacity": copy.deepcopy(model["status"]["capacity"]),
        },
    }
    client.CoreV1Api(env.api_client()).create_node(body)  # type: ignore[arg-type]

    def ready() -> bool:
        node = kube.get(NODES, None, name)
        conditions = ((node or {}).get("status") or {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    wait_until(f"node {name} Ready", ready, 60)
    return name


def delete_node(env: K8sEnv, name: str) -> None:
    try:
        client.CoreV1Api(env.api_client()).delete_node(name)
    except client.ApiException as exc:
        if exc.status != 404:
            raise


def occupy(kube: KubeClient, ns: str, node: str, gpus: int) -> str:
    """A pod outside Caldera bound straight to `node`, holding its GPUs."""
    name = f"foreign-{uuid.uuid4().hex[:6]}"
    limits = {"nvidia.com/gpu": str(gpus)}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {"name": "c", "image": "busybox", "resources": {"limits": limits}},
            ],
        },
    }
    kube.create(PODS, ns, pod)
    return name


def pods_of(kube: KubeClient, ns: str, job_id: int) -> list[tuple[str, str]]:
    items, _ = kube.list(PODS, ns, label_selector=f"caldera.io/job-id={job_id}")
    return sorted((p["metadata"]["name"], p["spec"].get("nodeName") or "") for p in items)


def resubmit(backend: KubernetesBackend, launch: Launch) -> str:
    """Submit the same run again as the launcher does: while the withdrawn attempt's
    objects are still going, the backend refuses (retryable, Reason Cleaning)."""
    refusals: list[BackendError] = []
    deadline = time.monotonic() + 20
    while True:
        try:
            backend_id = backend.submit(launch)
            break
        except BackendError as exc:
            refusals.append(exc)
        assert time.monotonic() < deadline, f"still refused after {len(refusals)} tries"
        backend.poll()  # the gateway keeps polling meanwhile
        time.sleep(0.2)
    assert all(e.retryable and e.waiting_reason is Reason.CLEANING for e in refusals)
    return backend_id


def test_a_gang_placed_on_a_deleted_node_is_withdrawn_and_runs_once_elsewhere(
    k8s_env: K8sEnv, kube: KubeClient, ns: str
) -> None:
    backend = new_backend(k8s_env, ns, withdraw_after_s=300.0)  # only the deletion counts
    events = Events(backend)
    doomed = make_node(k8s_env, kube, {})
    try:
        kube.patch(NODES, None, doomed, {"spec": {"unschedulable": True}})  # never bound there
        launch = make_launch(801, nodes=2)
        other = "kwok-node-01"
        backend.submit(placed(launch, doomed, other))
        wait_until("both pods created", lambda: len(pods_of(kube, ns, 801)) == 2)
        time.sleep(1.0)  # several binder passes: the gang waits for its node, unbound
        assert [n for _, n in pods_of(kube, ns, 801)] == ["", ""]
        assert not events.pump()
        delete_node(k8s_env, doomed)
        gone = events.wait(801, EventKind.WITHDRAWN, timeout=15)
        assert (gone.reason, gone.run, gone.state) == (Reason.REQ_NODE_NOT_AVAIL, 0, None)
        assert gone.message == f"node {doomed} no longer exists"
        wait_until("the withdrawn pods gone", lambda: not pods_of(kube, ns, 801), 15)
        # the gateway places the same run again: it runs there, once
        backend_id = resubmit(backend, placed(launch, "kwok-node-02", other))
        assert backend_id == "caldera-801"
        started = events.wait(801, EventKind.STARTED)
        assert started.nodes == ("kwok-node-02", other)
        assert pods_of(kube, ns, 801) == [
            ("caldera-801-0", "kwok-node-02"),
            ("caldera-801-1", other),
        ]
        end_rank(kube, ns, "caldera-801-0")
        done = events.wait(801, EventKind.FINISHED)
        assert done.state is JobState.COMPLETED
        events.settle()
        assert len(events.of(801, EventKind.STARTED)) == 1
        assert len(events.of(801, EventKind.WITHDRAWN)) == 1
        assert_nothing_left(kube, ns)
    finally:
        delete_node(k8s_env, doomed)
        backend.close()


def test_a_placement_that_stays_full_is_withdrawn_after_the_bound_then_placed_again(
    k8s_env: K8sEnv, kube: KubeClient, ns: str
) -> None:
    backend = new_backend(k8s_env, ns, withdraw_after_s=2.0)
    events = Events(backend)
    full = make_node(k8s_env, kube, {})
    try:
        occupy(kube, ns, full, gpus=8)
        launch = make_launch(802, nodes=1, gpus=8)
        submitted = time.monotonic()
        backend.submit(placed(launch, full))
        wait_until("the pod created", lambda: len(pods_of(kube, ns, 802)) == 1)
        gone = events.wait(802, EventKind.WITHDRAWN, timeout=20)
        waited = time.monotonic() - submitted
        assert waited >= 2.0
        assert gone.reason is Reason.RESOURCES
        assert gone.message is not None
        assert gone.message.startswith(f"nodes {full} lacked room for ")
        assert not events.of(802, EventKind.STARTED)
        wait_until("the withdrawn pod gone", lambda: not pods_of(kube, ns, 802), 15)
        resubmit(backend, placed(launch, "kwok-node-03"))
        started = events.wait(802, EventKind.STARTED)
        assert started.nodes == ("kwok-node-03",)
        end_rank(kube, ns, "caldera-802-0")
        assert events.wait(802, EventKind.FINISHED).state is JobState.COMPLETED
        events.settle()
        assert [k for k in leftovers(kube, ns) if "802" in k] == []
    finally:
        delete_node(k8s_env, full)
        backend.close()


def test_a_withdrawal_survives_a_gateway_restart_before_it_was_delivered(
    k8s_env: K8sEnv, kube: KubeClient, ns: str
) -> None:
    first = new_backend(k8s_env, ns, withdraw_after_s=300.0)
    launch = placed(make_launch(803, nodes=1), "no-such-node")
    first.submit(launch)

    def withdrawn() -> bool:
        gang = first.tracked().get((803, 0))
        return gang is not None and gang.verdict_saved and gang.killed

    wait_until("the withdrawal saved", withdrawn, 15)
    first.close()  # the gateway dies before it polled the event
    second = new_backend(k8s_env, ns, withdraw_after_s=300.0)
    try:
        events = second.reconcile([launch.job])
        assert [(e.kind, e.reason, e.run) for e in events] == [
            (EventKind.WITHDRAWN, Reason.REQ_NODE_NOT_AVAIL, 0)
        ]
        Events(second).settle()
        assert_nothing_left(kube, ns)
    finally:
        second.close()


def test_nodes_a_cancelled_gang_held_take_the_next_gang_at_once(
    k8s_env: K8sEnv, kube: KubeClient, ns: str
) -> None:
    """The binder assumes the pods it binds until its view shows them; a gang cancelled
    before another placement pass saw them must not hold its nodes until that expires."""
    backend = new_backend(k8s_env, ns, kill_wait_s=0)
    events = Events(backend)
    try:
        first = make_launch(804, nodes=2, gpus=8)
        backend.submit(placed(first, "kwok-node-05", "kwok-node-06"))
        events.wait(804, EventKind.STARTED)
        backend.cancel(first.job)
        wait_until("the first gang gone", lambda: not pods_of(kube, ns, 804), 15)
        second = make_launch(805, nodes=2, gpus=8)
        backend.submit(placed(second, "kwok-node-05", "kwok-node-06"))
        started = events.wait(805, EventKind.STARTED, timeout=5)  # not after 60 s
        assert started.nodes == ("kwok-node-05", "kwok-node-06")
        end_rank(kube, ns, "caldera-805-0")
        events.wait(805, EventKind.FINISHED)
        events.settle()
    finally:
        backend.close()
