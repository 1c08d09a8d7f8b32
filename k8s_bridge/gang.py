"""One attempt of one job on a cluster, as the backend tracks it, and its durable marks.

The root ConfigMap carries two annotations that make the backend's progress survive a
gateway restart: `caldera.io/created` once every object of the gang exists (so a missing pod
afterwards means the pod was lost, not that creation was interrupted), and
`caldera.io/verdict` once the gang ended (written before the remaining pods are killed, so
a restart reports the real end instead of mistaking the killed pods for a failure).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field

from gateway.model.backend import BackendEvent, EventKind, step_event
from gateway.model.job import Job, Step, batch_step_state, wait_status
from gateway.model.state import JobState, Reason
from k8s_bridge.binder import GangDemand
from k8s_bridge.inventory import pod_requests
from k8s_bridge.lifecycle import GangStatus, PodState
from k8s_bridge.names import GangNames
from k8s_bridge.pod_steps import srun_steps
from k8s_bridge.render import GangManifests
from k8s_bridge.states import EVENT_OF_STATE, LOST, STATUS_OF_REASON, WITHDRAWN, event_kind

__all__ = [
    "ANN_CREATED",
    "ANN_VERDICT",
    "ANN_VERDICT_MESSAGE",
    "Gang",
    "Verdict",
    "decode_verdict",
    "encode_verdict",
]

# ends that delete the gang's pods, so its batch script got SIGTERM (scancel, the time
# limit, a preemption): slurmstepd's batch step is CANCELLED 0:15 for them
_ENDED_BY_DELETION = (JobState.CANCELLED, JobState.TIMEOUT, JobState.PREEMPTED)
ANN_CREATED = "caldera.io/created"
# after the time limit and KillWait: rank 0's init has ended the job by then (pod_init.py)
BACKSTOP_MARGIN_S = 5
ANN_VERDICT = "caldera.io/verdict"
ANN_VERDICT_MESSAGE = "caldera.io/verdict-message"


@dataclass(frozen=True, slots=True)
class Verdict:
    """How an attempt ended: a final JobState, or one of the two outcomes states.py names
    (LOST: requeued as a whole; WITHDRAWN: handed back unstarted). Its event kind comes
    from states.py's table."""

    state: JobState
    reason: Reason = Reason.NONE
    exit_code: int = 0
    derived_exit_code: int = 0
    message: str = ""
    end_time: float | None = None

    @property
    def kind(self) -> EventKind:
        """The event that reports this verdict."""
        return event_kind(self.state)

    @classmethod
    def from_status(cls, status: GangStatus, *, lost: bool = False) -> Verdict:
        """The verdict of a finished gang status."""
        if lost or status.state is None:
            return cls(LOST, message=status.message, end_time=status.end_time)
        return cls(
            status.state,
            status.reason,
            status.exit_code,
            status.derived_exit_code,
            status.message,
            status.end_time,
        )


def encode_verdict(verdict: Verdict) -> dict[str, str]:
    """The root ConfigMap's annotations for a verdict."""
    return {
        ANN_VERDICT: (
            f"{verdict.kind.value} {verdict.state.long} {verdict.reason.value} "
            f"{verdict.exit_code} {verdict.derived_exit_code}"
        ),
        ANN_VERDICT_MESSAGE: verdict.message[:1000],
    }


def decode_verdict(annotations: dict[str, str]) -> Verdict | None:
    """A verdict from the root's annotations (None when it has none or it is malformed).
    Roots written before the table named LOST/WITHDRAWN by a state carry "-" there."""
    text = annotations.get(ANN_VERDICT)
    if not text:
        return None
    try:
        kind, state, reason, code, derived = text.split(" ")
        if state == "-":
            state = {EventKind.LOST: LOST, EventKind.WITHDRAWN: WITHDRAWN}[EventKind(kind)].long
        verdict = Verdict(
            JobState.parse(state),
            Reason.parse(reason),
            int(code),
            int(derived),
            annotations.get(ANN_VERDICT_MESSAGE, ""),
        )
    except (ValueError, KeyError):
        return None
    ends = (EventKind.FINISHED, EventKind.LOST, EventKind.WITHDRAWN)
    ok = verdict.state in EVENT_OF_STATE and verdict.kind in ends
    return verdict if ok and verdict.kind is EventKind(kind) else None


@dataclass
class Gang:
    """The backend's record of one attempt."""

    job: Job
    names: GangNames
    manifests: GangManifests
    submitted: float
    hint: tuple[str, ...] = ()
    deadline_s: int | None = None
    created: bool = False
    blind: bool = False  # adopted without seeing the cluster (API server unreachable)
    root_uid: str | None = None
    next_try: float = 0.0  # monotonic; creation/cleanup retry backoff
    backoff: float = 0.2
    nodes: tuple[str, ...] | None = None  # Caldera's placement, once decided
    launched_at: float = 0.0  # wall clock when the gateway handed it over
    bound: set[int] = field(default_factory=set)
    seen: set[int] = field(default_factory=set)  # ranks whose pod the watch has shown
    placed_on: dict[int, str] = field(default_factory=dict)  # rank -> its pod's nodeName
    pod_starts: dict[int, float | None] = field(default_factory=dict)  # rank -> startTime
    pending_reported: bool = False
    started: bool = False
    running_since: float | None = None
    status: GangStatus | None = None
    verdict: Verdict | None = None
    verdict_saved: bool = False
    killed: bool = False
    delivered_at: int | None = None  # the poll() that handed out the verdict
    cancelled: bool = False
    cleanup_done: bool = False
    last_error: str | None = None
    hosts_written: bool = False  # the ranks' IPs are in the root (launch.hosts_text)
    step_records: tuple[str, ...] = ()  # srun's, from rank 0's termination message
    # cancelled by the gateway while it ran: the verdict went out at once, its srun steps
    # are reported once rank 0's container has ended (`steps_at_end`)
    steps_after_cancel: bool = False
    # `scontrol update TimeLimit=` not yet given to rank 0's init (real seconds; the inner
    # None: no limit): it gets it once its ranks run (signals.JobSignals.update_time_limit)
    limit_to_push: tuple[float | None] | None = None
    deadline_set: bool = False  # the pods' activeDeadlineSeconds, set by the backstop
    _demand: GangDemand | None = None

    @property
    def ranks(self) -> int:
        """Pods in the gang."""
        return self.manifests.ranks

    @property
    def backend_id(self) -> str:
        """What the gateway records as the backend's id."""
        return self.names.base

    @property
    def key(self) -> tuple[int, int]:
        """(job id, attempt)."""
        return (self.names.job_id, self.names.attempt)

    def not_running(self) -> int:
        """Pods of this gang that exist (or will) and do not run yet."""
        if self.verdict is not None or self.cancelled:
            return 0
        running = self.status.running if self.status else 0
        return max(self.ranks - running, 0)

    def where(self) -> tuple[str, ...]:
        """The nodes the ranks' pods are bound to, by rank, once every rank was seen
        bound (empty before: the gateway's placement stands)."""
        if len(self.placed_on) < self.ranks:
            return self.nodes or ()
        return tuple(self.placed_on[r] for r in range(self.ranks))

    def event(self, verdict: Verdict, now: float) -> BackendEvent:
        """The event that reports a verdict."""
        kind = verdict.kind
        return BackendEvent(
            job_id=self.names.job_id,
            kind=kind,
            time=verdict.end_time or now,
            state=verdict.state if kind is EventKind.FINISHED else None,
            reason=verdict.reason,
            exit_code=verdict.exit_code,
            derived_exit_code=verdict.derived_exit_code,
            nodes=self.where(),
            backend_id=self.backend_id,
            message=verdict.message or None,
            run=self.names.attempt,
            step=self.batch_step(verdict, now) if kind is EventKind.FINISHED else None,
        )

    def events(self, verdict: Verdict, now: float) -> list[BackendEvent]:
        """The events that report a verdict: a finished job's srun steps, then the verdict."""
        final = self.event(verdict, now)
        if final.kind is not EventKind.FINISHED:
            return [final]
        attempt = self.names.attempt
        steps = srun_steps(self.step_records, self.names.job_id, attempt, self.placed_on)
        return [
            *(step_event(s.job_id, s, final.time, attempt, self.backend_id) for s in steps),
            final,
        ]

    def steps_at_end(self, pods: list[PodState], now: float, grace_s: int) -> list[BackendEvent]:
        """A cancelled gang's srun steps, once rank 0's container has ended: the pods'
        SIGTERM ends them and srun records each in the termination message, after the
        verdict went out (scancel answers at once). Empty while rank 0 may still end
        (up to KillWait and a margin after the cancel)."""
        rank0 = next((p for p in pods if p.rank == 0), None)
        if rank0 is not None:
            if rank0.steps:
                self.step_records = rank0.steps
            since = (self.verdict.end_time if self.verdict else None) or now
            running = rank0.node is not None and rank0.exit_code is None and not rank0.terminal
            if running and now - since < grace_s + 15:
                return []
        self.steps_after_cancel = False
        attempt = self.names.attempt
        steps = srun_steps(self.step_records, self.names.job_id, attempt, self.placed_on)
        return [step_event(s.job_id, s, now, attempt, self.backend_id) for s in steps]

    def batch_step(self, verdict: Verdict, now: float) -> Step | None:
        """sacct's `batch` step: the script on rank 0, from its pod's start to the gang's
        end, with the verdict's status (None when rank 0 never started)."""
        start = self.pod_starts.get(0)
        if start is None or verdict.state is JobState.NODE_FAIL:  # (its script's end unknown)
            return None
        status = verdict.exit_code
        if not status and verdict.state in _ENDED_BY_DELETION:  # its pods' SIGTERM
            status = wait_status(signal=signal.SIGTERM)
        placement = self.job.placement
        return Step(
            job_id=self.names.job_id,
            step_id="batch",
            name="batch",
            state=batch_step_state(status, verdict.state is JobState.OUT_OF_MEMORY),
            start_time=start,
            end_time=max(verdict.end_time or now, start),
            exit_code=status,
            nodes=self.where()[:1],
            cpus=placement[0].cpus if placement else 0,
            run=self.names.attempt,
        )

    def state_event(
        self, state: JobState, now: float, reason: Reason | None = None
    ) -> BackendEvent:
        """The event of a non-final state of the gang (states.py's table): STARTED carries
        the nodes its pods run on and when the last rank started."""
        started_at = None
        if state is JobState.RUNNING:
            starts = [t for t in self.pod_starts.values() if t is not None]
            started_at = min(max(max(starts, default=now), self.launched_at), now)
        return BackendEvent(
            job_id=self.names.job_id,
            kind=event_kind(state),
            time=now,
            state=state,
            reason=reason,
            nodes=self.where() if state is JobState.RUNNING else (),
            backend_id=self.backend_id,
            run=self.names.attempt,
            started_at=started_at,
        )

    def observe(self, pods: list[PodState], status: GangStatus, mono: float) -> bool:
        """Take in the pods' state; whether every rank runs for the first time now."""
        for pod in pods:
            self.seen.add(pod.rank)
            if pod.node and not pod.deleting:
                self.bound.add(pod.rank)
                self.placed_on[pod.rank] = pod.node
                self.pod_starts[pod.rank] = pod.started
            if pod.rank == 0 and pod.steps:
                self.step_records = pod.steps
        self.status = status
        if self.started or not status.all_running:
            return False
        self.started = True
        self.running_since = mono
        self.nodes = self.where()
        return True

    def over_limit(self, mono: float, grace_s: int) -> int:
        """How far past its time limit the running gang is, in backstop stages: 0 not yet;
        1 its limit, KillWait and a margin are over and rank 0's init has not ended it (an
        image without python3): the kubelet is to end it (activeDeadlineSeconds, set now);
        2 as long again and its pods still run (KWOK, a kubelet that does not enforce it)."""
        if self.deadline_s is None or self.running_since is None:
            return 0
        over = mono - self.running_since - self.deadline_s
        return min(int(over // (grace_s + BACKSTOP_MARGIN_S)), 2) if over > 0 else 0

    def decide(self, status: GangStatus, mono: float, now: float, grace_s: int) -> Verdict | None:
        """The verdict, if the gang ended: its pods ended it, or its time limit did and
        nothing ended its pods (`over_limit`). A rank other than 0 failing a job that asked
        for --requeue makes it LOST: the gateway requeues it as a whole; not when it failed
        to launch (its next run would fail the same way)."""
        deadline = self.deadline_s
        if not status.done and self.over_limit(mono, grace_s) == 2:
            minutes = self.job.time_limit or (deadline or 60) // 60
            return Verdict(
                JobState.TIMEOUT,
                Reason.TIME_LIMIT,
                message=f"time limit of {minutes} minutes reached",
                end_time=now,
            )
        if not status.done:
            return None
        requeue = (
            self.job.spec.requeue is True
            and status.rank not in (0, None)
            and status.state is not JobState.COMPLETED
            and status.reason is not Reason.JOB_LAUNCH_FAILURE
        )
        return Verdict.from_status(status, lost=requeue)

    def launch_failure(self, message: str, now: float) -> Verdict:
        """The verdict of a gang the cluster refused to create or bind."""
        return Verdict(
            JobState.FAILED,
            Reason.JOB_LAUNCH_FAILURE,
            exit_code=STATUS_OF_REASON[Reason.JOB_LAUNCH_FAILURE],
            message=message,
            end_time=now,
        )

    def demand(self) -> GangDemand:
        """What the binder needs to place this gang (computed once)."""
        if self._demand is None:
            pods = self.manifests.pods
            self._demand = GangDemand(
                job=self.job,
                pods=tuple(self.names.pod(r) for r in range(self.ranks)),
                requests=tuple(pod_requests(p["spec"]) for p in pods),
                pod_spec=pods[0]["spec"],
                hint=self.hint,
            )
        return self._demand
