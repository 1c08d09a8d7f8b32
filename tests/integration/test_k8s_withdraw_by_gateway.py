"""The gateway takes a run back (`KubernetesBackend.withdraw`, for bursting) on the real API
server with KWOK nodes: True only when the run had not started and its objects are gone on
the API server; False, and the run kept, once it started; a retryable BackendError when the
API server does not answer. The race loops withdraw while Caldera's binder (or Volcano's
scheduler) is binding the same gang, and a watch of every pod update checks the answer
against what really happened: after True no rank 0 pod was ever bound, after False the run
goes on and ends once.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest

from gateway.backend.capabilities import capabilities_of
from gateway.model.backend import BackendError, EventKind, Launch
from gateway.model.job import RankPlacement
from gateway.model.state import JobState
from k8s_bridge.backend import KubernetesBackend
from k8s_bridge.kube import PODS, KubeClient
from k8s_bridge.options import GangMode, K8sOptions
from tests.integration.test_k8s_bridge_helpers import (
    Events,
    admin_client,
    assert_nothing_left,
    end_rank,
    leftovers,
    make_launch,
    new_backend,
    new_namespace,
    wait_until,
)
from tests.integration.test_k8s_withdraw import occupy
from tests.support.k8s_env import K8sEnv
from tests.support.pod_watch import PodHistory, watching

pytestmark = pytest.mark.k8s


@pytest.fixture
def watched(k8s_env_volcano: K8sEnv) -> Iterator[tuple[str, KubeClient, PodHistory]]:
    """A namespace, the tests' client and the history of its pods (a watch from the start)."""
    for ns in new_namespace(k8s_env_volcano, "gwwd"):
        kube = admin_client(k8s_env_volcano)
        with watching(kube, ns) as history:
            yield ns, kube, history


def _placed(launch: Launch, *nodes: str) -> Launch:
    where = tuple(RankPlacement(node=n, tasks=1, cpus=1, memory_mb=0) for n in nodes)
    return replace(launch, placement=where, job=replace(launch.job, placement=where))


def _pods(kube: KubeClient, ns: str, job_id: int) -> list[tuple[int, str]]:
    items, _ = kube.list(PODS, ns, label_selector=f"caldera.io/job-id={job_id}")
    return sorted(
        (int(p["metadata"]["labels"]["caldera.io/rank"]), p["spec"].get("nodeName") or "")
        for p in items
    )


def test_a_gang_that_cannot_bind_is_withdrawn_and_the_same_run_runs_once_later(
    k8s_env_volcano: K8sEnv, watched: tuple[str, KubeClient, PodHistory]
) -> None:
    ns, kube, history = watched
    backend = new_backend(k8s_env_volcano, ns, withdraw_after_s=300.0)
    events = Events(backend)
    try:
        caps = capabilities_of(backend)  # the gateway's routing finds it as a capability
        assert caps.withdraws is backend
        assert not caps.places_itself  # Caldera's mode: the gateway places
        foreign = occupy(kube, ns, "kwok-node-08", gpus=8)
        launch = make_launch(901, nodes=2, gpus=8)
        backend.submit(_placed(launch, "kwok-node-08", "kwok-node-01"))  # waits, unbound
        wait_until("both pods created", lambda: len(_pods(kube, ns, 901)) == 2)
        time.sleep(0.5)  # binder passes: the gang waits for room on kwok-node-08
        assert backend.withdraw(launch.job) is True
        assert leftovers(kube, ns) == []  # confirmed on the API server, at once
        kube.delete(PODS, ns, foreign, grace_s=0)
        assert (901, 0) not in backend.tracked()
        time.sleep(1.0)  # binder passes: nothing of it comes back, nothing is reported
        assert not events.pump()
        assert leftovers(kube, ns) == []
        assert history.bound_ranks(901) == set()
        # the same run again (placed where it fits): it runs, once
        backend.submit(_placed(launch, "kwok-node-02", "kwok-node-01"))
        started = events.wait(901, EventKind.STARTED)
        assert started.nodes == ("kwok-node-02", "kwok-node-01")
        assert backend.withdraw(launch.job) is False  # started: kept
        assert _pods(kube, ns, 901) == [(0, "kwok-node-02"), (1, "kwok-node-01")]
        end_rank(kube, ns, "caldera-901-0")
        assert events.wait(901, EventKind.FINISHED).state is JobState.COMPLETED
        events.settle()
        assert len(events.of(901, EventKind.STARTED)) == 1
        assert_nothing_left(kube, ns)
    finally:
        backend.close()


def test_withdraw_raises_a_retryable_error_when_the_api_server_does_not_answer() -> None:
    backend = KubernetesBackend(
        cluster="gone",
        server="https://127.0.0.1:9",  # nothing listens there
        token="t",
        options=K8sOptions(mode=GangMode.CALDERA, request_timeout_s=2.0),
        start=False,
    )
    try:
        with pytest.raises(BackendError) as err:
            backend.withdraw(make_launch(902).job)
        assert err.value.retryable
        assert "not withdrawn" in str(err.value)
    finally:
        backend.close()


# Caldera's binder (its controller thread binds), Volcano's scheduler with a PodGroup, and a
# Volcano Job: another process binds, at any moment
@pytest.mark.parametrize("mode", [GangMode.CALDERA, GangMode.VOLCANO, GangMode.VOLCANO_JOB])
def test_withdraw_racing_the_binding_never_withdraws_a_started_run(
    k8s_env_volcano: K8sEnv, watched: tuple[str, KubeClient, PodHistory], mode: GangMode
) -> None:
    """Caldera's mode: each gang is placed on a node held by a pod outside Caldera, which is
    deleted from 100 ms before to 30 ms after withdraw() is called, so the binder binds at
    about that moment (never during withdraw(), which holds the controller).
    The Volcano modes: withdrawn 0-4 s after the submission, across Volcano's binding."""
    ns, kube, history = watched
    backend = new_backend(k8s_env_volcano, ns, mode=mode, withdraw_after_s=300.0, kill_wait_s=0)
    events = Events(backend)
    rng = random.Random(5)
    outcomes: dict[int, bool] = {}
    # the delays sweep the moment of binding (later in the Volcano Job mode, whose
    # controller makes the pods first), so both answers come up
    delays = (0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.4, 2.0, 2.6, 3.2, 4.0)
    try:
        for i, delay in enumerate(delays):
            job_id = 910 + i
            launch = make_launch(job_id, nodes=2, gpus=8)
            if mode is GangMode.CALDERA:  # the room appears just before withdraw()
                foreign = occupy(kube, ns, "kwok-node-03", gpus=8)
                time.sleep(0.3)  # the binder's watch has it: the gang waits for it to go
                backend.submit(_placed(launch, "kwok-node-03", "kwok-node-04"))
                wait_until("the pods created", lambda: len(_pods(kube, ns, job_id)) == 2)  # noqa: B023
                # -100 ms .. +30 ms around the call: the binder (a tick after the watch
                # sees the room) and withdraw() (which holds the controller) race
                offset = -0.1 + i * 0.012 + rng.uniform(-0.002, 0.002)
                free = threading.Timer(max(offset, 0.0), kube.delete, (PODS, ns, foreign))
                free.start()
                time.sleep(max(-offset, 0.0))
            else:
                backend.submit(launch)
                time.sleep(delay + rng.uniform(0.0, 0.05))
            withdrawn = outcomes[job_id] = backend.withdraw(launch.job)
            if mode is GangMode.CALDERA:
                free.join()
            if withdrawn:  # gone on the API server when withdraw() answers
                assert _pods(kube, ns, job_id) == []
                assert not [o for o in leftovers(kube, ns) if f"caldera-{job_id}" in o]
            else:
                started = events.wait(job_id, EventKind.STARTED)
                assert len(started.nodes) == 2
                end_rank(kube, ns, _rank0(kube, ns, job_id))
                assert events.wait(job_id, EventKind.FINISHED).state is JobState.COMPLETED
        events.settle(timeout=60)
        for job_id, withdrawn in outcomes.items():
            bound = history.bound_ranks(job_id)
            if withdrawn:  # never bound; nothing reported but that it waited in a queue
                assert 0 not in bound, f"job {job_id}: rank 0 was bound"
                assert {e.kind for e in events.of(job_id)} <= {EventKind.PENDING}
            else:
                assert bound == {0, 1}
                assert len(events.of(job_id, EventKind.STARTED)) == 1
        assert_nothing_left(kube, ns, timeout=60)
        assert set(outcomes.values()) == {True, False}, outcomes  # both sides of the race
    finally:
        backend.close()


def _rank0(kube: KubeClient, ns: str, job_id: int) -> str:
    items, _ = kube.list(PODS, ns, label_selector=f"caldera.io/job-id={job_id},caldera.io/rank=0")
    assert len(items) == 1
    return str(items[0]["metadata"]["name"])
