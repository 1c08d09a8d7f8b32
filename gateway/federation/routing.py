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
- Packing (`pack_s`, with each prediction's cluster `size`): a job that fits clusters of
  different sizes favours the smallest by `pack_s` seconds, never more than its own length
  (`length_s`, its time limit). Where it starts is what its own slowdown sees; what the
  others see is which cluster it occupies: a job that could run on a small cluster and
  takes the big one's processors delays the jobs only the big one can run (wider than the
  rest); the length cap keeps a short job from trading a long wait for it. The favour adds
  to the margins, like a weight. Off by default: the trace replay (benchmarks/RESULTS.md)
  finds it lowers mean bounded slowdown where much of the work fits only the big cluster,
  and raises it where little does.
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
    size: int = 0  # the cluster's CPUs, for packing (0: not given, never favoured)


@dataclass(frozen=True, slots=True)
class RoutePolicy:
    home: str  # the home cluster (preferred within the margin)
    margin_s: float = 300.0  # home wins unless another cluster starts it this much sooner
    weights: Mapping[str, float] = field(default_factory=dict)  # seconds added per cluster
    pack_s: float = 0.0  # the smallest cluster that fits is favoured by this (module doc)

    def __post_init__(self) -> None:
        if not math.isfinite(self.margin_s) or self.margin_s < 0:
            raise ValueError(f"routing margin must be a finite number >= 0, not {self.margin_s}")
        if not math.isfinite(self.pack_s) or self.pack_s < 0:
            raise ValueError(f"routing pack must be a finite number >= 0, not {self.pack_s}")
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


def _packed(sizes: Sequence[int]) -> int:
    """The size that packing favours: the smallest given, if a bigger one is given too
    (0: none favoured)."""
    given = [z for z in sizes if z > 0]
    return min(given) if given and max(given) > min(given) else 0


def _pack(policy: RoutePolicy, length_s: float | None) -> float:
    """Seconds of packing favour for a job of `length_s` (None: not capped)."""
    if length_s is None or math.isnan(length_s):
        return policy.pack_s
    return min(policy.pack_s, max(length_s, 0.0))


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
    length_s: float | None = None,
) -> Route:
    """The cluster `preds` says the job should be pending on, and why (module docstring);
    `length_s`: the job's time limit in seconds (caps packing; None: not capped)."""
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
    pack = _pack(policy, length_s)
    best = _best(compared, policy, burst, now, anchor, current, pack)
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
    packs = f", pack {_span(pack)}" if pack > 0 and _packed([p.size for p in compared]) else ""
    return Route(chosen.cluster, f"{head}{tail} (margin {margin}{packs})", compared)


def _best(
    preds: Sequence[Prediction],
    policy: RoutePolicy,
    burst: Burst,
    now: float | None,
    anchor: str,
    current: str | None,
    pack: float,
) -> int | None:
    """Index of the winning known prediction (lowest (score, rank, index)), None if none known."""
    best: tuple[float, int, int] | None = None
    tight = _packed([p.size for p in preds])
    for i, p in enumerate(preds):
        if p.start is None or math.isnan(p.start):
            continue
        eff = (p.start if now is None else max(p.start, now)) + policy.weights.get(p.cluster, 0.0)
        if tight and p.size == tight:
            eff -= pack
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
    sizes: Sequence[int] | None = None,
    lengths: Sequence[float | None] | None = None,
) -> list[int | None]:
    """`choose` for many jobs over the same `clusters` (one row of starts per job, in the
    order of `clusters`; `sizes`: each cluster's CPUs, `lengths`: each job's `length_s`):
    the index of each job's cluster, None for nowhere. Same rule as `choose` (the tests
    check it), without building predictions or reasons."""
    n = len(clusters)
    if sizes is not None and len(sizes) != n:
        raise ValueError(f"{len(sizes)} cluster sizes for {n} clusters")
    anchor = clusters.index(policy.home) if policy.home in clusters else 0
    weights = [policy.weights.get(c, 0.0) for c in clusters]
    tight = _packed(sizes or ())
    packed = [bool(tight) and sizes is not None and sizes[i] == tight for i in range(n)]
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
        pack = _pack(policy, None if lengths is None else lengths[j]) if tight else 0.0
        best_key: tuple[float, int, int] | None = None
        for i in range(n):
            s = row[i]
            if s is None or s != s:  # unknown, or NaN (as unknown)
                continue
            eff = (s if s > lo else lo) + weights[i]
            if packed[i]:
                eff -= pack
            favoured = (i == anchor) == home_favoured
            key = (eff - m, 0, i) if i == cur else (eff - m, 1, i) if favoured else (eff, 2, i)
            if best_key is None or key < best_key:
                best_key = key
        out.append(None if best_key is None else best_key[2])
    return out
