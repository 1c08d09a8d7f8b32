"""Creating and deleting the objects of a gang on the API server (idempotent).

Creation: the root ConfigMap first (its uid makes the owner references), then the other
objects, the pods in parallel, then the root is marked `created`. Every create is
create-if-absent, so a creation interrupted by an API server restart is finished by simply
running it again. Deletion: the Volcano Job (its pods go with it), the pods by label, the
PodGroup, the Service, then the ConfigMaps; the owner references to the root make the
garbage collector remove anything missed (deleting the root alone removes the gang).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from k8s_bridge.gang import ANN_CREATED, Gang, Verdict, decode_verdict, encode_verdict
from k8s_bridge.graceful import earlier_run_left
from k8s_bridge.kube import (
    CONFIGMAPS,
    PODGROUPS,
    PODS,
    SERVICES,
    VCJOBS,
    KubeClient,
    KubeError,
    Resource,
)
from k8s_bridge.launch import launcher_configmap, launcher_name, stale
from k8s_bridge.lifecycle import PodState, parse_pod
from k8s_bridge.names import (
    LABEL_ATTEMPT,
    LABEL_CLUSTER,
    LABEL_JOB,
    LABEL_MANAGED,
    MANAGED_BY,
    label_value,
    selector,
)

__all__ = ["GangObjects"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]


class GangObjects:
    """The API calls that make and remove a gang's objects in one namespace."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        cluster: str,
        pool: ThreadPoolExecutor,
        kill_wait_s: int,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.cluster = cluster
        self.pool = pool
        self.kill_wait_s = kill_wait_s
        self._launchers: set[str] = set()  # launcher ConfigMaps known to be current

    def job_selector(self, job_id: int, attempt: int | None = None) -> str:
        """The label selector of a job's objects (of one attempt)."""
        labels = {
            LABEL_MANAGED: MANAGED_BY,
            LABEL_CLUSTER: label_value(self.cluster),
            LABEL_JOB: str(job_id),
        }
        if attempt is not None:
            labels[LABEL_ATTEMPT] = str(attempt)
        return selector(labels)

    # --- creation -------------------------------------------------------------------

    def create(self, gang: Gang) -> Verdict | None:
        """Create whatever of the gang is missing; a verdict already on the root (the
        attempt ended before: a retried submission) is returned and nothing is created."""
        manifests = gang.manifests
        if manifests.names.attempt > 0:
            self._earlier_runs_ended(manifests.names.job_id, manifests.names.attempt)
        self._ensure_launcher(manifests.names.prefix)
        root, _ = self.client.create_object(self.namespace, manifests.root)
        meta = root.get("metadata") or {}
        gang.root_uid = str(meta.get("uid"))
        annotations = meta.get("annotations") or {}
        verdict = decode_verdict(annotations)
        if verdict is not None:
            gang.created = True
            gang.verdict_saved = True
            return verdict
        if annotations.get(ANN_CREATED) == "true":
            gang.created = True
            return None
        owned = manifests.owned_by(gang.root_uid)
        for obj in owned.children():
            if obj["kind"] != "Pod":
                self.client.create_object(self.namespace, obj)
        errors = [e for e in self.pool.map(self._create_quietly, owned.pods) if e is not None]
        if errors:
            hard = [e for e in errors if not e.retryable]
            raise hard[0] if hard else errors[0]
        self.client.patch(
            CONFIGMAPS,
            self.namespace,
            manifests.names.root,
            {"metadata": {"annotations": {ANN_CREATED: "true"}}},
        )
        gang.created = True
        gang.last_error = None
        return None

    def _earlier_runs_ended(self, job_id: int, attempt: int) -> None:
        """A retryable KubeError while a pod of an earlier run of the job may still run (a
        preempted run in its grace, graceful.py): a job never runs twice at once."""
        items, _ = self.client.list(PODS, self.namespace, label_selector=self.job_selector(job_id))
        left = earlier_run_left((p for o in items if (p := parse_pod(o)) is not None), attempt)
        if left is not None:
            raise KubeError(
                f"job {job_id}: run {attempt} waits until pod {left.name} of run "
                f"{left.attempt} has ended",
                status=409,
                reason="Cleaning",
                retryable=True,
            )

    def _ensure_launcher(self, prefix: str) -> None:
        """The namespace's launcher ConfigMap (launch.py) exists, with this gateway's code."""
        name = launcher_name(prefix)
        if name in self._launchers:
            return
        body = launcher_configmap(prefix, self.namespace, self.cluster)
        obj, created = self.client.create_object(self.namespace, body)
        if not created and stale(obj):
            self.client.patch(CONFIGMAPS, self.namespace, name, {"data": body["data"]})
        self._launchers.add(name)

    def _create_quietly(self, obj: Obj) -> KubeError | None:
        try:
            self.client.create_object(self.namespace, obj)
        except KubeError as exc:
            return exc
        return None

    def save_verdict(self, gang: Gang, verdict: Verdict) -> None:
        """Record how the attempt ended on its root (before anything is killed)."""
        self.client.patch(
            CONFIGMAPS,
            self.namespace,
            gang.names.root,
            {"metadata": {"annotations": encode_verdict(verdict)}},
        )
        gang.verdict_saved = True

    # --- removal --------------------------------------------------------------------

    def kill(self, gang: Gang, pods: list[PodState], down: Collection[str] = ()) -> None:
        """Stop what still runs of an ended gang; the rank that decided stays as record.
        Pods on `down` nodes (NotReady) are removed at once (grace 0): no kubelet will
        confirm their end, and the API server would keep them Terminating until the node
        returns; the kubelet kills their containers when it does."""
        names = gang.names
        if gang.manifests.volcano_job is not None:  # its pods go with it, unless orphaned
            self.client.delete(VCJOBS, self.namespace, names.podgroup)
        keep = gang.status.rank if gang.status is not None else None
        by_rank = {p.rank: p for p in pods}
        for rank in range(gang.ranks):
            pod = by_rank.get(rank)
            if pod is not None and pod.node in down and not pod.terminal:
                self.client.delete(PODS, self.namespace, names.pod(rank), grace_s=0)
                continue
            if pod is not None and (pod.terminal or pod.deleting):
                continue
            if rank == keep and pod is not None:
                continue
            self.client.delete(PODS, self.namespace, names.pod(rank), grace_s=self.kill_wait_s)

    def end_at_deadline(self, gang: Gang, pods: list[PodState], now: float) -> None:
        """The time limit's backstop (gang.over_limit): the gang's running pods get an
        activeDeadlineSeconds that is already over, so their kubelets end them as
        DeadlineExceeded (TIMEOUT), SIGTERM then SIGKILL after the pods' grace (KillWait).
        Not set at creation: the API server refuses to raise it, and a time limit can be
        raised while the job runs."""
        for pod in pods:
            if pod.terminal or pod.deleting or pod.started is None:
                continue
            passed = max(1, math.ceil(now - pod.started))
            try:
                self.client.patch(
                    PODS, self.namespace, pod.name, {"spec": {"activeDeadlineSeconds": passed}}
                )
            except KubeError as exc:  # gone, or refused: the verdict's backstop follows
                if exc.retryable:
                    raise
                log.info("pod %s: activeDeadlineSeconds not set: %s", pod.name, exc)

    def delete(self, gang: Gang, quiet: bool = False) -> None:
        """Delete the whole gang, each object explicitly (the owner references are the
        safety net: the garbage collector may lag, or its controller may be down)."""
        names = gang.names
        sel = self.job_selector(names.job_id, names.attempt)
        try:
            if gang.manifests.volcano_job is not None:
                self.client.delete(VCJOBS, self.namespace, names.podgroup)
            self.client.delete_collection(PODS, self.namespace, sel)
            if gang.manifests.podgroup is not None:
                self.client.delete(PODGROUPS, self.namespace, names.podgroup)
            elif gang.manifests.volcano_job is not None:
                # Volcano's controller made this one (`<job>-<uid>`, our labels copied); the
                # garbage collector only sees it once it has discovered the CRD (up to 30 s)
                self._delete_found(PODGROUPS, sel)
            if gang.manifests.service is not None:
                self.client.delete(SERVICES, self.namespace, names.service)
            self.client.delete_collection(CONFIGMAPS, self.namespace, sel)
        except KubeError:
            if not quiet:
                raise

    def delete_by_job(self, job_id: int, attempt: int | None = None, quiet: bool = True) -> None:
        """Delete a job's objects found by label (a job this backend does not track)."""
        sel = self.job_selector(job_id, attempt)
        try:
            self._delete_found(VCJOBS, sel)
            self.client.delete_collection(PODS, self.namespace, sel)
            self._delete_found(PODGROUPS, sel)
            self._delete_found(SERVICES, sel)
            self.client.delete_collection(CONFIGMAPS, self.namespace, sel)
        except KubeError as exc:
            if not quiet:
                raise
            log.warning("deleting objects of job %s: %s", job_id, exc)

    def _delete_found(self, resource: Resource, sel: str) -> None:
        """Delete one by one what the selector finds (kinds without delete-collection here)."""
        for obj in self._list_quiet(resource, sel):
            self.client.delete(resource, self.namespace, obj["metadata"]["name"])

    def _list_quiet(self, resource: Resource, sel: str) -> list[Obj]:
        try:
            items, _ = self.client.list(resource, self.namespace, label_selector=sel)
        except KubeError as exc:
            if exc.status == 404:  # Volcano's API is not served here
                return []
            raise
        return items
