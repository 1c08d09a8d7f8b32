"""One attempt of one job on a cluster, as the backend tracks it, and its durable marks.

The root ConfigMap carries two annotations that make the backend's progress survive a
gateway restart: `caldera.io/created` once every object of the gang exists (so a missing pod
afterwards means the pod was lost, not that creation was interrupted), and
`caldera.io/verdict` once the gang ended (written before the remaining pods are killed, so
a restart reports the real end instead of mistaking the killed pods for a failure).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.model.backend import BackendEvent, EventKind
from gateway.model.job import Job
from gateway.model.state import JobState, Reason
from k8s_bridge.binder import GangDemand
from k8s_bridge.inventory import pod_requests
from k8s_bridge.lifecycle import GangStatus, PodState
from k8s_bridge.names import GangNames
from k8s_bridge.render import GangManifests

__all__ = [
    "ANN_CREATED",
    "ANN_VERDICT",
    "ANN_VERDICT_MESSAGE",
    "Gang",
    "Verdict",
    "decode_verdict",
    "encode_verdict",
]

ANN_CREATED = "caldera.io/created"
ANN_VERDICT = "caldera.io/verdict"
ANN_VERDICT_MESSAGE = "caldera.io/verdict-message"


@dataclass(frozen=True, slots=True)
class Verdict:
    """How an attempt ended: FINISHED with a state, or LOST (to be requeued as a whole)."""

    kind: EventKind
    state: JobState | None
    reason: Reason = Reason.NONE
    exit_code: int = 0
    derived_exit_code: int = 0
    message: str = ""
    end_time: float | None = None

    @classmethod
    def from_status(cls, status: GangStatus, *, lost: bool = False) -> Verdict:
        """The verdict of a finished gang status."""
        if lost:
            return cls(EventKind.LOST, None, message=status.message, end_time=status.end_time)
        return cls(
            EventKind.FINISHED,
            status.state,
            status.reason,
            status.exit_code,
            status.derived_exit_code,
            status.message,
            status.end_time,
        )


def encode_verdict(verdict: Verdict) -> dict[str, str]:
    """The root ConfigMap's annotations for a verdict."""
    state = verdict.state.long if verdict.state else "-"
    return {
        ANN_VERDICT: (
            f"{verdict.kind.value} {state} {verdict.reason.value} "
            f"{verdict.exit_code} {verdict.derived_exit_code}"
        ),
        ANN_VERDICT_MESSAGE: verdict.message[:1000],
    }


def decode_verdict(annotations: dict[str, str]) -> Verdict | None:
    """A verdict from the root's annotations (None when it has none or it is malformed)."""
    text = annotations.get(ANN_VERDICT)
    if not text:
        return None
    try:
        kind, state, reason, code, derived = text.split(" ")
        return Verdict(
            EventKind(kind),
            None if state == "-" else JobState.parse(state),
            Reason.parse(reason),
            int(code),
            int(derived),
            annotations.get(ANN_VERDICT_MESSAGE, ""),
        )
    except ValueError:
        return None


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
    bound: set[int] = field(default_factory=set)
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

    def event(self, verdict: Verdict, now: float) -> BackendEvent:
        """The event that reports a verdict."""
        return BackendEvent(
            job_id=self.names.job_id,
            kind=verdict.kind,
            time=verdict.end_time or now,
            state=verdict.state,
            reason=verdict.reason,
            exit_code=verdict.exit_code,
            derived_exit_code=verdict.derived_exit_code,
            nodes=self.nodes or (),
            backend_id=self.backend_id,
            message=verdict.message or None,
            run=self.names.attempt,
        )

    def started_event(self, now: float) -> BackendEvent:
        """The event that reports every rank running."""
        return BackendEvent(
            job_id=self.names.job_id,
            kind=EventKind.STARTED,
            time=now,
            state=JobState.RUNNING,
            nodes=self.nodes or (),
            backend_id=self.backend_id,
            run=self.names.attempt,
        )

    def observe(self, pods: list[PodState], status: GangStatus, mono: float) -> bool:
        """Take in the pods' state; whether every rank runs for the first time now."""
        for pod in pods:
            if pod.node:
                self.bound.add(pod.rank)
        self.status = status
        if self.started or not status.all_running:
            return False
        self.started = True
        self.running_since = mono
        by_rank = {p.rank: p.node or "" for p in pods}
        self.nodes = tuple(by_rank.get(r, "") for r in range(self.ranks))
        return True

    def decide(self, status: GangStatus, mono: float, now: float, grace_s: int) -> Verdict | None:
        """The verdict, if the gang ended: its pods ended it, or its time limit did (also
        where no kubelet enforces activeDeadlineSeconds). A rank other than 0 failing a
        job that asked for --requeue makes it LOST: the gateway requeues it as a whole."""
        deadline = self.deadline_s
        if (
            not status.done
            and deadline
            and self.running_since is not None
            and mono - self.running_since > deadline + grace_s
        ):
            return Verdict(
                EventKind.FINISHED,
                JobState.TIMEOUT,
                Reason.TIME_LIMIT,
                message=f"time limit of {deadline // 60} minutes reached",
                end_time=now,
            )
        if not status.done:
            return None
        requeue = (
            self.job.spec.requeue is True
            and status.rank not in (0, None)
            and status.state is not JobState.COMPLETED
        )
        return Verdict.from_status(status, lost=requeue)

    def launch_failure(self, message: str, now: float) -> Verdict:
        """The verdict of a gang the cluster refused to create or bind."""
        return Verdict(
            EventKind.FINISHED,
            JobState.FAILED,
            Reason.JOB_LAUNCH_FAILURE,
            exit_code=1 << 8,
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
