"""Every change a watch saw on the pods of one namespace, for tests that must show what
happened between two samples (a pod deleted with a grace, a pod bound before another was
gone). KWOK (testenv/k8s/manifests/kwok-stages.yaml) removes a deleted pod at once, or, with
annotation `kwok.caldera.io/graceful`, only when its deletion's grace is over, as a kubelet
does for a process that traps SIGTERM.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from k8s_bridge.kube import PODS, KubeClient, KubeError
from tests.integration.test_k8s_bridge_helpers import end_rank, wait_until

__all__ = ["GRACEFUL", "PodChange", "PodHistory", "end_running", "graceful", "watching"]

GRACEFUL = "kwok.caldera.io/graceful"


@dataclass(frozen=True)
class PodChange:
    """One watch event of a Caldera pod."""

    at: float  # wall clock when the test saw it
    kind: str  # ADDED, MODIFIED, DELETED
    name: str
    job: int
    attempt: int
    rank: int
    node: str  # "" while unbound
    phase: str
    grace: int | None  # deletionGracePeriodSeconds once it is being deleted


@dataclass
class PodHistory:
    """The changes so far, and questions about them."""

    changes: list[PodChange] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def of(self, job: int, attempt: int | None = None) -> list[PodChange]:
        return [
            c
            for c in list(self.changes)
            if c.job == job and (attempt is None or c.attempt == attempt)
        ]

    def first_deletion(self, job: int, attempt: int = 0) -> PodChange | None:
        """The first sign that a pod of that run is being deleted."""
        return next((c for c in self.of(job, attempt) if c.grace is not None), None)

    def graces(self, job: int, attempt: int = 0) -> set[int]:
        """The grace periods the run's pods were first deleted with (a later delete that
        names none, or KWOK's removal, may show 0 on the last event)."""
        firsts: dict[str, int] = {}
        for c in self.of(job, attempt):
            if c.grace is not None:
                firsts.setdefault(c.name, c.grace)
        return set(firsts.values())

    def gone_at(self, job: int, attempt: int = 0) -> float:
        """When the last pod of that run was removed (inf while one is left)."""
        pods = {c.name for c in self.of(job, attempt)}
        gone = {c.name: c.at for c in self.of(job, attempt) if c.kind == "DELETED"}
        return max(gone.values()) if pods and set(gone) == pods else float("inf")

    def first_bound(self, job: int, attempt: int = 0) -> float:
        """When a pod of that run was first seen on a node (inf: never)."""
        return min((c.at for c in self.of(job, attempt) if c.node), default=float("inf"))

    def first_added(self, job: int, attempt: int) -> float:
        return min((c.at for c in self.of(job, attempt)), default=float("inf"))

    def nodes(self, job: int, attempt: int = 0) -> set[str]:
        return {c.node for c in self.of(job, attempt) if c.node}

    def bound_ranks(self, job: int) -> set[int]:
        """The ranks of the job (any run) seen on a node."""
        return {c.rank for c in self.of(job) if c.node}


def _record(kube: KubeClient, ns: str, history: PodHistory, ready: threading.Event) -> None:
    _, version = kube.list(PODS, ns)
    ready.set()
    while not history.stop.is_set():
        try:
            for event in kube.watch(PODS, ns, version, timeout_s=5):
                obj = event.get("object") or {}
                meta = obj.get("metadata") or {}
                version = str(meta.get("resourceVersion") or version)
                labels = meta.get("labels") or {}
                if "caldera.io/job-id" in labels and event.get("type") != "BOOKMARK":
                    grace = meta.get("deletionGracePeriodSeconds")
                    history.changes.append(
                        PodChange(
                            at=time.time(),
                            kind=str(event.get("type")),
                            name=str(meta.get("name")),
                            job=int(labels["caldera.io/job-id"]),
                            attempt=int(labels.get("caldera.io/attempt", "0")),
                            rank=int(labels.get("caldera.io/rank", "-1")),
                            node=str((obj.get("spec") or {}).get("nodeName") or ""),
                            phase=str((obj.get("status") or {}).get("phase") or ""),
                            grace=None if grace is None else int(grace),
                        )
                    )
                if history.stop.is_set():
                    return
        except KubeError:
            time.sleep(0.1)


@contextmanager
def watching(kube: KubeClient, ns: str) -> Iterator[PodHistory]:
    """Record the namespace's pod changes while the block runs."""
    history = PodHistory()
    ready = threading.Event()
    thread = threading.Thread(target=_record, args=(kube, ns, history, ready), daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield history
    finally:
        history.stop.set()
        thread.join(10)


def graceful(kube: KubeClient, ns: str, job: int) -> None:
    """Have KWOK keep this job's pods until their deletion's grace is over."""
    items, _ = kube.list(PODS, ns, label_selector=f"caldera.io/job-id={job}")
    for pod in items:
        body = {"metadata": {"annotations": {GRACEFUL: "true"}}}
        kube.patch(PODS, ns, str(pod["metadata"]["name"]), body)


def end_running(kube: KubeClient, ns: str, pod: str, timeout: float = 30) -> None:
    """End a rank through KWOK once its pod runs (a job shows RUNNING in the gateway as soon
    as it is placed, before its pods exist)."""

    def running() -> bool:
        obj = kube.get(PODS, ns, pod)
        return obj is not None and (obj.get("status") or {}).get("phase") == "Running"

    wait_until(f"pod {pod} running", running, timeout)
    end_rank(kube, ns, pod)
