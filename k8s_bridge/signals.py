"""scancel's signals to a running Kubernetes job (KubernetesBackend's `signal_job` and
`signal_step`): a signal other than a cancel reaches the job's processes through the API
server's exec in rank 0's container (pod_exec.py), where the launcher signals them as
slurmstepd would (pod_signal.py): its srun steps by default, the batch shell with `-b`, one
step with `ID.N`, srun passing it on to the step's tasks on every node. A new time limit
(`update_time_limit`) reaches rank 0's init the same way (`launcher.py limit`).

Refused (Slurm's "Requested operation not supported on this system"): the cancel of one step
(`scancel ID.N`, a KILL to a step: srun cannot be made to record its step CANCELLED from
here), a signal srun cannot pass to tasks (KILL or STOP to steps) and a pod whose image has
no python3 (no launcher). A job whose rank 0 pod is gone or whose batch shell has ended is
already ending: the signal is dropped, as slurmctld drops one to a completing job.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from gateway.compat.slurm_errors import SlurmErrno
from gateway.model.backend import BackendError
from gateway.model.job import Job
from k8s_bridge.gang import Gang
from k8s_bridge.kube import PODS, KubeClient, KubeError
from k8s_bridge.launch import NO_LAUNCHER, limit_command, signal_command
from k8s_bridge.names import LABEL_RANK
from k8s_bridge.pod_exec import exec_in_pod
from k8s_bridge.pod_signal import ENDING, NOT_PASSED
from k8s_bridge.request import limit_seconds

if TYPE_CHECKING:
    from k8s_bridge.objects import GangObjects
    from k8s_bridge.options import K8sOptions

__all__ = ["JobSignals"]

log = logging.getLogger(__name__)

CONTAINER = "job"  # render.py's one container


class JobSignals:
    """Signals and time limits through exec, for KubernetesBackend (its name, client,
    namespace, objects, options and gangs)."""

    name: str
    client: KubeClient
    namespace: str
    objects: GangObjects
    opts: K8sOptions
    _lock: threading.RLock
    _gangs: dict[tuple[int, int], Gang]

    def update_time_limit(self, job: Job, minutes: int) -> None:
        """`scontrol update TimeLimit=` of a job this cluster runs: counted from its start,
        as Slurm counts it (one already passed ends it at once). The gateway's deadline
        (the backstop) moves now; rank 0's init gets it now if the gang runs, else once it
        does (`push_time_limit`, from the controller)."""
        limit_s = limit_seconds(minutes, self.opts.time_scale)
        with self._lock:
            gang = self._gangs.get((job.job_id, job.restart_count))
            if gang is None or gang.verdict is not None:
                return  # not here, or ending: nothing runs on past its end
            gang.deadline_s = limit_s
            gang.job = replace(gang.job, time_limit=minutes)
            gang.limit_to_push = (limit_s,)
            started = gang.started
        if started:
            self.push_time_limit(gang)

    def push_time_limit(self, gang: Gang) -> None:
        """Give rank 0's init the gang's newest time limit, if one waits (once)."""
        with self._lock:
            pending, gang.limit_to_push = gang.limit_to_push, None
        if pending is None:
            return
        try:
            self._in_rank_zero(gang.job, limit_command(pending[0]), "time limit")
        except BackendError as exc:  # the gateway's deadline still holds (gang.py)
            log.warning("job %s: %s", gang.job.job_id, exc)
            if exc.retryable:
                with self._lock:
                    if gang.limit_to_push is None:
                        gang.limit_to_push = pending

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
