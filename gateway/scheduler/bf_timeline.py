"""The order in which running jobs give their nodes back, shared by every search of a cycle.

Why a shared object: the planner searches an earliest start for each blocked job it
tests (hundreds per cycle), and each search used to walk the running jobs' ends again,
rebuilding every released node's record. What is released, and when, does not depend on
the job asking (only on the running jobs, the binding reservations and the bf_* grid), so
it is computed once per planner version, lazily (a search that stops early does not pay
for the rest), and each search only asks its filters about the records it is handed.

Time steps are the running jobs' ends and the binding reservations' ends, rounded up to
bf_resolution, never before now, never past the horizon (bf_window).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import NamedTuple

from gateway.model.cluster import Node
from gateway.model.job import RankPlacement
from gateway.scheduler.records import whole
from gateway.scheduler.snapshot import NodeFree

__all__ = ["Releases", "Step", "Use", "give_back", "round_up", "uses"]


class Use(NamedTuple):
    """One job's share of one node over [start, end) (a tuple: a cycle makes one per rank
    of every running job, and a tuple is built several times faster than a dataclass)."""

    start: float
    end: float
    cpus: int
    memory_mb: int
    gpus: frozenset[int]
    exclusive: bool


_NO_GPUS: frozenset[int] = frozenset()

# one time step: the instant, and each node given back then with its record afterwards
# (a node may appear several times, in end order, when several of its jobs end together)
Step = tuple[float, tuple[tuple[str, NodeFree], ...]]


def _use(node: Node, p: RankPlacement, exclusive: bool, start: float, end: float) -> Use:
    """What a rank holds: the whole node when exclusive (as Statement.allocate takes it)."""
    if exclusive:
        every = frozenset(g.index for g in node.gpus) if node.gpus else _NO_GPUS
        return Use(start, end, node.cpus, node.memory_mb, every, True)
    return Use(start, end, p.cpus, p.memory_mb, frozenset(p.gpus), False)


def uses(
    placement: Sequence[RankPlacement],
    exclusive: bool,
    start: float,
    end: float,
    free: Mapping[str, NodeFree],
) -> Iterator[tuple[str, Use]]:
    """Each rank's node (those `free` knows) and share; ranks of one shape share one
    (immutable) Use, since every cycle indexes every rank of every running job."""
    shared: dict[tuple[object, ...], Use] = {}
    for p in placement:
        known = free.get(p.node)
        if known is None:
            continue
        node = known.node
        shape = (
            (node.cpus, node.memory_mb, node.gpus) if exclusive else (p.cpus, p.memory_mb, p.gpus)
        )
        use = shared.get(shape)
        if use is None:
            use = shared[shape] = _use(node, p, exclusive, start, end)
        yield p.node, use


def round_up(t: float, res: int) -> float:
    """`t` on the bf_resolution grid (the next multiple of `res` seconds)."""
    return float(math.ceil(t / res) * res)


def give_back(f: NodeFree, u: Use) -> NodeFree:
    """`f` once the job holding `u` has ended (a node left with no job is whole again)."""
    node = f.node
    jobs = max(f.jobs - 1, 0)
    if jobs == 0:
        return whole(node)  # one record per node: searches give nodes back by the hundred
    return NodeFree(
        node,
        min(node.cpus, f.cpus + u.cpus),
        min(node.memory_mb, f.memory_mb + u.memory_mb),
        f.gpus | u.gpus,
        max(f.exclusive_jobs - int(u.exclusive), 0),
        jobs,
    )


class Releases:
    """The steps of one planner version, computed on demand and kept for later searches.

    `ends` (end, seq, node, use) and `hold_ends` are sorted and must not change while this
    object is in use (the planner makes a new one whenever its version changes); `current`
    reads a node's record as it stands now; `window` is the planner's `_window` over the
    binding reservations."""

    def __init__(
        self,
        ends: Sequence[tuple[float, int, str, Use]],
        hold_ends: Sequence[float],
        now: float,
        resolution_s: int,
        horizon: float,
        current: Callable[[str], NodeFree],
        window: Callable[[str, float, float], NodeFree],
    ) -> None:
        self._ends = ends
        self._hold_ends = hold_ends
        self._now = now
        self._res = resolution_s
        self._horizon = horizon
        self._current = current
        self._window = window
        self._i = self._j = 0
        self._base: dict[str, NodeFree] = {}
        self._over = False
        self.steps: list[Step] = []

    def step(self, k: int) -> Step | None:
        """The `k`-th step (from 0); None past the last end or the horizon."""
        while k >= len(self.steps):
            if self._over or not self._extend():
                self._over = True
                return None
        return self.steps[k]

    def window(self, node: str, t0: float, t1: float) -> NodeFree:
        """What `node` has free at every instant of [t0, t1) next to the binding
        reservations (the planner's `_window` on the node's current record)."""
        return self._window(node, t0, t1)

    def _extend(self) -> bool:
        ends, hold_ends = self._ends, self._hold_ends
        i, j = self._i, self._j
        t_end = ends[i][0] if i < len(ends) else math.inf
        t_hold = hold_ends[j] if j < len(hold_ends) else math.inf
        raw = min(t_end, t_hold)
        if raw == math.inf:
            return False
        t = round_up(max(raw, self._now + 1e-6), self._res)
        if t > self._horizon:
            return False
        base, current = self._base, self._current
        freed: list[tuple[str, NodeFree]] = []
        while i < len(ends) and ends[i][0] <= t:
            node = ends[i][2]
            f = give_back(base.get(node) or current(node), ends[i][3])
            base[node] = f
            freed.append((node, f))
            i += 1
        while j < len(hold_ends) and hold_ends[j] <= t:
            j += 1
        self._i, self._j = i, j
        self.steps.append((t, tuple(freed)))
        return True
