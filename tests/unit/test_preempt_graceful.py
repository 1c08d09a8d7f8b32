"""A preemption's GraceTime on a backend that ends runs gracefully (Kubernetes): the
capability is resolved once, the preemption hands the backend the grace in wall seconds
(GraceTime x time_scale) instead of a SIGTERM through cancel, the Kubernetes backend
deletes exactly the run's pods with that grace (k8s_bridge/graceful.py), and a requeued run
is not created while a pod of the graced one still runs."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from types import SimpleNamespace
from typing import Any, cast

import pytest

from containers.backend import LocalBackend
from gateway.backend.capabilities import Capabilities, EndsGracefully, capabilities_of
from gateway.control.preemption import Preempter
from gateway.model.backend import BackendError
from gateway.model.job import Job
from gateway.model.state import JobState
from gateway.policy.preempt_rules import Mode, PreemptConfig
from k8s_bridge.backend import KubernetesBackend
from k8s_bridge.graceful import GracefulEnd, earlier_run_left, grace_period_s
from k8s_bridge.kube import PODS, KubeClient, KubeError, Resource
from k8s_bridge.lifecycle import PodState
from k8s_bridge.names import GangNames
from k8s_bridge.objects import GangObjects
from tests.support.builders import make_job

Obj = dict[str, Any]


@pytest.mark.parametrize(
    ("wall", "seconds"),
    [(6.000000000000001, 6), (3.0, 3), (2.5, 3), (0.05, 1), (0.0, 1), (120.0, 120)],
)
def test_the_grace_period_is_whole_seconds_never_shorter_and_never_zero(
    wall: float, seconds: int
) -> None:
    assert grace_period_s(wall) == seconds


def test_only_the_kubernetes_backend_ends_runs_gracefully() -> None:
    assert issubclass(KubernetesBackend, EndsGracefully)
    assert not issubclass(LocalBackend, EndsGracefully)  # it signals: SIGTERM via cancel

    class Graceful:
        def end_gracefully(self, job: Job, grace_s: float) -> None: ...

    graceful = Graceful()
    assert capabilities_of(cast(Any, graceful)).ends_gracefully is graceful
    assert capabilities_of(cast(Any, object())).ends_gracefully is None


class _Client:
    def __init__(self, fail: KubeError | None = None) -> None:
        self.calls: list[tuple[Resource, str, str, int | None]] = []
        self.fail = fail

    def delete_collection(
        self, resource: Resource, namespace: str, label_selector: str, grace_s: int | None = None
    ) -> None:
        if self.fail is not None:
            raise self.fail
        self.calls.append((resource, namespace, label_selector, grace_s))


class _Backend(GracefulEnd):
    def __init__(self, client: _Client) -> None:
        self.name = "real"
        self.namespace = "ns"
        self.client = cast(Any, client)
        self.objects = GangObjects(self.client, "ns", "real", cast(Any, None), kill_wait_s=2)


def test_the_runs_pods_are_deleted_with_the_grace_as_their_own() -> None:
    client = _Client()
    job = replace(make_job(7).build(), restart_count=2)
    _Backend(client).end_gracefully(job, 6.000000000000001)
    ((resource, namespace, sel, grace),) = client.calls
    assert (resource, namespace, grace) == (PODS, "ns", 6)
    labels = set(sel.split(","))
    assert {"caldera.io/job-id=7", "caldera.io/attempt=2"} <= labels  # this run only


def test_a_delete_the_api_server_refuses_is_a_backend_error() -> None:
    down = KubeError("no answer", status=0, retryable=True)
    with pytest.raises(BackendError) as info:
        _Backend(_Client(down)).end_gracefully(make_job(7).build(), 3.0)
    assert info.value.retryable


class _Recorder:
    """A backend: what it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, int, object]] = []

    def cancel(self, job: Job, signal: int | None = None, batch_only: bool = False) -> None:
        self.asked.append(("cancel", job.job_id, signal))

    def end_gracefully(self, job: Job, grace_s: float) -> None:
        self.asked.append(("end_gracefully", job.job_id, grace_s))


async def _commit(batch: object) -> None:
    return None


def _choose(graceful: bool, time_scale: float) -> tuple[Preempter, _Recorder]:
    """One preemption of job 1 (QOS low: CANCEL, GraceTime 60) by job 2."""
    victim = make_job(1).state(JobState.RUNNING).build()
    victim = replace(victim, qos="low")
    backend = _Recorder()
    caps = Capabilities(ends_gracefully=backend if graceful else None)
    gw = SimpleNamespace(
        jobs={1: victim},
        clusters={},
        caps={},
        config=SimpleNamespace(job_requeue=True, time_scale=time_scale),
        capabilities=lambda job: caps,
        backend_for=lambda job: backend,
        clock=lambda: 1000.0,
        ending_run=lambda job: (job.job_id, job.restart_count),
        committer=SimpleNamespace(commit=_commit),
    )
    gw.remember = lambda job: gw.jobs.__setitem__(job.job_id, job)
    low = SimpleNamespace(preempt_mode="cancel", grace_time_s=60, preempt_exempt_s=None)
    state = SimpleNamespace(qos={"low": low})
    pre = Preempter(cast(Any, gw), PreemptConfig("preempt/qos"), lambda: cast(Any, state))
    asyncio.run(pre._choose(2, 1))
    return pre, backend


def test_a_preemption_hands_the_grace_in_wall_seconds_to_a_graceful_backend() -> None:
    pre, backend = _choose(graceful=True, time_scale=0.05)
    assert backend.asked == [("end_gracefully", 1, pytest.approx(3.0))]  # no cancel
    victim = pre.victims[1]
    assert victim.mode is Mode.CANCEL
    assert victim.deadline == pytest.approx(1003.0)


def test_elsewhere_the_grace_begins_with_sigcont_and_sigterm_through_cancel() -> None:
    # slurmctld's _preempt_signal: SIGCONT, then SIGTERM, to the job's steps
    pre, backend = _choose(graceful=False, time_scale=1.0)
    assert backend.asked == [("cancel", 1, 18), ("cancel", 1, 15)]
    assert pre.victims[1].deadline == pytest.approx(1060.0)
    # PreemptTime now; EndTime the grace's end, 60 job seconds away (recorded on the burst
    # cluster: EndTime = PreemptTime + GraceTime while the victim runs its grace)
    assert pre.gw.jobs[1].preempt_time == 1000.0
    assert pre.gw.jobs[1].end_time == 1060.0


def _pod(attempt: int, phase: str, deleting: bool = False) -> PodState:
    return PodState(
        name=f"caldera-7-r{attempt}-0" if attempt else "caldera-7-0",
        uid="u",
        job_id=7,
        attempt=attempt,
        rank=0,
        phase=phase,
        deleting=deleting,
    )


@pytest.mark.parametrize(
    ("pods", "left"),
    [
        ([_pod(0, "Running", deleting=True)], 0),  # in its grace: its processes still run
        ([_pod(0, "Pending")], 0),
        ([_pod(0, "Failed", deleting=True), _pod(1, "Running")], None),  # killed: ended
        ([_pod(0, "Succeeded")], None),
        ([_pod(2, "Running")], None),  # a later run is none of attempt 1's business
        ([], None),
    ],
)
def test_a_later_run_waits_for_every_pod_of_an_earlier_run_to_end(
    pods: list[PodState], left: int | None
) -> None:
    found = earlier_run_left(pods, 1)
    assert (found.attempt if found is not None else None) == left


class _Listing:
    """A client whose only pods are `pods`; it records what it is asked to create."""

    def __init__(self, pods: list[Obj]) -> None:
        self.pods = pods
        self.created: list[str] = []

    def list(self, resource: Resource, namespace: str, label_selector: str = "") -> Any:
        assert resource is PODS
        assert "caldera.io/job-id=7" in label_selector.split(",")
        return self.pods, "1"

    def create_object(self, namespace: str, obj: Obj) -> Any:
        self.created.append(str(obj["metadata"]["name"]))
        raise KubeError("stop here", status=0, retryable=True)


def _pod_obj(attempt: int, phase: str) -> Obj:
    labels = {"caldera.io/job-id": "7", "caldera.io/rank": "0", "caldera.io/attempt": str(attempt)}
    return {
        "metadata": {"name": f"p{attempt}", "uid": "u", "labels": labels},
        "status": {"phase": phase},
    }


def test_a_requeued_run_is_not_created_while_the_preempted_one_runs_its_grace() -> None:
    gang = SimpleNamespace(manifests=SimpleNamespace(names=GangNames("caldera", 7, 1)))
    client = _Listing([_pod_obj(0, "Running")])
    objects = GangObjects(cast(Any, client), "ns", "real", cast(Any, None), kill_wait_s=2)
    with pytest.raises(KubeError) as info:
        objects.create(cast(Any, gang))
    assert info.value.retryable  # the controller tries again
    assert "p0 of run 0" in str(info.value)
    assert client.created == []  # nothing of run 1 exists yet

    client.pods = [_pod_obj(0, "Failed")]  # killed at the end of its grace
    with pytest.raises(KubeError, match="stop here"):
        objects.create(cast(Any, gang))
    assert client.created  # creation went ahead


def test_a_collection_delete_sends_its_grace_in_the_body() -> None:
    """The API server reads DeleteOptions from the body when there is one: a grace in the
    query alone is ignored (the pods then got KillWait, seen on the kubelet nodes)."""
    asked: list[dict[str, Any]] = []
    kube = KubeClient.__new__(KubeClient)

    def request(*args: object, **kw: Any) -> dict[str, Any]:
        asked.append(kw)
        return {}

    kube.request = request  # type: ignore[method-assign]
    kube.delete_collection(PODS, "ns", "a=b", grace_s=6)
    ((call,),) = [asked]
    assert call["body"]["gracePeriodSeconds"] == 6
    assert call["query"] == [("labelSelector", "a=b")]
