"""The same lifecycle with Volcano placing the gangs: pods + PodGroup (mode volcano) and
one Volcano Job per gang (mode volcano-job), on the real API server with Volcano v1.10."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from gateway.model.backend import EventKind
from gateway.model.job import RankPlacement
from gateway.model.state import JobState, Reason
from k8s_bridge.backend import KubernetesBackend
from k8s_bridge.kube import CONFIGMAPS, PODGROUPS, PODS, SERVICES, VCJOBS, KubeClient
from k8s_bridge.options import GangMode
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
from tests.support.k8s_env import K8sEnv

pytestmark = pytest.mark.k8s

MODES = [GangMode.VOLCANO, GangMode.VOLCANO_JOB]


@pytest.fixture
def vkube(k8s_env_volcano: K8sEnv) -> KubeClient:
    return admin_client(k8s_env_volcano)


@pytest.fixture
def vns(k8s_env_volcano: K8sEnv) -> Iterator[str]:
    yield from new_namespace(k8s_env_volcano, "volcano")


@pytest.fixture(params=MODES, ids=[m.value for m in MODES])
def vbackend(
    request: pytest.FixtureRequest, k8s_env_volcano: K8sEnv, vns: str
) -> Iterator[KubernetesBackend]:
    b = new_backend(k8s_env_volcano, vns, mode=request.param)
    yield b
    b.close()


def volcano_state(kube: KubeClient, ns: str) -> str:
    """Pods, PodGroups and Volcano Jobs of every namespace, for a wait that timed out (a
    gang Volcano never placed: what held it back, or what else held the nodes)."""
    lines: list[str] = []
    for pod in kube.list(PODS, None)[0]:
        meta, spec, status = pod["metadata"], pod["spec"], pod.get("status", {})
        lines.append(
            f"pod {meta['namespace']}/{meta['name']} {status.get('phase')} "
            f"node={spec.get('nodeName')} scheduler={spec.get('schedulerName')}"
        )
    for group in kube.list(PODGROUPS, None)[0]:
        meta, status = group["metadata"], group.get("status", {})
        said = [c.get("message", "") for c in status.get("conditions", [])]
        lines.append(f"podgroup {meta['namespace']}/{meta['name']} {status.get('phase')} {said}")
    for vcjob in kube.list(VCJOBS, None)[0]:
        meta, status = vcjob["metadata"], vcjob.get("status", {})
        lines.append(f"vcjob {meta['namespace']}/{meta['name']} {status.get('state')}")
    return "\n".join(lines) or "(nothing)"


def pod_of(kube: KubeClient, ns: str, job_id: int, rank: int) -> str:
    items, _ = kube.list(
        PODS, ns, label_selector=f"caldera.io/job-id={job_id},caldera.io/rank={rank}"
    )
    assert len(items) == 1
    return str(items[0]["metadata"]["name"])


def test_volcano_is_detected_when_its_api_is_served(k8s_env_volcano: K8sEnv, vns: str) -> None:
    backend = new_backend(k8s_env_volcano, vns, volcano=None)
    try:
        assert backend.mode() is GangMode.VOLCANO
    finally:
        backend.close()


def test_gang_runs_through_volcano_and_completes(
    vbackend: KubernetesBackend, vkube: KubeClient, vns: str
) -> None:
    events = Events(vbackend, explain=lambda: volcano_state(vkube, vns))
    vbackend.submit(make_launch(601, nodes=3, gpus=8))
    started = events.wait(601, EventKind.STARTED)
    assert len(set(started.nodes)) == 3  # 8 GPUs each: one rank per node
    if vbackend.mode() is GangMode.VOLCANO:
        group = vkube.get(PODGROUPS, vns, "caldera-601")
        assert group is not None
        assert group["spec"]["minMember"] == 3
        pod = vkube.get(PODS, vns, "caldera-601-1")
        assert pod is not None
        assert pod["spec"]["schedulerName"] == "volcano"
    else:
        vcjob = vkube.get(VCJOBS, vns, "caldera-601")
        assert vcjob is not None
        assert vcjob["spec"]["minAvailable"] == 3
    end_rank(vkube, vns, pod_of(vkube, vns, 601, 0))
    done = events.wait(601, EventKind.FINISHED)
    assert (done.state, done.exit_code) == (JobState.COMPLETED, 0)
    events.settle()
    assert_nothing_left(vkube, vns)


def test_volcano_places_the_gang_and_started_names_the_nodes_its_pods_run_on(
    vbackend: KubernetesBackend, vkube: KubeClient, vns: str
) -> None:
    """The gateway's placement (here nodes that do not exist) is not where the job runs:
    Volcano queues and places the gang, the job is reported queued until every rank runs,
    and STARTED (then FINISHED) carries each rank's spec.nodeName and the pods' start."""
    assert vbackend.places_itself
    events = Events(vbackend, explain=lambda: volcano_state(vkube, vns))
    launch = make_launch(605, nodes=3)  # small ranks: only -N keeps them on 3 nodes
    where = tuple(RankPlacement(node=f"gw-{r}", tasks=1, cpus=1, memory_mb=0) for r in range(3))
    handed = time.time()
    vbackend.submit(replace(launch, placement=where, job=replace(launch.job, placement=where)))
    started = events.wait(605, EventKind.STARTED)
    queued = events.of(605, EventKind.PENDING)
    assert [(e.state, e.reason) for e in queued] == [(JobState.PENDING, Reason.RESOURCES)]
    assert events.seen.index(queued[0]) < events.seen.index(started)
    pods = {
        int(p["metadata"]["labels"]["caldera.io/rank"]): p
        for p in vkube.list(PODS, vns, label_selector="caldera.io/job-id=605")[0]
    }
    assert started.nodes == tuple(pods[r]["spec"]["nodeName"] for r in range(3))
    assert len(set(started.nodes)) == 3  # -N 3: three nodes, as Slurm allocates
    assert started.state is JobState.RUNNING
    assert started.started_at is not None
    assert handed <= started.started_at <= time.time()
    end_rank(vkube, vns, pod_of(vkube, vns, 605, 0))
    done = events.wait(605, EventKind.FINISHED)
    assert done.nodes == started.nodes
    events.settle()
    assert_nothing_left(vkube, vns)


def test_in_caldera_mode_the_gateway_places_and_nothing_is_reported_queued(
    k8s_env_volcano: K8sEnv, vkube: KubeClient, vns: str
) -> None:
    backend = new_backend(k8s_env_volcano, vns, mode=GangMode.CALDERA)
    try:
        assert not backend.places_itself
        events = Events(backend)
        launch = make_launch(606, nodes=2)
        where = tuple(
            RankPlacement(node=n, tasks=1, cpus=1, memory_mb=0)
            for n in ("kwok-node-05", "kwok-node-02")
        )
        backend.submit(replace(launch, placement=where, job=replace(launch.job, placement=where)))
        started = events.wait(606, EventKind.STARTED)
        assert started.nodes == ("kwok-node-05", "kwok-node-02")
        assert not events.of(606, EventKind.PENDING)
        end_rank(vkube, vns, "caldera-606-0")
        events.wait(606, EventKind.FINISHED)
        events.settle()
    finally:
        backend.close()


def test_a_failed_rank_fails_the_volcano_gang(
    vbackend: KubernetesBackend, vkube: KubeClient, vns: str
) -> None:
    events = Events(vbackend, explain=lambda: volcano_state(vkube, vns))
    vbackend.submit(make_launch(602, nodes=2))
    events.wait(602, EventKind.STARTED)
    end_rank(vkube, vns, pod_of(vkube, vns, 602, 1), exit_code=4)
    done = events.wait(602, EventKind.FINISHED)
    assert (done.state, done.exit_code) == (JobState.FAILED, 4 << 8)
    events.settle()
    assert_nothing_left(vkube, vns)


def test_cancel_removes_a_volcano_gang(
    vbackend: KubernetesBackend, vkube: KubeClient, vns: str
) -> None:
    events = Events(vbackend, explain=lambda: volcano_state(vkube, vns))
    launch = make_launch(603, nodes=2)
    vbackend.submit(launch)
    events.wait(603, EventKind.STARTED)
    vbackend.cancel(launch.job)
    assert events.wait(603, EventKind.FINISHED).state is JobState.CANCELLED
    events.settle()
    assert_nothing_left(vkube, vns)


def test_volcano_never_places_part_of_a_gang_that_does_not_fit(
    vbackend: KubernetesBackend, vkube: KubeClient, vns: str, k8s_env_volcano: K8sEnv
) -> None:
    events = Events(vbackend, explain=lambda: volcano_state(vkube, vns))
    too_big = k8s_env_volcano.nodes + 1  # one 8-GPU rank per node: one node short
    launch = make_launch(604, nodes=too_big, gpus=8)
    vbackend.submit(launch)

    def gang_exists() -> bool:
        events.pump()
        if vbackend.mode() is GangMode.VOLCANO_JOB:
            # Volcano's controller makes no pods until the whole gang can be enqueued
            return vkube.get(VCJOBS, vns, "caldera-604") is not None
        items, _ = vkube.list(PODS, vns, label_selector="caldera.io/job-id=604")
        return len(items) == too_big

    wait_until("the gang's objects", gang_exists)
    for _ in range(30):  # 3 s: several of Volcano's 1 s scheduling periods
        items, _ = vkube.list(PODS, vns, label_selector="caldera.io/job-id=604")
        assert [p["metadata"]["name"] for p in items if p["spec"].get("nodeName")] == []
        events.pump()
        time.sleep(0.1)
    vbackend.cancel(launch.job)
    events.settle()
    assert_nothing_left(vkube, vns)


def test_the_golden_manifests_are_valid_for_the_real_api_server(
    vkube: KubeClient, vns: str
) -> None:
    golden = Path(__file__).parents[1] / "unit" / "golden" / "k8s"
    files = sorted(golden.glob("*.json"))
    assert files
    resources = {
        (r.api_version, r.kind): r for r in (PODS, PODGROUPS, VCJOBS, CONFIGMAPS, SERVICES)
    }
    for path in files:
        for obj in json.loads(path.read_text()):
            obj["metadata"]["namespace"] = vns
            resource = resources[(obj["apiVersion"], obj["kind"])]
            # server-side dry run: admission and validation, nothing stored
            vkube.request(
                "POST",
                resource.path(vns),
                query=[("dryRun", "All"), ("fieldValidation", "Strict")],
                body=obj,
                what=f"{path.name}: {obj['kind']} {obj['metadata']['name']}",
            )
