"""Handing back a gang the gateway placed when its placement cannot be bound.

The binder binds a gateway-placed gang exactly where the gateway put it (it never re-places).
When that placement can no longer be had - a placed node was deleted (at once), or the nodes
stay NotReady, cordoned or full (pods outside Caldera) for `withdraw_after_s` - the backend
withdraws the attempt instead of letting it wait forever: a WITHDRAWN verdict goes through
the usual verdict path (event to the gateway, verdict saved on the root ConfigMap so a
restarted gateway learns it too, pods deleted, every object removed once the gateway has the
event), and the gateway puts the job back to PENDING, same run, to be placed again.

Never twice, never a partial gang: only a gang none of whose pods was ever bound is
withdrawn, checked against the API server itself (not the informer's cache) just before the
verdict is set. Bindings are posted only by the controller thread that decides withdrawals,
and a gang with a verdict is never bound again, so no binding can race the withdrawal.
A new submission of the same run is refused (retryable, Reason Cleaning) until every object
of the withdrawn attempt is gone, so the new gang never meets the old one's objects.

`withdraw_attempt` is the other direction, the gateway taking a run back (bursting: the job
starts elsewhere). What "started" means, per mode, and so when it answers False:
- Caldera's mode: any rank's pod is bound (a bound pod is the kubelet's; Caldera's binder is
  the only one that binds, and the backend holds its controller, the only caller of the
  binder, for the whole withdrawal, so no Binding is in flight while it checks).
- the Volcano modes and kube-scheduler's: another scheduler binds at any moment, so the
  commit point is rank 0's pod (the batch script runs only there): it is deleted with a
  precondition on the resourceVersion read while it was unbound, and a Binding changes that
  version, so either the delete wins (the script never runs: True) or the pod was bound
  first (False: the job is kept). A pod of the attempt already Running/Succeeded/Failed is
  started too. A Volcano Job is deleted first with orphaned pods, so its controller creates
  or recreates none meanwhile.
Then every object of the attempt is deleted (pods without grace: none ran the script) and the
API server (never the informer cache) must show no pod and no ConfigMap of it left; asked
again after a timeout there, it finds rank 0 gone and finishes the deletion.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from gateway.model.backend import BackendError, EventKind
from gateway.model.state import Reason
from k8s_bridge.gang import Gang, Verdict
from k8s_bridge.inventory import NodeInfo
from k8s_bridge.kube import CONFIGMAPS, PODS, VCJOBS, KubeClient, KubeError
from k8s_bridge.names import LABEL_RANK, GangNames
from k8s_bridge.objects import GangObjects
from k8s_bridge.options import GangMode
from k8s_bridge.states import WITHDRAWN

__all__ = ["Withdrawals", "is_withdrawn", "resubmitted", "withdraw_attempt"]

log = logging.getLogger(__name__)


def is_withdrawn(gang: Gang) -> bool:
    """Whether the gang was handed back (its objects may still be going away)."""
    return gang.verdict is not None and gang.verdict.kind is EventKind.WITHDRAWN


def resubmitted(gang: Gang, cluster: str) -> str:
    """The backend id for a submission of an attempt the backend has, unless that attempt
    was withdrawn and its objects are not all gone yet (the new gang would find them)."""
    if is_withdrawn(gang):
        raise BackendError(
            f"cluster {cluster}: job {gang.names.job_id} was withdrawn from its nodes and "
            "its objects are still being deleted",
            retryable=True,
            waiting_reason=Reason.CLEANING,
        )
    return gang.backend_id


class Withdrawals:
    """Decides which gateway-placed gangs waiting for their nodes are handed back."""

    def __init__(self, client: KubeClient, objects: GangObjects, after_s: float) -> None:
        self.client = client
        self.objects = objects
        self.after_s = after_s
        self._unfit_since: dict[tuple[int, int], float] = {}

    def due(
        self, waiting: Iterable[Gang], nodes: Mapping[str, NodeInfo], mono: float
    ) -> list[tuple[Gang, Verdict]]:
        """The gangs to withdraw now among those whose placement did not fit this pass
        (`waiting`: gateway-placed, not placed by this pass), each with its verdict."""
        out: list[tuple[Gang, Verdict]] = []
        seen: set[tuple[int, int]] = set()
        for gang in waiting:
            if gang.bound or gang.nodes is not None or len(gang.hint) != gang.ranks:
                continue  # bindings were posted (or it is not the gateway's placement)
            seen.add(gang.key)
            since = self._unfit_since.setdefault(gang.key, mono)
            verdict = self._verdict(gang, nodes, mono - since)
            if verdict is not None:
                out.append((gang, verdict))
        for key in set(self._unfit_since) - seen:
            del self._unfit_since[key]
        return [(g, v) for g, v in out if self._unbound(g)]

    def _verdict(self, gang: Gang, nodes: Mapping[str, NodeInfo], waited: float) -> Verdict | None:
        placed = sorted(set(gang.hint))
        missing = [n for n in placed if n not in nodes]
        if missing:
            return _withdrawn(Reason.REQ_NODE_NOT_AVAIL, f"node {missing[0]} no longer exists")
        if waited < self.after_s:
            return None
        down = [n for n in placed if not nodes[n].ready or nodes[n].unschedulable]
        if down:
            what = "not ready" if not nodes[down[0]].ready else "cordoned"
            return _withdrawn(
                Reason.REQ_NODE_NOT_AVAIL,
                f"node {down[0]} {what} for {waited:.0f}s; placed again",
            )
        return _withdrawn(
            Reason.RESOURCES,
            f"nodes {','.join(placed)} lacked room for {waited:.0f}s; placed again",
        )

    def _unbound(self, gang: Gang) -> bool:
        """No pod of the gang has a node, as the API server says now (on an error: not
        known, so the gang is not withdrawn this pass)."""
        names = gang.names
        sel = self.objects.job_selector(names.job_id, names.attempt)
        try:
            pods, _ = self.client.list(PODS, self.objects.namespace, label_selector=sel)
        except KubeError as exc:
            log.info("job %s: not withdrawn yet: %s", names.job_id, exc)
            return False
        bound = [p["metadata"]["name"] for p in pods if (p.get("spec") or {}).get("nodeName")]
        if bound:
            log.warning("job %s: pod %s is bound; not withdrawn", names.job_id, bound[0])
            return False
        self._unfit_since.pop(gang.key, None)
        return True


def _withdrawn(reason: Reason, message: str) -> Verdict:
    return Verdict(WITHDRAWN, reason, message=message)


_TERMINAL_OR_RUNNING = ("Running", "Succeeded", "Failed")


def _started(pods: list[dict[str, Any]], mode: GangMode) -> bool:
    """Whether the attempt started, by the rule of its mode (module doc)."""
    for pod in pods:
        bound = bool((pod.get("spec") or {}).get("nodeName"))
        phase = (pod.get("status") or {}).get("phase")
        rank = (pod.get("metadata") or {}).get("labels", {}).get(LABEL_RANK)
        if phase in _TERMINAL_OR_RUNNING or (bound and (mode is GangMode.CALDERA or rank == "0")):
            return True
    return False


def withdraw_attempt(
    client: KubeClient,
    objects: GangObjects,
    names: GangNames,
    mode: GangMode,
    *,
    confirm_s: float = 10.0,
) -> bool:
    """Take back one attempt that has not started (True: deleted and confirmed gone; False:
    it started and is left alone). KubeError when the API server does not answer."""
    ns = objects.namespace
    sel = objects.job_selector(names.job_id, names.attempt)
    pods, _ = client.list(PODS, ns, label_selector=sel)
    if _started(pods, mode):
        return False
    if mode is GangMode.VOLCANO_JOB:  # no pod is created or recreated from now on
        client.delete(VCJOBS, ns, names.podgroup, propagation="Orphan")
    rank0 = f"{sel},{LABEL_RANK}=0"
    for _ in range(20):
        found, _ = client.list(PODS, ns, label_selector=rank0)
        if not found:
            break  # never created, or gone: the script cannot run
        if _started(found, mode) or (found[0].get("spec") or {}).get("nodeName"):
            return False
        meta = found[0]["metadata"]
        try:
            client.delete(
                PODS, ns, str(meta["name"]), grace_s=0, resource_version=meta["resourceVersion"]
            )
        except KubeError as exc:
            if exc.status != 409:
                raise
            continue  # it changed (bound, or a status update): look again
        break
    else:
        raise KubeError(
            f"rank 0 of job {names.job_id} kept changing while it was withdrawn",
            status=409,
            retryable=True,
        )
    # the rest never ran the script (workers wait for it): no grace, so that a new
    # submission of the same run never meets them
    client.delete_collection(PODS, ns, sel, grace_s=0)
    objects.delete_by_job(names.job_id, names.attempt, quiet=False)
    give_up = time.monotonic() + confirm_s
    while True:
        left, _ = client.list(PODS, ns, label_selector=sel)
        roots, _ = client.list(CONFIGMAPS, ns, label_selector=sel)
        if not left and not roots:
            return True
        if time.monotonic() > give_up:  # asked again, it finds rank 0 gone and goes on here
            what = (left or roots)[0]["metadata"]["name"]
            raise KubeError(
                f"job {names.job_id}: {what} still exists after it was withdrawn",
                status=0,
                retryable=True,
            )
        time.sleep(0.1)
