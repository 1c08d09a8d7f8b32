"""What a backend can do beyond the core contract, resolved once when it is built.

The core contract (`gateway.model.backend.Backend`: describe, submit, cancel/signal, poll,
reconcile) is what every adapter implements. Everything else is optional and small: each
ability is a runtime-checkable Protocol, and `capabilities_of` checks them once, so the rest
of the gateway asks `caps.time_limit` instead of probing a backend for method names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from gateway.model.backend import Backend
from gateway.model.job import Job, RankPlacement, Step
from gateway.scheduler.snapshot import NodeFree

__all__ = [
    "AccountedJob",
    "Accounting",
    "Capabilities",
    "Closes",
    "EndsAttempts",
    "EndsGracefully",
    "JobControl",
    "NativeDependencies",
    "Notifies",
    "PlacesItself",
    "PredictsStart",
    "PreemptsRuns",
    "Room",
    "ShowsRoom",
    "Suspends",
    "UpdatesTimeLimit",
    "Withdraws",
    "capabilities_of",
]


@runtime_checkable
class PlacesItself(Protocol):
    """The backend chooses nodes itself (Slurm, Volcano): the gateway chooses only the
    cluster and partition, and never subtracts per-node resources for its jobs."""

    @property
    def places_itself(self) -> bool: ...


@runtime_checkable
class JobControl(Protocol):
    """The backend queues jobs itself, so holds and releases of a job it holds are
    forwarded to it (Slurm)."""

    def hold(self, job: Job, admin: bool = False) -> None: ...

    def release(self, job: Job) -> None: ...


@runtime_checkable
class UpdatesTimeLimit(Protocol):
    """`scontrol update TimeLimit=` reaches a job the backend already holds."""

    def update_time_limit(self, job: Job, minutes: int) -> None: ...


@runtime_checkable
class EndsAttempts(Protocol):
    """A backend that can end a run of a job as a whole (every process, not only its steps)
    and confirm it, as requeue and node fail-over need before the next run may start."""

    def end_attempt(self, job: Job, requeue: bool = False) -> None:
        """End every process of the job's current run and return once they are confirmed
        gone (BackendError, retryable, when not confirmed in time). That run never starts
        afterwards, and the backend starts no later run while it is not confirmed gone.
        `requeue`: the end is scontrol requeue's (slurmstepd says `DUE TO JOB REQUEUE` in
        the job's output; a node's failure or a preemption says otherwise)."""
        ...


@runtime_checkable
class EndsGracefully(Protocol):
    """The backend can give a run a grace period of its own choosing: SIGTERM to its
    processes now, SIGKILL once the grace is over. A preemption's GraceTime needs it where
    a signal cannot be sent by itself (Kubernetes: a pod is only ever deleted, with a grace
    period; its `cancel` would give the pod's own KillWait instead)."""

    def end_gracefully(self, job: Job, grace_s: float) -> None:
        """SIGTERM every process of the job's current run now and SIGKILL what is left
        `grace_s` wall seconds later. Returns once asked, not once ended: `end_attempt`
        or `cancel` still ends the run for the record. BackendError when not asked."""
        ...


@dataclass(frozen=True, slots=True)
class Room:
    """What is free on each node of a cluster, and what each run there holds ((job id,
    attempt) -> its ranks), counted from the same source so that they add up."""

    free: Mapping[str, NodeFree]
    held: Mapping[tuple[int, int], tuple[RankPlacement, ...]]


@runtime_checkable
class ShowsRoom(Protocol):
    """A cluster that places its own jobs but lets the gateway preempt for the jobs waiting
    in its queue (Kubernetes under Volcano, gateway/control/queued_preempt.py): the gateway
    chooses the victims, so it needs the cluster's room."""

    def room(self) -> Room | None:
        """The room now; None while the backend does not know it yet. Non-blocking."""
        ...


@runtime_checkable
class NativeDependencies(Protocol):
    """The backend can enforce a dependency between jobs it holds itself (Slurm's
    --dependency), so such a job may be handed over before its dependency is met."""

    def native_dependency_ok(self, job: Job, targets: Sequence[Job]) -> bool: ...


class AccountedJob(Protocol):
    """One job as the backend's own accounting records it."""

    @property
    def job(self) -> Job: ...

    @property
    def steps(self) -> tuple[Step, ...]: ...


@runtime_checkable
class Accounting(Protocol):
    """The backend keeps accounting of its own (slurmdbd) whose records win in sacct."""

    def accounting(self, jobs: Sequence[Job]) -> Mapping[int, AccountedJob]: ...


@runtime_checkable
class Closes(Protocol):
    """The backend holds resources (threads, connections) to release at shutdown."""

    def close(self) -> None: ...


@runtime_checkable
class PredictsStart(Protocol):
    """The backend can tell when a job would start on it (its own planner: Slurm's
    `sbatch --test-only`), which multi-cluster routing compares across clusters."""

    def predict_start(self, job: Job, partition: str) -> float | None:
        """Epoch seconds the job would start in `partition`; None when unknown. Blocking:
        called in a worker thread."""
        ...


@runtime_checkable
class Withdraws(Protocol):
    """The backend can take back a run it queues but has not started, safely against the
    race with its start (routing moves such a job to another cluster)."""

    def withdraw(self, job: Job) -> bool:
        """True: the run is gone and never starts; False: it has started (it stays).
        BackendError(retryable=True) when the backend cannot answer now."""
        ...


@runtime_checkable
class Notifies(Protocol):
    """The backend can say when its runs changed (a run ended), so the gateway polls then
    instead of waiting for its next periodic cycle (the local runner)."""

    def notify_changes(self, wake: Callable[[], None]) -> None:
        """From now on, call `wake` (from any thread) after a change `poll()` would report;
        a missed call only delays the report until the next periodic poll."""
        ...


@runtime_checkable
class Suspends(Protocol):
    """The backend can stop a running job's processes and continue them later, keeping
    the run (scontrol suspend/resume, PreemptMode=SUSPEND). Only the local runner can:
    Slurm backends suspend through Slurm itself, Kubernetes has no way to stop a pod's
    processes; without it `scontrol suspend` is refused and a SUSPEND preemption is
    carried out as REQUEUE (CANCEL for a job that may not be requeued)."""

    def suspend(self, job: Job) -> None:
        """Stop every process of the job's current run; return once they are stopped
        (BackendError: not stopped; `retryable` when it may work later)."""
        ...

    def resume(self, job: Job) -> None:
        """Continue the stopped run; return once continued."""
        ...


@runtime_checkable
class PreemptsRuns(Protocol):
    """The backend can end a preempted run as slurmstepd does (the local runner): the job's
    output says `*** JOB N ON node CANCELLED AT t DUE TO PREEMPTION ***`, every process gets
    SIGCONT and SIGTERM, what is left SIGKILL after KillWait, and the run then reports
    FINISHED in state PREEMPTED with its batch shell's wait status. Meanwhile the record
    shows COMPLETING, as slurmctld's does (recorded on the burst test cluster)."""

    def preempt_run(self, job: Job, at: float) -> None:
        """Ask the job's current run to end so, its output line stamped `at` (the record's
        PreemptTime); returns once asked, not once ended (BackendError when it cannot be
        asked)."""
        ...

    def preempted_status(self, job: Job) -> int | None:
        """The current run's batch shell wait status once the run has ended, else None.
        Non-blocking; `end_attempt` still confirms that every process is gone."""
        ...


@dataclass(frozen=True, slots=True)
class Capabilities:
    """The optional abilities of one backend (None: it has not got that one)."""

    places_itself: bool = False
    control: JobControl | None = None
    time_limit: UpdatesTimeLimit | None = None
    ends_attempts: EndsAttempts | None = None
    ends_gracefully: EndsGracefully | None = None
    native_dependencies: NativeDependencies | None = None
    accounting: Accounting | None = None
    closes: Closes | None = None
    predicts_start: PredictsStart | None = None
    withdraws: Withdraws | None = None
    notifies: Notifies | None = None
    suspends: Suspends | None = None
    shows_room: ShowsRoom | None = None
    preempts_runs: PreemptsRuns | None = None


def capabilities_of(backend: Backend) -> Capabilities:
    """Check each optional ability of `backend` once."""
    return Capabilities(
        places_itself=isinstance(backend, PlacesItself) and bool(backend.places_itself),
        control=backend if isinstance(backend, JobControl) else None,
        time_limit=backend if isinstance(backend, UpdatesTimeLimit) else None,
        ends_attempts=backend if isinstance(backend, EndsAttempts) else None,
        ends_gracefully=backend if isinstance(backend, EndsGracefully) else None,
        native_dependencies=backend if isinstance(backend, NativeDependencies) else None,
        accounting=backend if isinstance(backend, Accounting) else None,
        closes=backend if isinstance(backend, Closes) else None,
        predicts_start=backend if isinstance(backend, PredictsStart) else None,
        withdraws=backend if isinstance(backend, Withdraws) else None,
        notifies=backend if isinstance(backend, Notifies) else None,
        suspends=backend if isinstance(backend, Suspends) else None,
        shows_room=backend if isinstance(backend, ShowsRoom) else None,
        preempts_runs=backend if isinstance(backend, PreemptsRuns) else None,
    )
