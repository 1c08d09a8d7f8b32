"""KubernetesBackend on the real API server (testenv/k8s): submit, complete, fail, cancel,
requeue, rejected manifests, the bound on pending pods, rate limiting, describe().

Caldera's binder places the gangs here (schedulerName caldera); test_k8s_bridge_volcano.py
runs the same lifecycle through Volcano.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from gateway.model.backend import Backend, BackendError, EventKind
from gateway.model.cluster import NodeState
from gateway.model.state import JobState, Reason
from k8s_bridge.backend import KubernetesBackend
from k8s_bridge.kube import CONFIGMAPS, PODS, RESOURCE_QUOTAS, KubeClient
from tests.integration.test_k8s_bridge_helpers import (
    Events,
    assert_nothing_left,
    end_rank,
    kube,
    make_launch,
    new_backend,
    new_namespace,
    wait_until,
)
from tests.support.k8s_env import K8sEnv

pytestmark = pytest.mark.k8s
__all__ = ["kube"]


@pytest.fixture
def ns(k8s_env: K8sEnv) -> Iterator[str]:
    yield from new_namespace(k8s_env, "bridge")


@pytest.fixture
def backend(k8s_env: K8sEnv, ns: str) -> Iterator[KubernetesBackend]:
    b = new_backend(k8s_env, ns)
    yield b
    b.close()


def running_pods(kube: KubeClient, ns: str, job_id: int) -> list[str]:
    items, _ = kube.list(PODS, ns, label_selector=f"caldera.io/job-id={job_id}")
    return sorted(
        p["metadata"]["name"] for p in items if (p.get("status") or {}).get("phase") == "Running"
    )


def test_the_backend_implements_the_gateway_protocol(backend: KubernetesBackend) -> None:
    assert isinstance(backend, Backend)
    assert backend.name == "kwok"


def test_describe_reports_nodes_gpus_topology_and_partitions(
    backend: KubernetesBackend, k8s_env: K8sEnv
) -> None:
    state = backend.describe()
    assert state.reachable
    assert len(state.nodes) == k8s_env.nodes
    node = state.nodes[0]
    assert node.cpus == 64
    assert node.gpu_count() == 8
    assert node.switch is not None
    assert node.switch.startswith("leaf-")
    assert node.state is NodeState.IDLE
    assert "ib" in node.features
    assert state.default_partition is not None
    assert state.default_partition.name == "k8s"


def test_single_rank_job_runs_and_completes(
    backend: KubernetesBackend, kube: KubeClient, ns: str
) -> None:
    events = Events(backend)
    assert backend.submit(make_launch(101)) == "caldera-101"
    started = events.wait(101, EventKind.STARTED)
    assert started.state is JobState.RUNNING
    assert started.backend_id == "caldera-101"
    assert started.nodes[0].startswith("kwok-node-")
    end_rank(kube, ns, "caldera-101-0")
    done = events.wait(101, EventKind.FINISHED)
    assert (done.state, done.exit_code) == (JobState.COMPLETED, 0)
    events.settle()
    assert_nothing_left(kube, ns)


def test_multi_rank_gang_runs_together_and_ends_with_rank_zero(
    backend: KubernetesBackend, kube: KubeClient, ns: str
) -> None:
    events = Events(backend)
    backend.submit(make_launch(102, nodes=3, gpus=8))  # a whole node each
    started = events.wait(102, EventKind.STARTED)
    assert len(set(started.nodes)) == 3
    assert running_pods(kube, ns, 102) == ["caldera-102-0", "caldera-102-1", "caldera-102-2"]
    rank1 = kube.get(PODS, ns, "caldera-102-1")
    assert rank1 is not None
    env = {e["name"]: e["value"] for e in rank1["spec"]["containers"][0]["env"]}
    assert (env["SLURM_NODEID"], env["SLURM_PROCID"]) == ("1", "1")
    assert rank1["spec"]["nodeName"] == started.nodes[1]
    end_rank(kube, ns, "caldera-102-0")
    done = events.wait(102, EventKind.FINISHED)
    assert done.state is JobState.COMPLETED
    events.settle()
    assert_nothing_left(kube, ns)


def test_a_failed_rank_fails_the_whole_gang(
    backend: KubernetesBackend, kube: KubeClient, ns: str
) -> None:
    events = Events(backend)
    backend.submit(make_launch(103, nodes=3))
    events.wait(103, EventKind.STARTED)
    end_rank(kube, ns, "caldera-103-2", exit_code=3)
    done = events.wait(103, EventKind.FINISHED)
    assert done.state is JobState.FAILED
    assert done.exit_code == 3 << 8
    assert done.reason is Reason.NON_ZERO_EXIT_CODE
    assert done.message is not None
    assert "rank 2" in done.message
    # the other ranks are killed at once, before the gateway even acknowledged the verdict
    wait_until("ranks 0 and 1 killed", lambda: running_pods(kube, ns, 103) == [])
    events.settle()
    assert_nothing_left(kube, ns)


def test_rank_zero_failure_is_the_job_exit_code(
    backend: KubernetesBackend, kube: KubeClient, ns: str
) -> None:
    events = Events(backend)
    backend.submit(make_launch(104, nodes=2))
    events.wait(104, EventKind.STARTED)
    end_rank(kube, ns, "caldera-104-0", exit_code=2)
    done = events.wait(104, EventKind.FINISHED)
    assert (done.state, done.exit_code) == (JobState.FAILED, 2 << 8)
    events.settle()
    assert_nothing_left(kube, ns)


def test_requeue_restarts_the_gang_as_a_whole_under_new_names(
    backend: KubernetesBackend, kube: KubeClient, ns: str
) -> None:
    events = Events(backend)
    backend.submit(make_launch(105, nodes=2, requeue=True))
    events.wait(105, EventKind.STARTED)
    end_rank(kube, ns, "caldera-105-1", exit_code=1)
    lost = events.wait(105, EventKind.LOST)
    assert lost.message is not None
    assert "rank 1" in lost.message
    events.settle()
    # the gateway requeues the job (restart count 1) and starts it again
    assert backend.submit(make_launch(105, nodes=2, requeue=True, attempt=1)) == "caldera-105-r1"
    wait_until(
        "attempt 1 running",
        lambda: running_pods(kube, ns, 105) == ["caldera-105-r1-0", "caldera-105-r1-1"],
    )
    end_rank(kube, ns, "caldera-105-r1-0")
    done = events.wait(105, EventKind.FINISHED)
    assert done.state is JobState.COMPLETED
    assert done.backend_id == "caldera-105-r1"
    events.settle()
    assert_nothing_left(kube, ns)


def test_cancel_removes_every_object_of_running_and_waiting_gangs(
    backend: KubernetesBackend, kube: KubeClient, ns: str
) -> None:
    events = Events(backend)
    backend.submit(make_launch(106, nodes=2))
    events.wait(106, EventKind.STARTED)
    # a gang that can never be placed (no node is in that partition) waits unbound
    backend.submit(make_launch(107, nodes=2, partition="nowhere"))
    wait_until(
        "job 107's pods",
        lambda: len(kube.list(PODS, ns, label_selector="caldera.io/job-id=107")[0]) == 2,
    )
    for launch in (make_launch(106, nodes=2), make_launch(107, nodes=2, partition="nowhere")):
        backend.cancel(launch.job)
    for job_id in (106, 107):
        done = events.wait(job_id, EventKind.FINISHED)
        assert done.state is JobState.CANCELLED
    events.settle()
    assert_nothing_left(kube, ns)


def test_resubmitting_the_same_attempt_creates_nothing_twice(
    backend: KubernetesBackend, kube: KubeClient, ns: str
) -> None:
    launch = make_launch(108, nodes=2)
    backend.submit(launch)
    backend.submit(launch)
    # a second backend (e.g. after a gateway restart) resubmitting: 409s are success
    other = new_backend_for(backend, ns)
    try:
        assert other.submit(launch) == "caldera-108"
    finally:
        other.close()
    pods, _ = kube.list(PODS, ns, label_selector="caldera.io/job-id=108")
    assert sorted(p["metadata"]["name"] for p in pods) == ["caldera-108-0", "caldera-108-1"]
    backend.cancel(launch.job)
    Events(backend).settle()


def new_backend_for(backend: KubernetesBackend, ns: str) -> KubernetesBackend:
    return KubernetesBackend(
        cluster=backend.name, api_client=backend.client.api, volcano=False, options=backend.opts
    )


def test_a_manifest_the_server_rejects_is_a_clear_job_error(
    backend: KubernetesBackend, kube: KubeClient, ns: str
) -> None:
    bad_image = make_launch(109, nodes=2, container_image="centos:7 ")
    with pytest.raises(BackendError) as err:
        backend.submit(bad_image)
    assert not err.value.retryable
    message = str(err.value)
    assert "job 109" in message
    assert "422" in message
    assert "spec.containers[0].image" in message
    assert "must not have leading or trailing whitespace" in message
    assert_nothing_left(kube, ns)


def test_a_quota_refusal_carries_the_servers_message(
    backend: KubernetesBackend, kube: KubeClient, ns: str
) -> None:
    kube.create(
        RESOURCE_QUOTAS,
        ns,
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "gpus"},
            "spec": {"hard": {"requests.nvidia.com/gpu": "4"}},
        },
    )

    def quota_ready() -> bool:
        quota = kube.get(RESOURCE_QUOTAS, ns, "gpus")
        return bool(quota and (quota.get("status") or {}).get("hard"))

    wait_until("the quota's status", quota_ready)
    with pytest.raises(BackendError) as err:
        backend.submit(make_launch(110, nodes=2, gpus=4))
    assert "403" in str(err.value)
    assert "exceeded quota" in str(err.value)
    assert_nothing_left(kube, ns)


def test_pending_pods_are_bounded_and_further_submits_deferred(
    k8s_env: K8sEnv, kube: KubeClient, ns: str
) -> None:
    backend = new_backend(k8s_env, ns, max_pending_pods=6)
    try:
        accepted, deferred = [], []
        for job_id in range(200, 1200):  # 1,000 queued jobs that cannot be placed
            try:
                backend.submit(make_launch(job_id, partition="nowhere"))
                accepted.append(job_id)
            except BackendError as exc:
                deferred.append((job_id, exc.retryable, "limit 6" in str(exc)))
        assert accepted == list(range(200, 206))
        assert [d[0] for d in deferred] == list(range(206, 1200))
        assert all(retryable and says_why for _, retryable, says_why in deferred)
        pods, _ = kube.list(PODS, ns, label_selector="app.kubernetes.io/managed-by=caldera")
        assert len(pods) == 6
        assert backend.not_running_pods() == 6
        # a gang bigger than the bound is still admitted when nothing else waits
        for job_id in accepted:
            backend.cancel(make_launch(job_id).job)
        Events(backend).settle()
        backend.submit(make_launch(300, nodes=8, partition="nowhere"))
        backend.cancel(make_launch(300).job)
        Events(backend).settle()
    finally:
        backend.close()
    assert_nothing_left(kube, ns)


def test_the_client_is_rate_limited(k8s_env: K8sEnv, kube: KubeClient, ns: str) -> None:
    backend = new_backend(k8s_env, ns, qps=10.0, burst=5)
    try:
        backend.mode()
        taken_before = backend.limiter.taken
        started = time.monotonic()
        backend.submit(make_launch(400, nodes=12, partition="nowhere"))
        elapsed = time.monotonic() - started
        requests = backend.limiter.taken - taken_before
        assert requests >= 15  # root, env, service, 12 pods, the created mark
        # at most `burst` requests at once, then 10 a second (the bucket may be partly used)
        assert elapsed >= (requests - 5) / 10.0 * 0.9
        assert backend.limiter.waited_s > 0
        backend.cancel(make_launch(400).job)
        Events(backend).settle()
    finally:
        backend.close()
    assert_nothing_left(kube, ns)


def test_submits_from_many_threads_are_safe(
    backend: KubernetesBackend, kube: KubeClient, ns: str
) -> None:
    errors: list[BaseException] = []

    def submit(job_id: int) -> None:
        try:
            backend.submit(make_launch(job_id, nodes=2))
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=submit, args=(500 + i % 4,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    events = Events(backend)
    for job_id in range(500, 504):
        events.wait(job_id, EventKind.STARTED)
    roots, _ = kube.list(CONFIGMAPS, ns, label_selector="caldera.io/role=root")
    assert len(roots) == 4
    for job_id in range(500, 504):
        backend.cancel(make_launch(job_id).job)
    events.settle()
    assert_nothing_left(kube, ns)


def test_deleting_the_root_configmap_alone_removes_the_whole_gang(
    k8s_env: K8sEnv, kube: KubeClient, ns: str
) -> None:
    backend = new_backend(k8s_env, ns)
    try:
        events = Events(backend)
        backend.submit(make_launch(111, nodes=2))
        events.wait(111, EventKind.STARTED)
    finally:
        backend.close()  # nobody cleans up but the garbage collector
    kube.delete(CONFIGMAPS, ns, "caldera-111")
    assert_nothing_left(kube, ns, timeout=60)
