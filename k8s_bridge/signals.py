"""scancel's signals to a running Kubernetes job (KubernetesBackend's `signal_job` and
`signal_step`): a signal other than a cancel reaches the job's processes through the API
server's exec in rank 0's container (pod_exec.py), where the launcher signals them as
slurmstepd would (pod_signal.py): its srun steps by default, the batch shell with `-b`, one
step with `ID.N`, srun passing it on to the step's tasks on every node.

Refused (Slurm's "Requested operation not supported on this system"): the cancel of one step
(`scancel ID.N`, a KILL to a step: srun cannot be made to record its step CANCELLED from
here), a signal srun cannot pass to tasks (KILL or STOP to steps) and a pod whose image has
no python3 (no launcher). A job whose rank 0 pod is gone or whose batch shell has ended is
already ending: the signal is dropped, as slurmctld drops one to a completing job.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from gateway.compat.slurm_errors import SlurmErrno
from gateway.model.backend import BackendError
from gateway.model.job import Job
from k8s_bridge.kube import PODS, KubeClient, KubeError
from k8s_bridge.launch import NO_LAUNCHER, signal_command
from k8s_bridge.names import LABEL_RANK
from k8s_bridge.pod_exec import exec_in_pod
from k8s_bridge.pod_signal import ENDING, NOT_PASSED

if TYPE_CHECKING:
    from k8s_bridge.objects import GangObjects

__all__ = ["JobSignals"]

log = logging.getLogger(__name__)

CONTAINER = "job"  # render.py's one container


class JobSignals:
    """Signals through exec, for KubernetesBackend (its name, client, namespace, objects)."""

    name: str
    client: KubeClient
    namespace: str
    objects: GangObjects

    def signal_job(self, job: Job, signal: int, batch_only: bool = False) -> None:
        """`scancel -s SIG [-b] ID` of a running job: its steps, or its batch shell alone."""
        self._in_rank_zero(job, signal_command(signal, batch_only), f"signal {signal}")

    def signal_step(self, job: Job, step: int, signal: int | None, by: int) -> None:
        """`scancel -s SIG ID.N`: step N's srun passes the signal to its tasks; a step that
        does not run gets nothing (as on Slurm). Its cancel is refused (see above)."""
        if signal is None or signal == 9:
            raise BackendError(
                f"cluster {self.name}: a step of a Kubernetes job cannot be cancelled alone",
                errno=SlurmErrno.NOT_SUPPORTED.code,
            )
        self._in_rank_zero(
            job, signal_command(signal, step=step), f"signal {signal} to step {step}"
        )

    def _in_rank_zero(self, job: Job, argv: list[str], what: str) -> None:
        sel = f"{self.objects.job_selector(job.job_id, job.restart_count)},{LABEL_RANK}=0"
        try:  # by its labels: a Volcano Job names its pods itself
            pods, _ = self.client.list(PODS, self.namespace, label_selector=sel)
            pod = next((p["metadata"]["name"] for p in pods if _running(p)), None)
            if pod is None:  # not running (any more): the job is ending
                log.info("job %s: %s dropped: rank 0 does not run", job.job_id, what)
                return
            done = exec_in_pod(self.client, self.namespace, pod, CONTAINER, argv)
        except KubeError as exc:
            if exc.status == 404:  # the pod is gone meanwhile
                log.info("job %s: %s dropped: %s", job.job_id, what, exc)
                return
            raise BackendError(
                f"cluster {self.name}: job {job.job_id}: {what} not sent: {exc}",
                retryable=exc.retryable,
            ) from exc
        if done.status == 0 or done.status == ENDING:
            log.info("job %s: %s (%s)", job.job_id, what, done.output.strip() or "sent")
            return
        why = {
            NOT_PASSED: "srun cannot pass it to the step's tasks",
            NO_LAUNCHER: "the job's image has no python3 for Caldera's launcher",
        }.get(done.status, done.output.strip() or f"status {done.status}")
        raise BackendError(
            f"cluster {self.name}: job {job.job_id}: {what} not sent: {why}",
            errno=SlurmErrno.NOT_SUPPORTED.code,
        )


def _running(pod: dict[str, Any]) -> bool:
    """A pod whose container runs (exec reaches it) and which is not being deleted."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    return status.get("phase") == "Running" and not meta.get("deletionTimestamp")
