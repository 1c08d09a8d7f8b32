"""Reconciliation on the real API server: the API server killed and restarted (through the
testenv scripts) mid-submission and mid-run, and a gateway restart (a new backend
reconciling the jobs the gateway believes running). Nothing lost, nothing duplicated."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from gateway.model.backend import EventKind
from gateway.model.state import JobState
from k8s_bridge.backend import KubernetesBackend
from k8s_bridge.kube import CONFIGMAPS, PODS, KubeClient, KubeError
from tests.integration.test_k8s_bridge_helpers import (
    Events,
    admin_client,
    assert_nothing_left,
    end_rank,
    make_launch,
    new_backend,
    new_namespace,
    wait_until,
)
from tests.support.k8s_env import K8sEnv, ensure_up

pytestmark = pytest.mark.k8s


@pytest.fixture
def rns(k8s_env: K8sEnv) -> Iterator[str]:
    yield from new_namespace(k8s_env, "restart")


def kill_api_server(env: K8sEnv) -> None:
    """SIGKILL the API server (a crash), and wait until it no longer answers."""
    pid = int((env.base_dir / "run" / "kube-apiserver.pid").read_text().strip())
    os.kill(pid, signal.SIGKILL)
    kube = admin_client(env)

    def down() -> bool:
        try:
            kube.request("GET", "/readyz")
        except KubeError as exc:
            return exc.unreachable
        return False

    wait_until("the API server to be gone", down, 15)


def restart_api_server(env: K8sEnv) -> None:
    """up.sh starts whatever is not running (here: the API server)."""
    ensure_up(volcano=env.volcano, nodes=env.nodes)


def pods_of(kube: KubeClient, ns: str, job_id: int) -> list[str]:
    items, _ = kube.list(PODS, ns, label_selector=f"caldera.io/job-id={job_id}")
    return sorted(p["metadata"]["name"] for p in items)


def test_api_server_restart_mid_submission_and_mid_run_loses_and_duplicates_nothing(
    k8s_env: K8sEnv, rns: str
) -> None:
    kube = admin_client(k8s_env)
    # slow creation down (10 requests a second) so the crash lands inside a submission
    backend = new_backend(k8s_env, rns, qps=10.0, burst=4)
    events = Events(backend)
    try:
        backend.submit(make_launch(801, nodes=2))
        events.wait(801, EventKind.STARTED)
        big: list[str] = []
        submitter = threading.Thread(
            target=lambda: big.append(backend.submit(make_launch(802, nodes=24)))
        )
        submitter.start()
        wait_until("part of job 802 created", lambda: len(pods_of(kube, rns, 802)) >= 3, 20)
        kill_api_server(k8s_env)
        submitter.join(60)
        assert big == ["caldera-802"]  # accepted; the rest is created once the server is back
        # while the server is down: a new submission is accepted (deferred) ...
        assert backend.submit(make_launch(803, nodes=2)) == "caldera-803"
        # ... and nothing is mistaken for an ended job
        for _ in range(10):
            events.pump()
            time.sleep(0.2)
        assert [e.kind for e in events.seen] == [EventKind.STARTED]
        restart_api_server(k8s_env)
        events.wait(802, EventKind.STARTED, 60)
        events.wait(803, EventKind.STARTED, 60)
        assert pods_of(kube, rns, 802) == sorted(f"caldera-802-{r}" for r in range(24))
        assert pods_of(kube, rns, 803) == ["caldera-803-0", "caldera-803-1"]
        roots, _ = kube.list(CONFIGMAPS, rns, label_selector="caldera.io/role=root")
        assert sorted(r["metadata"]["name"] for r in roots) == [
            "caldera-801",
            "caldera-802",
            "caldera-803",
        ]
        assert events.of(801) == events.of(801, EventKind.STARTED)  # 801 ran on untouched
        for job_id in (801, 802, 803):
            end_rank(kube, rns, f"caldera-{job_id}-0")
            done = events.wait(job_id, EventKind.FINISHED)
            assert done.state is JobState.COMPLETED
        for job_id in (801, 802, 803):
            assert len(events.of(job_id, EventKind.FINISHED)) == 1
        events.settle()
        assert_nothing_left(kube, rns)
    finally:
        backend.close()


def test_a_restarted_gateway_reconciles_running_ended_lost_and_orphaned_jobs(
    k8s_env: K8sEnv, rns: str
) -> None:
    kube = admin_client(k8s_env)
    before = new_backend(k8s_env, rns)
    events = Events(before)
    launches = {job_id: make_launch(job_id, nodes=2) for job_id in (811, 812, 813)}
    for launch in launches.values():
        before.submit(launch)
    for job_id in launches:
        events.wait(job_id, EventKind.STARTED)
    # job 811 ends while the gateway is away; the old backend stops without reporting it
    end_rank(kube, rns, "caldera-811-0", exit_code=5)
    time.sleep(1.0)
    before.close()
    ghost = make_launch(815, nodes=2)  # the gateway thinks it runs; the cluster never had it
    after: KubernetesBackend = new_backend(k8s_env, rns)
    try:
        believed = [launches[811].job, launches[812].job, ghost.job]  # 813 ended long ago
        got = after.reconcile(believed)
        by_job = {(e.job_id, e.kind): e for e in got}
        ended = by_job[(811, EventKind.FINISHED)]
        assert (ended.state, ended.exit_code) == (JobState.FAILED, 5 << 8)
        assert (812, EventKind.STARTED) in by_job
        assert (812, EventKind.FINISHED) not in by_job
        assert by_job[(815, EventKind.LOST)].message is not None
        wait_until("job 813's objects deleted", lambda: not pods_of(kube, rns, 813))
        again = Events(after)
        end_rank(kube, rns, "caldera-812-0")
        assert again.wait(812, EventKind.FINISHED).state is JobState.COMPLETED
        again.settle()
        assert_nothing_left(kube, rns)
    finally:
        after.close()
