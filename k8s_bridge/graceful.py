"""A run's own grace period on Kubernetes (the gateway's `EndsGracefully` capability).

A pod cannot be sent a signal; it can only be deleted, and the kubelet then sends SIGTERM to
its containers and SIGKILL once the deletion's grace period is over. `cancel` deletes with the
pods' own grace (terminationGracePeriodSeconds, the gateway's KillWait); a preemption's
GraceTime needs its own, so the pods of the run are deleted with `gracePeriodSeconds` = that
grace. A later delete that names no grace (the gateway's `cancel` when the grace is over, the
controller's clean-up) does not shorten it: the API server keeps a deletion's grace unless a
shorter one is asked for. Pods that are being deleted count neither as running nor as failed
(lifecycle.py), so the gang gets no verdict until they end; and the binder counts them on their
nodes until they end, so nothing is bound onto their room meanwhile.

The gateway records the end once the grace is over, without waiting for the pods (this backend
has no `EndsAttempts`); so that a requeued job never runs twice at once, a later run of a job
is not created while a pod of an earlier run may still run (`earlier_run_left`, checked by
objects.py before creating attempt n > 0; the controller retries until they have ended).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

from gateway.model.backend import BackendError
from gateway.model.job import Job
from k8s_bridge.kube import PODS, KubeClient, KubeError
from k8s_bridge.lifecycle import PodState

if TYPE_CHECKING:
    from k8s_bridge.objects import GangObjects

__all__ = ["GracefulEnd", "earlier_run_left", "grace_period_s"]

log = logging.getLogger(__name__)


def grace_period_s(grace_s: float) -> int:
    """Whole seconds for `gracePeriodSeconds` (at least 1: 0 means "at once, no SIGTERM");
    rounded up, never shorter than asked, without turning 6.000000000000001 into 7."""
    return max(1, math.ceil(round(grace_s, 3)))


def earlier_run_left(pods: Iterable[PodState], attempt: int) -> PodState | None:
    """A pod of an earlier run than `attempt` whose processes may still run (not Succeeded
    or Failed: being deleted with a grace still counts)."""
    return next((p for p in pods if p.attempt < attempt and not p.terminal), None)


class GracefulEnd:
    """`end_gracefully` for KubernetesBackend (its client, namespace and objects)."""

    name: str
    client: KubeClient
    namespace: str
    objects: GangObjects

    def end_gracefully(self, job: Job, grace_s: float) -> None:
        """Delete the pods of the job's current run with `grace_s` as their grace period:
        SIGTERM now, SIGKILL when it is over (the kubelet's)."""
        sel = self.objects.job_selector(job.job_id, job.restart_count)
        grace = grace_period_s(grace_s)
        try:
            self.client.delete_collection(PODS, self.namespace, sel, grace_s=grace)
        except KubeError as exc:
            raise BackendError(
                f"cluster {self.name}: job {job.job_id} not signalled: {exc}",
                retryable=exc.retryable,
            ) from exc
        log.info("job %s: pods deleted with a grace of %d s", job.job_id, grace)
