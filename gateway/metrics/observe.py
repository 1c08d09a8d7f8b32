"""What the gateway observes as it runs, for /metrics: scheduling cycle and submission
durations, queue waits, job starts and ends, API request durations, routing decisions.

The job counts of /metrics are taken from the job table when the page is asked for; these
are the things that happen between two scrapes and that no table keeps. Every call is made
on the event loop thread (the gateway's only writer), costs a few dictionary operations,
and allocates nothing per observation, so the hooks in the scheduling loop and the
submission path stay cheap.
"""

from __future__ import annotations

import bisect
import re
import time
from collections import deque
from collections.abc import Awaitable, Sequence, Sized
from typing import Protocol, TypeVar

from gateway.federation.routing import WAITING_NOTE
from gateway.inventory.registry import NodeRegistry
from gateway.model.job import Job
from gateway.model.state import JobState

__all__ = [
    "API_BUCKETS",
    "CYCLE_BUCKETS",
    "SUBMIT_BUCKETS",
    "WAITING_NOTE",
    "WAIT_BUCKETS",
    "GatewayMetrics",
    "Histogram",
    "route_kind",
    "route_templates",
]

# seconds; chosen around the goals (a cycle well under a second, a submission in
# milliseconds, a queue wait from seconds to days)
CYCLE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
SUBMIT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
API_BUCKETS = SUBMIT_BUCKETS
WAIT_BUCKETS = (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 12 * 3600.0, 86400.0)
# how far a routed job's start was from the start routing predicted for it
PREDICTION_BUCKETS = (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 86400.0)

# the router's note on a job it cannot route yet (gateway/control/routing.py; a unit test
# keeps the two equal)
RECENT_ROUTES = 512  # job ids kept for the dashboard's decision log


class _Submitted(Protocol):
    @property
    def job_id(self) -> int | None: ...


_Outcome = TypeVar("_Outcome", bound=_Submitted)

_ID_SEGMENT = re.compile(r"/[0-9][0-9_\[\]\-,%]*(?=/|$)")


class Histogram:
    """Cumulative-bucket histogram of one series."""

    __slots__ = ("bounds", "count", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * len(self.bounds)  # per bucket, not cumulative
        self.total = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        """Count one value (in the first bucket whose bound is >= it)."""
        i = bisect.bisect_left(self.bounds, value)
        if i < len(self.counts):
            self.counts[i] += 1
        self.total += value
        self.count += 1

    def cumulative(self) -> list[int]:
        """Counts of values <= each bound, as the exposition format wants them."""
        out: list[int] = []
        running = 0
        for c in self.counts:
            running += c
            out.append(running)
        return out


class GatewayMetrics:
    """The gateway's observations since it started."""

    def __init__(self) -> None:
        # scheduling cycles, by Kueue's admission-attempt result ("success": started a job)
        self.cycles: dict[str, Histogram] = {}
        self.cycle_last_s = 0.0
        self.cycle_max_s = 0.0
        self.cycle_count = 0
        self.cycle_total_s = 0.0
        self.queue_len = 0  # jobs the last cycle considered
        # submissions, by result ("accepted": a job id was printed)
        self.submits: dict[str, Histogram] = {}
        # job life: starts (with the queue wait) and ends, counted as sdiag counts them
        self.admission_wait: dict[str, Histogram] = {}  # by cluster
        self.started = 0
        self.ended: dict[JobState, int] = {}
        # API requests by (method, route template)
        self.api: dict[tuple[str, str], Histogram] = {}
        self.api_routes: frozenset[str] = frozenset()
        # node agents, when the gateway receives them (gateway.inventory.registry)
        self.agents: NodeRegistry | None = None
        # routing (gateway/control/routing.py): decisions by (cluster, kind), moves out
        # of a cluster's queue by (from, to), jobs waiting for a prediction, and the ids
        # of the jobs decided last (newest at the right) for the dashboard's decision log
        self.routes: dict[tuple[str, str], int] = {}
        self.moves: dict[tuple[str, str], int] = {}
        self.route_waiting = 0
        self.recent_routes: deque[int] = deque(maxlen=RECENT_ROUTES)
        # routed jobs that started: |start - predicted start| by (cluster, early|late)
        self.prediction_error: dict[tuple[str, str], Histogram] = {}
        # preemption (gateway/control/preemption.py): victims ended, by (cluster, mode)
        self.preemptions: dict[tuple[str, str], int] = {}
        # the previous /metrics render: its own cost, shown on the next page
        self.render_s = 0.0

    def observe_cycle(self, seconds: float, considered: int, started: Sized) -> None:
        """One scheduling cycle that had pending jobs to consider (`started`: the jobs it
        started)."""
        result = "success" if len(started) else "inadmissible"
        hist = self.cycles.get(result)
        if hist is None:
            hist = self.cycles[result] = Histogram(CYCLE_BUCKETS)
        hist.observe(seconds)
        self.cycle_last_s = seconds
        self.cycle_max_s = max(self.cycle_max_s, seconds)
        self.cycle_count += 1
        self.cycle_total_s += seconds
        self.queue_len = considered

    def preempted(self, cluster: str, mode: str) -> None:
        """A preempted job's run ended (cancelled or requeued for its preemptor)."""
        key = (cluster, mode)
        self.preemptions[key] = self.preemptions.get(key, 0) + 1

    def observe_submit(self, seconds: float, accepted: bool) -> None:
        """One sbatch call, from its request parsed to its answer (stored when accepted)."""
        result = "accepted" if accepted else "rejected"
        hist = self.submits.get(result)
        if hist is None:
            hist = self.submits[result] = Histogram(SUBMIT_BUCKETS)
        hist.observe(seconds)

    async def timed_submit(self, submission: Awaitable[_Outcome]) -> _Outcome:
        """Await an sbatch call and count its duration (accepted: it printed a job id)."""
        began = time.perf_counter()
        out = await submission
        self.observe_submit(time.perf_counter() - began, out.job_id is not None)
        return out

    def job_changed(self, before: Job | None, after: Job) -> None:
        """A job record replaced: count a start (with its wait in the queue) and an end."""
        if after.start_time is not None and after.state.is_active:
            if before is None or not before.state.is_active or before.start_time is None:
                self.started += 1
                hist = self.admission_wait.get(after.cluster)
                if hist is None:
                    hist = self.admission_wait[after.cluster] = Histogram(WAIT_BUCKETS)
                queued = after.eligible_time or after.submit_time
                hist.observe(max(0.0, after.start_time - queued))
                if after.route_start is not None and after.routed_to == after.cluster:
                    self._prediction_met(after.cluster, after.start_time - after.route_start)
        elif after.state.is_finished and (before is None or not before.state.is_finished):
            self.ended[after.state] = self.ended.get(after.state, 0) + 1
        if after.route_note or (before is not None and before.route_note):
            self._route_changed(before, after)

    def _prediction_met(self, cluster: str, error_s: float) -> None:
        """A routed job started `error_s` seconds after (or before) the predicted start."""
        key = (cluster, "late" if error_s > 0 else "early")
        hist = self.prediction_error.get(key)
        if hist is None:
            hist = self.prediction_error[key] = Histogram(PREDICTION_BUCKETS)
        hist.observe(abs(error_s))

    def _route_changed(self, before: Job | None, after: Job) -> None:
        """Count a routing decision (a new note the router committed), a move out of a
        cluster's own queue (its run handed back, pending on another cluster), and the
        jobs waiting for a prediction (the router's note, kept in memory only)."""
        was_waiting = before is not None and _waits(before)
        now_waiting = _waits(after)
        self.route_waiting += int(now_waiting) - int(was_waiting)
        if before is None or now_waiting or after.route_note == before.route_note:
            return
        if after.state is not JobState.PENDING:
            return
        to = after.routed_to or ""
        if before.backend_id and not after.backend_id and after.cluster != before.cluster:
            key = (before.cluster, to)
            self.moves[key] = self.moves.get(key, 0) + 1
        rkey = (to, route_kind(before, after))
        self.routes[rkey] = self.routes.get(rkey, 0) + 1
        self.recent_routes.append(after.job_id)

    def route_of(self, path: str) -> str:
        """The route template a request path belongs to (`/v1/jobs/{id}`), or "other":
        any local user can ask for any path, and each label value is a series kept by
        Prometheus, so only the API's own routes are told apart."""
        if path in self.api_routes:
            return path
        shaped = _ID_SEGMENT.sub("/{id}", path)
        return shaped if shaped in self.api_routes else "other"

    def observe_api(self, method: str, path: str, seconds: float) -> None:
        """One API request, answered."""
        key = (method if method in _METHODS else "other", self.route_of(path))
        hist = self.api.get(key)
        if hist is None:
            hist = self.api[key] = Histogram(API_BUCKETS)
        hist.observe(seconds)


def _waits(job: Job) -> bool:
    return job.state is JobState.PENDING and job.route_note == WAITING_NOTE


def route_kind(before: Job, after: Job) -> str:
    """What a routing decision did: `stay` (the cluster it was routed to), `home` (its home
    cluster), `burst` (another one), `none` (no cluster could say when)."""
    if after.routed_to is None:
        return "none"
    current = before.cluster if before.backend_id else before.routed_to
    if after.routed_to == current:
        return "stay"
    return "home" if after.routed_to == after.origin else "burst"


_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})


def route_templates(paths: Sequence[str]) -> frozenset[str]:
    """Route paths with their parameters spelled `{id}`, as `route_of` shapes paths."""
    return frozenset(re.sub(r"\{[^}]*\}", "{id}", p) for p in paths)
