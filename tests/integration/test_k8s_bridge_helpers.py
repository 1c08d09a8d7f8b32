"""Helpers for the Kubernetes bridge tests on the real API server (no tests in here).

A fresh namespace per test, a KubernetesBackend bound to it, Launches built like the
gateway builds them, an event collector that keeps calling poll() as the gateway does, and
ways to end a rank's pod through KWOK (patching its completion annotations).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
from kubernetes import client

from gateway.model.backend import BackendEvent, EventKind, Launch
from gateway.model.job import Job
from gateway.model.state import JobState
from gateway.model.values import GresItem
from k8s_bridge.backend import KubernetesBackend
from k8s_bridge.kube import CONFIGMAPS, PODGROUPS, PODS, SERVICES, VCJOBS, KubeClient
from k8s_bridge.options import K8sOptions
from k8s_bridge.ratelimit import TokenBucket
from tests.support.builders import make_job
from tests.support.k8s_env import K8sEnv

__all__ = [
    "COMPLETE_AFTER",
    "EXIT_CODE",
    "Events",
    "admin_client",
    "end_rank",
    "leftovers",
    "make_launch",
    "new_backend",
    "new_namespace",
    "wait_until",
]

COMPLETE_AFTER = "kwok.caldera.io/complete-after"
EXIT_CODE = "kwok.caldera.io/exit-code"
MANAGED = "app.kubernetes.io/managed-by=caldera"


def wait_until(what: str, predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    """Poll `predicate` until it holds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.1)


def admin_client(env: K8sEnv) -> KubeClient:
    """An unthrottled client for the tests' own checks."""
    return KubeClient(env.api_client(), TokenBucket(10_000, 10_000))


def new_namespace(env: K8sEnv, prefix: str) -> Iterator[str]:
    """A fresh namespace (ready for pods), deleted afterwards."""
    core = client.CoreV1Api(env.api_client())
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))

    def has_sa() -> bool:
        return bool(core.list_namespaced_service_account(name).items)

    wait_until("the namespace's default service account", has_sa)
    yield name
    core.delete_namespace(name)


def new_backend(env: K8sEnv, namespace: str, **options: Any) -> KubernetesBackend:
    """A backend for cluster `kwok` on the test API server, in `namespace`."""
    volcano = options.pop("volcano", False)
    opts = K8sOptions(namespace=namespace, **options)
    return KubernetesBackend(
        cluster="kwok",
        server=env.server,
        token=env.admin_token,
        ca_file=env.ca_file,
        volcano=volcano,
        options=opts,
    )


def make_launch(
    job_id: int,
    *,
    nodes: int = 1,
    gpus: int = 0,
    partition: str = "k8s",
    requeue: bool | None = None,
    attempt: int = 0,
    script: str = "#!/bin/sh\necho hello from $SLURM_PROCID\n",
    **spec: Any,
) -> Launch:
    """A Launch as the gateway makes it for a job it just started."""
    builder = make_job(job_id).nodes(nodes)
    if gpus:
        builder = builder.gpus(gpus)
    fields: dict[str, Any] = dict(spec)
    if requeue is not None:
        fields["requeue"] = requeue
    if partition != "k8s":
        fields["partitions"] = (partition,)
    job: Job = builder.spec(**fields).build()
    job = replace(
        job,
        state=JobState.RUNNING,
        partition=partition,
        cluster="kwok",
        restart_count=attempt,
        user="alice",
        uid=1000,
        gid=1000,
        group="alice",
    )
    return Launch(
        job=job,
        script=script,
        environment={"HOME": "/home/alice", "LANG": "C.UTF-8"},
        placement=(),
        partition=partition,
        cluster="kwok",
    )


def gpu_gres(count: int) -> tuple[GresItem, ...]:
    """--gres=gpu:count."""
    return (GresItem("gpu", None, count),)


class Events:
    """Calls poll() like the gateway's loop does and keeps every event."""

    def __init__(
        self, backend: KubernetesBackend, explain: Callable[[], str] | None = None
    ) -> None:
        self.backend = backend
        self.seen: list[BackendEvent] = []
        self.explain = explain  # what the cluster looked like, for a wait that timed out

    def pump(self) -> list[BackendEvent]:
        """One poll()."""
        new = self.backend.poll()
        self.seen.extend(new)
        return new

    def of(self, job_id: int, kind: EventKind | None = None) -> list[BackendEvent]:
        """Events of a job (of one kind)."""
        return [e for e in self.seen if e.job_id == job_id and (kind is None or e.kind is kind)]

    def wait(self, job_id: int, kind: EventKind, timeout: float = 30.0) -> BackendEvent:
        """The first event of that kind for that job (polling until it comes)."""

        def arrived() -> bool:
            self.pump()
            return bool(self.of(job_id, kind))

        try:
            wait_until(f"{kind.value} of job {job_id}", arrived, timeout)
        except AssertionError as exc:
            if self.explain is None:
                raise
            raise AssertionError(f"{exc}; the cluster then:\n{self.explain()}") from None
        return self.of(job_id, kind)[0]

    def settle(self, timeout: float = 20.0) -> None:
        """Poll until the backend tracks nothing (every verdict acknowledged and cleaned)."""

        def idle() -> bool:
            self.pump()
            return not self.backend.tracked()

        wait_until("the backend to clean up", idle, timeout)


def end_rank(kube: KubeClient, namespace: str, pod: str, exit_code: int = 0) -> None:
    """Make KWOK end a running rank now with this exit code."""
    kube.patch(
        PODS,
        namespace,
        pod,
        {"metadata": {"annotations": {COMPLETE_AFTER: "0s", EXIT_CODE: str(exit_code)}}},
    )


def leftovers(kube: KubeClient, namespace: str) -> list[str]:
    """Every object of Caldera's jobs still in the namespace (kind/name); the namespace's
    launcher ConfigMap (k8s_bridge/launch.py) belongs to no job and stays."""
    out: list[str] = []
    for resource in (PODS, CONFIGMAPS, SERVICES, PODGROUPS, VCJOBS):
        if resource.group and not kube.served(f"{resource.group}/{resource.version}"):
            continue
        jobs_only = f"{MANAGED},caldera.io/role!=launcher"
        items, _ = kube.list(resource, namespace, label_selector=jobs_only)
        out.extend(f"{resource.kind}/{o['metadata']['name']}" for o in items)
    return sorted(out)


def assert_nothing_left(kube: KubeClient, namespace: str, timeout: float = 20.0) -> None:
    """Wait until no Caldera object remains (the garbage collector works in seconds)."""
    try:
        wait_until(f"nothing left in {namespace}", lambda: not leftovers(kube, namespace), timeout)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; still there: {leftovers(kube, namespace)}") from None


@pytest.fixture
def kube(k8s_env: K8sEnv) -> KubeClient:
    """The tests' own client."""
    return admin_client(k8s_env)


__all__ += ["assert_nothing_left", "gpu_gres", "kube"]
