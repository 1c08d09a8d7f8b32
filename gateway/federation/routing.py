"""Where a pending job should be: the pure routing decision over predicted starts.

Every eligible cluster has a predicted start for the job (Slurm's own backfill planner, our
own plan, or None when the cluster cannot say). Each candidate's *effective* start is the
prediction (clamped to `now`) plus the cluster's weight (seconds of cost/preference), and the
candidate with the lowest *score* wins, where the score is the effective start minus the
margin for a favoured cluster:

- ALLOWED favours home: home stays unless another cluster starts it more than the margin sooner.
- PREFER favours every other cluster: it goes away unless home is more than the margin sooner.
- NEVER, and a job that has not yet waited `burst_after_s`, consider the anchor only (home, or
  the first prediction when home is not eligible), whatever its prediction.
- The cluster the job is pending on now (`current`) is favoured too, so moving it away needs
  the margin: a prediction that wobbles around a threshold does not flap the job. Favours do
  not add up (a job at home leaves at the same threshold as a new one; a burst job returns
  home as soon as home is sooner at all), so the hysteresis band is one margin wide.
- An unknown prediction (None, or NaN) is never chosen over a known one; with none known the
  job goes nowhere.

Ties go to the current cluster, then the favoured one, then the order of `preds`. No IO and no
clock: `now` is passed in (None: predictions are used as given and printed as UTC times).
`choose_batch` is the same rule without the explanation, for replays and benchmarks.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gateway.model.values import Burst

__all__ = [
    "WAITING_NOTE",
    "Burst",
    "Prediction",
    "Route",
    "RoutePolicy",
    "choose",
    "choose_batch",
]

# the route note of a job not routed yet because a cluster's prediction is still being asked
WAITING_NOTE = "waiting for start predictions"


@dataclass(frozen=True, slots=True)
class Prediction:
    cluster: str
    start: float | None  # epoch seconds the job is expected to start there; None: unknown


@dataclass(frozen=True, slots=True)
class RoutePolicy:
    home: str  # the home cluster (preferred within the margin)
    margin_s: float = 300.0  # home wins unless another cluster starts it this much sooner
    weights: Mapping[str, float] = field(default_factory=dict)  # seconds added per cluster

    def __post_init__(self) -> None:
        if not math.isfinite(self.margin_s) or self.margin_s < 0:
            raise ValueError(f"routing margin must be a finite number >= 0, not {self.margin_s}")
        bad = [c for c, w in self.weights.items() if not math.isfinite(w)]
        if bad:
            raise ValueError(f"routing weight of cluster {bad[0]!r} must be finite")


@dataclass(frozen=True, slots=True)
class Route:
    cluster: str | None  # None: nowhere (no eligible cluster with a prediction)
    reason: str  # one line a user reads in `scontrol show job`
    compared: tuple[Prediction, ...]


def _span(seconds: float) -> str:
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    m = s // 60
    return f"{m}m" if m < 60 else f"{m // 60}h{m % 60:02d}m"


def _when(start: float | None, now: float | None) -> str:
    if start is None or math.isnan(start):
        return "unknown"
    if math.isinf(start):
        return "never"
    if now is None:
        return "at " + time.strftime("%H:%M:%S", time.gmtime(start))
    return "now" if start <= now else f"in {_span(start - now)}"


def _all(preds: Sequence[Prediction], now: float | None) -> str:
    return ", ".join(f"{p.cluster} {_when(p.start, now)}" for p in preds)


def _gated(burst: Burst, waited_s: float, burst_after_s: float | None) -> bool:
    """True when only the anchor may be considered (the job may not leave home yet)."""
    return burst is Burst.NEVER or (burst_after_s is not None and waited_s < burst_after_s)


def choose(
    preds: Sequence[Prediction],
    policy: RoutePolicy,
    burst: Burst = Burst.ALLOWED,
    waited_s: float = 0.0,
    burst_after_s: float | None = None,
    now: float | None = None,
    current: str | None = None,
) -> Route:
    """The cluster `preds` says the job should be pending on, and why (module docstring)."""
    compared = tuple(preds)
    if not compared:
        return Route(None, "nowhere: no eligible cluster", compared)
    names = [p.cluster for p in compared]
    anchor = policy.home if policy.home in names else names[0]
    margin = _span(policy.margin_s)
    if _gated(burst, waited_s, burst_after_s):
        start = compared[names.index(anchor)].start
        why = (
            "home only (burst=never)"
            if burst is Burst.NEVER
            else f"home only until waited {_span(burst_after_s or 0.0)} (burst-after)"
        )
        return Route(anchor, f"{why}: {anchor} {_when(start, now)}", compared)
    best = _best(compared, policy, burst, now, anchor, current)
    if best is None:
        return Route(None, f"nowhere: no start predicted ({_all(compared, now)})", compared)
    chosen = compared[best]
    starts = "starts " + _when(chosen.start, now)
    shown = {chosen.cluster}
    if chosen.cluster == current:
        head = f"stay: {current} (current) {starts}"
    elif chosen.cluster == anchor:
        head = f"home: {anchor} {starts}"
    else:
        shown.add(anchor)
        home_start = compared[names.index(anchor)].start
        head = f"burst: {chosen.cluster} {starts}, home ({anchor}) {_when(home_start, now)}"
    rest = [f"{p.cluster} {_when(p.start, now)}" for p in compared if p.cluster not in shown]
    tail = f"; {', '.join(rest)}" if rest else ""
    return Route(chosen.cluster, f"{head}{tail} (margin {margin})", compared)


def _best(
    preds: Sequence[Prediction],
    policy: RoutePolicy,
    burst: Burst,
    now: float | None,
    anchor: str,
    current: str | None,
) -> int | None:
    """Index of the winning known prediction (lowest (score, rank, index)), None if none known."""
    best: tuple[float, int, int] | None = None
    for i, p in enumerate(preds):
        if p.start is None or math.isnan(p.start):
            continue
        eff = (p.start if now is None else max(p.start, now)) + policy.weights.get(p.cluster, 0.0)
        favoured = (p.cluster == anchor) == (burst is Burst.ALLOWED)
        is_current = p.cluster == current
        score = eff - policy.margin_s if (favoured or is_current) else eff
        key = (score, 0 if is_current else 1 if favoured else 2, i)
        if best is None or key < best:
            best = key
    return None if best is None else best[2]


def choose_batch(
    clusters: Sequence[str],
    starts: Sequence[Sequence[float | None]],
    policy: RoutePolicy,
    bursts: Sequence[Burst] | None = None,
    waited_s: Sequence[float] | None = None,
    burst_after_s: Sequence[float | None] | None = None,
    now: float | None = None,
    current: Sequence[int | None] | None = None,
) -> list[int | None]:
    """`choose` for many jobs over the same `clusters` (one row of starts per job, in the
    order of `clusters`): the index of each job's cluster, None for nowhere. Same rule as
    `choose` (the tests check it), without building predictions or reasons."""
    n = len(clusters)
    anchor = clusters.index(policy.home) if policy.home in clusters else 0
    weights = [policy.weights.get(c, 0.0) for c in clusters]
    m = policy.margin_s
    lo = -math.inf if now is None else now
    out: list[int | None] = []
    for j, row in enumerate(starts):
        if len(row) != n:
            raise ValueError(f"job {j}: {len(row)} predictions for {n} clusters")
        burst = Burst.ALLOWED if bursts is None else bursts[j]
        after = None if burst_after_s is None else burst_after_s[j]
        if _gated(burst, 0.0 if waited_s is None else waited_s[j], after):
            out.append(anchor)
            continue
        cur = None if current is None else current[j]
        home_favoured = burst is Burst.ALLOWED
        best_key: tuple[float, int, int] | None = None
        for i in range(n):
            s = row[i]
            if s is None or s != s:  # unknown, or NaN (as unknown)
                continue
            eff = (s if s > lo else lo) + weights[i]
            favoured = (i == anchor) == home_favoured
            key = (eff - m, 0, i) if i == cur else (eff - m, 1, i) if favoured else (eff, 2, i)
            if best_key is None or key < best_key:
                best_key = key
        out.append(None if best_key is None else best_key[2])
    return out
