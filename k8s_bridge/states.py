"""Kubernetes states as Caldera sees them: the one place where what the cluster shows
becomes the gateway's vocabulary (as slurm_plugin/statuses.py is for Slurm).

Two steps, each one table:
- a rank's pod -> a Slurm JobState: its phase (`STATE_OF_PHASE`), unless its container's
  termination reason or the pod's own reason says more (`STATE_OF_REASON`: OOMKilled is
  OUT_OF_MEMORY, an evicted pod a node failure, a pod preempted by the scheduler PREEMPTED,
  a container that cannot start (`LAUNCH_FAILURES`: its image cannot be pulled, its
  configuration is invalid) FAILED with Reason JobLaunchFailure, a pod whose node went
  NotReady (`NODE_LOST`, set by lifecycle.py from the node watch) NODE_FAIL, a rank 0 whose
  init ended the job at its time limit (`TIME_LIMIT`) TIMEOUT);
- an attempt's (gang's) JobState -> the event it is reported as (`EVENT_OF_STATE`). Two
  outcomes of an attempt have no Slurm state of their own and borrow the nearest one:
  REQUEUED for "lost: requeue the run as a whole" (a node or pod gone, a rank of a --requeue
  job failed) and REVOKED for "withdrawn: handed back before it started" (like a federation
  sibling revoked on one cluster, the job itself lives on).

lifecycle.py applies the first table to every rank and Slurm's rules to the gang (rank 0
decides); gang.py's Verdict and the controller's, backend's and withdraw.py's events all take
their kind from `event_kind`. No other module maps a Kubernetes state.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from gateway.model.backend import EventKind
from gateway.model.state import JobState, Reason

__all__ = [
    "EVENT_OF_STATE",
    "LAUNCH_FAILURES",
    "LOST",
    "NODE_LOST",
    "PREEMPTED_BY_SCHEDULER",
    "REASON_OF_POD_REASON",
    "REASON_OF_STATE",
    "STATE_OF_PHASE",
    "STATE_OF_REASON",
    "STATUS_OF_REASON",
    "STATUS_OF_STATE",
    "TIME_LIMIT",
    "WITHDRAWN",
    "event_kind",
    "pod_job_state",
]

# the pod's status.phase
STATE_OF_PHASE: Mapping[str, JobState] = MappingProxyType(
    {
        "Pending": JobState.PENDING,  # unbound, or bound and its containers not started
        "Running": JobState.RUNNING,
        "Succeeded": JobState.COMPLETED,
        "Failed": JobState.FAILED,
        "Unknown": JobState.NODE_FAIL,  # the node stopped reporting the pod
    }
)

# the DisruptionTarget condition's reason when kube-scheduler/Volcano preempted the pod
PREEMPTED_BY_SCHEDULER = "PreemptionByScheduler"

# a container's waiting reason after which it will not start by itself: the job failed to
# launch (Slurm fails a job whose launch fails at once; the kubelet would only retry the pull
# with a growing back-off, the job holding its nodes meanwhile)
LAUNCH_FAILURES: frozenset[str] = frozenset(
    {
        "ErrImagePull",  # the image cannot be pulled (no such image, registry unreachable)
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",  # imagePullPolicy Never and the image is not on the node
        "CreateContainerConfigError",  # e.g. a ConfigMap or user the container needs is missing
        "CreateContainerError",
    }
)

# Caldera's own reason for a rank whose node stopped reporting (Ready not True): the pod's
# phase stays Running on the API server until the node returns, so lifecycle.py marks it
NODE_LOST = "NodeLost"
# Caldera's own reason for a rank 0 whose init ended the job at its time limit (its line in
# the container's termination message, pod_init.py)
TIME_LIMIT = "CalderaTimeLimit"

# a container's termination reason (or the pod's status.reason), over the phase
STATE_OF_REASON: Mapping[str, JobState] = MappingProxyType(
    {
        "OOMKilled": JobState.OUT_OF_MEMORY,  # the cgroup's OOM killer ended the container
        "DeadlineExceeded": JobState.TIMEOUT,  # activeDeadlineSeconds (gang.over_limit's)
        TIME_LIMIT: JobState.TIMEOUT,
        "Evicted": JobState.NODE_FAIL,  # the kubelet evicted it (node pressure)
        NODE_LOST: JobState.NODE_FAIL,
        PREEMPTED_BY_SCHEDULER: JobState.PREEMPTED,
        **dict.fromkeys(LAUNCH_FAILURES, JobState.FAILED),
    }
)

LOST = JobState.REQUEUED  # the attempt is gone; the gateway requeues it (or NODE_FAIL)
WITHDRAWN = JobState.REVOKED  # handed back before it started; the job waits again, same run

# an attempt's state -> the event that reports it
EVENT_OF_STATE: Mapping[JobState, EventKind] = MappingProxyType(
    {
        # objects exist, not every rank runs: reported where another scheduler (Volcano,
        # kube-scheduler) queues the gang; in Caldera's mode the gateway placed it already
        JobState.PENDING: EventKind.PENDING,
        JobState.RUNNING: EventKind.STARTED,  # every rank Running, with the pods' nodes
        JobState.COMPLETED: EventKind.FINISHED,
        JobState.FAILED: EventKind.FINISHED,
        JobState.CANCELLED: EventKind.FINISHED,
        JobState.TIMEOUT: EventKind.FINISHED,
        JobState.OUT_OF_MEMORY: EventKind.FINISHED,
        JobState.NODE_FAIL: EventKind.FINISHED,
        JobState.PREEMPTED: EventKind.FINISHED,
        LOST: EventKind.LOST,
        WITHDRAWN: EventKind.WITHDRAWN,
    }
)


# the Reason scontrol shows with a final state, as Slurm sets it (others: NonZeroExitCode)
REASON_OF_STATE: Mapping[JobState, Reason] = MappingProxyType(
    {
        JobState.COMPLETED: Reason.NONE,
        JobState.TIMEOUT: Reason.TIME_LIMIT,
        JobState.NODE_FAIL: Reason.NODE_DOWN,
        JobState.OUT_OF_MEMORY: Reason.OUT_OF_MEMORY,
    }
)


# a rank's reason -> the Reason of the gang's end where it says more than the state's
REASON_OF_POD_REASON: Mapping[str, Reason] = MappingProxyType(
    dict.fromkeys(LAUNCH_FAILURES, Reason.JOB_LAUNCH_FAILURE)
)

# the wait status of a job that never ran its script: ExitCode 1:0, as the gateway gives a
# job whose launch failed
STATUS_OF_REASON: Mapping[Reason, int] = MappingProxyType({Reason.JOB_LAUNCH_FAILURE: 1 << 8})


# Slurm's SIG_OOM (253): the wait status an OOM-killed job reports (ExitCode 0:125), as the
# local runner reports it; other states keep rank 0's own status
STATUS_OF_STATE: Mapping[JobState, int] = MappingProxyType({JobState.OUT_OF_MEMORY: 253})


def event_kind(state: JobState) -> EventKind:
    """The event an attempt in `state` is reported as."""
    return EVENT_OF_STATE[state]


def pod_job_state(phase: str, reason: str | None = None, preempted: bool = False) -> JobState:
    """One rank's pod as a JobState (ValueError for a phase Kubernetes does not have)."""
    if preempted:
        reason = PREEMPTED_BY_SCHEDULER
    if reason is not None and reason in STATE_OF_REASON:
        return STATE_OF_REASON[reason]
    try:
        return STATE_OF_PHASE[phase]
    except KeyError:
        raise ValueError(f"unknown pod phase {phase!r}") from None
