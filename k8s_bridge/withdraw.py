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
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from gateway.model.backend import BackendError, EventKind
from gateway.model.state import Reason
from k8s_bridge.gang import Gang, Verdict
from k8s_bridge.inventory import NodeInfo
from k8s_bridge.kube import PODS, KubeClient, KubeError
from k8s_bridge.objects import GangObjects

__all__ = ["Withdrawals", "is_withdrawn", "resubmitted"]

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
    return Verdict(EventKind.WITHDRAWN, None, reason, message=message)
