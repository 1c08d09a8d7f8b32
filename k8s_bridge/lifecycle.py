"""Pod phases and reasons -> one verdict for the whole gang (pure; each pod's state comes
from the table in states.py).

Slurm's rules, applied to pods: the job ends when rank 0 (the batch step) ends, with rank
0's exit code; a rank that fails while rank 0 runs fails the whole gang (requeued as a whole
when the job asked for --requeue: the backend reports it lost and the gateway requeues it);
a pod whose node is lost (phase Unknown, or its node NotReady: the API server keeps
saying Running until the node returns), that was evicted or preempted, or that vanished
after the gang was running, is a node failure; a container that cannot start (its image
cannot be pulled) is a launch failure. Pods that Caldera itself is deleting are neither
running nor failed.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gateway.model.job import wait_status
from gateway.model.state import JobState, Reason
from k8s_bridge.names import LABEL_ATTEMPT, LABEL_JOB, LABEL_RANK
from k8s_bridge.pod_steps import split_message
from k8s_bridge.pod_wire import TIME_LIMIT_RECORD
from k8s_bridge.states import (
    LAUNCH_FAILURES,
    NODE_LOST,
    REASON_OF_POD_REASON,
    REASON_OF_STATE,
    STATE_OF_REASON,
    STATUS_OF_REASON,
    STATUS_OF_STATE,
    TIME_LIMIT,
    pod_job_state,
)

__all__ = ["GangStatus", "PodState", "gang_status", "parse_pod", "parse_time"]

Obj = dict[str, Any]


def parse_time(text: Any) -> float | None:
    """An RFC 3339 timestamp as epoch seconds."""
    if not text:
        return None
    try:
        return dt.datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class PodState:
    """What the lifecycle needs from one rank's pod."""

    name: str
    uid: str
    job_id: int
    attempt: int
    rank: int
    phase: str
    node: str | None = None
    exit_code: int | None = None
    reason: str | None = None  # its container's end or launch failure, else status.reason
    message: str | None = None
    deleting: bool = False
    started: float | None = None
    finished: float | None = None
    preempted: bool = False
    gated: bool = False
    ip: str | None = None  # status.podIP (the launcher's hosts file, launch.py)
    steps: tuple[str, ...] = ()  # srun's records in its termination message (pod_steps.py)

    @property
    def terminal(self) -> bool:
        """Succeeded or Failed."""
        return self.phase in ("Succeeded", "Failed")

    @property
    def failed(self) -> bool:
        """Ended badly or never will run: Failed, node lost, or its container cannot start."""
        return self.phase in ("Failed", "Unknown") or self.reason in LAUNCH_FAILURES


def _without_time_limit(message: str) -> tuple[str, bool]:
    """The message without the init's time-limit line, and whether it was there."""
    lines = message.splitlines()
    kept = [line for line in lines if line.strip() != TIME_LIMIT_RECORD]
    return "\n".join(kept), len(kept) < len(lines)


def parse_pod(obj: Obj) -> PodState | None:
    """A rank's pod (None for objects without Caldera's job labels)."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    try:
        job_id = int(labels[LABEL_JOB])
        rank = int(labels[LABEL_RANK])
        attempt = int(labels.get(LABEL_ATTEMPT, "0"))
    except (KeyError, ValueError):
        return None
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    exit_code: int | None = None
    reason = status.get("reason")
    message = status.get("message")
    finished: float | None = None
    steps: tuple[str, ...] = ()
    for cs in status.get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated")
        if term:
            exit_code = int(term.get("exitCode", 0))
            if reason not in STATE_OF_REASON:  # the kubelet's DeadlineExceeded, Evicted win
                reason = term.get("reason") or reason
            steps, said = split_message(str(term.get("message") or ""))
            said, timed_out = _without_time_limit(said)
            if timed_out and status.get("reason") not in STATE_OF_REASON:
                reason = TIME_LIMIT  # the init ended the job at its time limit
            message = said or message
            finished = parse_time(term.get("finishedAt"))
            break
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in LAUNCH_FAILURES and reason not in STATE_OF_REASON:
            reason, message = waiting["reason"], waiting.get("message") or message
            break
    preempted = any(
        c.get("type") == "DisruptionTarget"
        and c.get("status") == "True"
        and c.get("reason") == "PreemptionByScheduler"
        for c in status.get("conditions") or []
    )
    return PodState(
        name=str(meta.get("name")),
        uid=str(meta.get("uid", "")),
        job_id=job_id,
        attempt=attempt,
        rank=rank,
        phase=str(status.get("phase") or "Pending"),
        node=spec.get("nodeName"),
        exit_code=exit_code,
        reason=str(reason) if reason else None,
        message=str(message) if message else None,
        deleting=bool(meta.get("deletionTimestamp")),
        started=parse_time(status.get("startTime")),
        finished=finished,
        preempted=preempted,
        gated=bool(spec.get("schedulingGates")),
        ip=status.get("podIP") or None,
        steps=steps,
    )


@dataclass(frozen=True, slots=True)
class GangStatus:
    """The gang now: how far it got, and its final state once it has one."""

    ranks: int
    present: int
    bound: int
    running: int
    state: JobState | None = None  # None: not finished
    reason: Reason = Reason.NONE
    exit_code: int = 0  # wait status
    derived_exit_code: int = 0
    message: str = ""
    rank: int | None = None  # the rank whose end decided the verdict
    end_time: float | None = None

    @property
    def all_running(self) -> bool:
        """Every rank runs."""
        return self.running == self.ranks

    @property
    def done(self) -> bool:
        """A verdict was reached."""
        return self.state is not None

    @property
    def partly_placed(self) -> bool:
        """Some ranks are on nodes and some are not (what gang scheduling prevents)."""
        return 0 < self.bound < self.ranks


def _status_of(pod: PodState) -> int:
    code = pod.exit_code or 0
    if 128 < code < 160:  # killed by a signal: Slurm's ExitCode 0:<signal>
        return wait_status(signal=code - 128)
    return wait_status(exit_code=code)


def _final_state(pod: PodState) -> JobState:
    return pod_job_state(pod.phase, pod.reason, pod.preempted)


def _lost(pod: PodState) -> PodState:
    """A rank whose node stopped reporting: lost with it (whatever its last phase was)."""
    return replace(pod, phase="Unknown", reason=NODE_LOST, message=f"node {pod.node} NotReady")


def _describe(pod: PodState) -> str:
    if pod.exit_code is None:  # never ran, or lost with its node: the reason says why
        detail = pod.reason or pod.phase
    else:
        detail = f"exit code {pod.exit_code}"
        if pod.reason and pod.reason not in ("Error", "Completed"):
            detail += f" ({pod.reason})"
    if pod.message:
        detail += f": {pod.message}"
    return f"rank {pod.rank} (pod {pod.name}) {detail}"


def gang_status(
    pods: Sequence[PodState],
    ranks: int,
    *,
    was_running: bool = False,
    missing_is_lost: bool = False,
    seen: Collection[int] = (),
    down: Collection[str] = (),
) -> GangStatus:
    """The verdict for one attempt's pods. `was_running`: every rank was seen Running
    before; `missing_is_lost`: the pod list is authoritative (synced), so a rank missing
    after the gang ran (or a rank in `seen`, whose pod was there before) means its pod
    was removed behind Caldera's back; `down`: nodes
    that are not Ready (or gone), whose unfinished pods are lost."""
    pods = [_lost(p) if p.node in down and not p.terminal else p for p in pods]
    by_rank = {p.rank: p for p in pods}
    live = [p for p in pods if not p.deleting]
    bound = sum(1 for p in live if p.node)
    running = sum(1 for p in live if p.phase == "Running")
    base = GangStatus(ranks=ranks, present=len(live), bound=bound, running=running)
    worst_other = max((_status_of(p) for p in pods if p.rank and p.phase == "Failed"), default=0)
    rank0 = by_rank.get(0)
    if rank0 is not None and rank0.terminal:
        state = _final_state(rank0)
        status = STATUS_OF_STATE.get(state, _status_of(rank0))
        if rank0.phase == "Succeeded":
            state, status = JobState.COMPLETED, 0
        return GangStatus(
            ranks=ranks,
            present=len(live),
            bound=bound,
            running=running,
            state=state,
            reason=REASON_OF_STATE.get(state, Reason.NON_ZERO_EXIT_CODE),
            exit_code=status,
            derived_exit_code=max(status, worst_other),
            message=_describe(rank0),
            rank=0,
            end_time=rank0.finished,
        )
    failed = sorted(
        (p for p in pods if p.failed and not (p.deleting and p.reason != NODE_LOST)),
        key=lambda p: (p.finished or 0.0, p.rank),
    )
    if failed:
        pod = failed[0]
        state = _final_state(pod)
        reason = REASON_OF_POD_REASON.get(pod.reason or "") or REASON_OF_STATE.get(
            state, Reason.NON_ZERO_EXIT_CODE
        )
        status = STATUS_OF_REASON.get(reason) or STATUS_OF_STATE.get(state, _status_of(pod))
        return GangStatus(
            ranks=ranks,
            present=len(live),
            bound=bound,
            running=running,
            state=state,
            reason=reason,
            exit_code=status,
            derived_exit_code=max(status, worst_other),
            message=_describe(pod),
            rank=pod.rank,
            end_time=pod.finished,
        )
    if missing_is_lost:
        missing = [r for r in range(ranks) if r not in by_rank and (was_running or r in seen)]
        if missing:
            return GangStatus(
                ranks=ranks,
                present=len(live),
                bound=bound,
                running=running,
                state=JobState.NODE_FAIL,
                reason=Reason.NODE_DOWN,
                message=f"rank {missing[0]}'s pod was deleted by someone else",
                rank=missing[0],
            )
    return base
