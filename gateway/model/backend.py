"""The contract between the gateway and the places jobs run (local, Slurm, Kubernetes).

Level-triggered: a backend can always be asked what it has (`reconcile`), so after any
restart the gateway compares that with its store and nothing is lost or run twice. Every
submission carries the gateway's job id; submitting the same id twice must not start a
second job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol, runtime_checkable

from gateway.model.cluster import ClusterState
from gateway.model.job import Job, RankPlacement, Step
from gateway.model.state import JobState, Reason

__all__ = [
    "Backend",
    "BackendError",
    "BackendEvent",
    "EventKind",
    "Launch",
    "RankPlacement",
    "step_event",
]


class BackendError(Exception):
    """A backend operation failed; `retryable` says whether trying again may help,
    `waiting_reason` what a job waiting for that retry shows in squeue (default
    ClusterUnreachable; e.g. Resources when the cluster is only full for now), and `errno`
    Slurm's error code for the commands' messages."""

    def __init__(
        self,
        message: str,
        *,
        retryable: bool = False,
        waiting_reason: Reason | None = None,
        errno: int | None = None,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.waiting_reason = waiting_reason
        self.errno = errno  # Slurm's error code, when the backend's refusal carries one


@dataclass(frozen=True, slots=True, kw_only=True)
class Launch:
    """Everything a backend needs to start a job, decided and resolved by the gateway."""

    job: Job
    script: str
    environment: Mapping[str, str]  # after --export rules; SLURM_* are added by the backend
    placement: Sequence[RankPlacement]
    partition: str
    cluster: str = "local"
    env_extra: Mapping[str, str] = field(default_factory=dict)  # e.g. CUDA/NCCL pairing


class EventKind(Enum):
    """What a backend reports: the one vocabulary every adapter maps its own states to (each
    in one table: containers.events, slurm_plugin.statuses, k8s_bridge.states)."""

    # the backend holds the job (backend_id), found after the submit's answer was lost
    SUBMITTED = "submitted"
    # the backend queues the job itself (Slurm's PD): `reason` says why it waits there
    PENDING = "pending"
    # the job runs: `started_at` is the backend's own start time, `nodes` where it runs
    STARTED = "started"
    # any other non-final state of a backend that places jobs itself, mirrored as it is
    # (SUSPENDED, COMPLETING, CONFIGURING ...; its last known state while unreachable)
    OBSERVED = "observed"
    FINISHED = "finished"  # final `state`, `exit_code`, end `time`
    LOST = "lost"  # the backend no longer knows the job (node or supervisor gone)
    # the backend handed back a job it never started (its placement can no longer be bound;
    # nothing of it is left): the job waits again and the gateway places it anew, same run
    WITHDRAWN = "withdrawn"
    STEP = "step"  # a step started or ended (sacct)

    @property
    def mirrors_state(self) -> bool:
        """Whether the event carries a non-final state the gateway shows as the backend's."""
        return self in (EventKind.PENDING, EventKind.STARTED, EventKind.OBSERVED)


@dataclass(frozen=True, slots=True, kw_only=True)
class BackendEvent:
    """A change observed on a backend."""

    job_id: int
    kind: EventKind
    time: float
    state: JobState | None = None
    reason: Reason | None = None
    exit_code: int = 0
    derived_exit_code: int = 0
    nodes: tuple[str, ...] = ()
    step: Step | None = None
    backend_id: str | None = None
    message: str | None = None
    run: int = 0  # the job's restart count when this run started (older runs are ignored)
    # when the backend itself started the job (a queueing backend like Slurm starts it after
    # Caldera handed it over, maybe between two polls): replaces the hand-over time
    started_at: float | None = None


def step_event(
    job_id: int, step: Step, now: float, run: int = 0, backend_id: str | None = None
) -> BackendEvent:
    """One accounting step (sacct) as a backend reports it: at its end, else at `now`."""
    return BackendEvent(
        job_id=job_id,
        kind=EventKind.STEP,
        time=step.end_time or now,
        state=step.state,
        exit_code=step.exit_code,
        nodes=step.nodes,
        step=step,
        run=run,
        backend_id=backend_id,
    )


@runtime_checkable
class Backend(Protocol):
    """A place jobs run."""

    name: str

    def describe(self) -> ClusterState:
        """Nodes and partitions now."""
        ...

    def submit(self, launch: Launch) -> str:
        """Start the job; returns the backend's id. Idempotent per job id."""
        ...

    def cancel(self, job: Job, signal: int | None = None, batch_only: bool = False) -> None:
        """Signal (None: cancel, i.e. SIGTERM then SIGKILL) a running job."""
        ...

    def signal_step(self, job: Job, step: int, signal: int | None, by: int) -> None:
        """scancel ID.STEP by uid `by`: signal one running step of a running job (None:
        cancel it, SIGKILL, the job runs on); a cancel of a step that is not running is a
        BackendError with errno INVALID_JOB_ID (a signal to it does nothing, as in Slurm)."""
        ...

    def poll(self) -> list[BackendEvent]:
        """Events since the last call (non-blocking)."""
        ...

    def reconcile(self, jobs: Sequence[Job]) -> list[BackendEvent]:
        """Events that bring these jobs (believed running here) up to date after a restart."""
        ...
