"""Walltime backfill: reservations for blocked jobs, computed from running jobs' time limits.

Why a plan and not a single "shadow time": a gang needs specific nodes, GPUs and a topology
shape, so "the top job could start at T" only means something with the nodes it would get.
The planner therefore reserves a whole placement (every rank, chosen by the same filters,
scores and placement plugins as a start now) over [T, T + time limit), and a lower job may
start now only if, on every node it would use, its share fits next to the running jobs and
the binding reservations at every instant of its own run. EASY keeps one binding
reservation (the top blocked job), conservative keeps `bf_depth`; every other tested job
still gets an expected start and nodes (what `squeue --start` shows), computed against the
running jobs and the binding reservations only: an estimate, never a promise, and one that
costs a walk over running jobs' ends rather than a re-plan of every queued job.

Searches are memoised per request shape within a cycle (jobs of one array, or of one
user's workflow, ask for the same thing) and invalidated whenever a start or a
reservation changes what is free; the order in which running jobs give nodes back is
computed once per such change and shared by every search (bf_timeline.py); that is what
keeps a cycle over a long queue cheap.

Time is what jobs ask for: a running job ends at start + time limit; a job without a limit
never ends (it is never a reason for a reservation to come earlier, and it can start now
only where no binding reservation ever needs its resources). Planned starts are rounded up
to bf_resolution and never lie beyond bf_window.

The planner is per cycle, mutates only its own working state and the cycle's free map,
and performs no IO.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from operator import attrgetter

from gateway.model.cluster import UNAVAILABLE
from gateway.model.job import Job, RankPlacement
from gateway.model.jobspec import Sharing
from gateway.scheduler.bf_params import BackfillParams
from gateway.scheduler.bf_running import End, cluster_nodes, duration_s, running_index
from gateway.scheduler.bf_timeline import Releases, Use, uses
from gateway.scheduler.plugins import NodeTests, Registry
from gateway.scheduler.request import NodeRequest, on_partitions
from gateway.scheduler.selection import Target
from gateway.scheduler.snapshot import NodeFree, Snapshot

__all__ = ["Chosen", "PlaceFn", "Planned", "Planner", "duration_s"]

Chosen = tuple[Target, tuple[RankPlacement, ...]]
# the cycle's placement on the first target that fits, on the free map given (mutated);
# the flag says every node of the map already passed the filters for this request and target
PlaceFn = Callable[[Job, NodeRequest, Sequence[Target], dict[str, NodeFree], bool], Chosen | None]

_STATE = attrgetter("node.state")
_NO_GPUS: frozenset[int] = frozenset()
_UNAVAILABLE_IDS = frozenset(map(id, UNAVAILABLE))  # by identity: an Enum hashes in Python


@dataclass(frozen=True, slots=True)
class Planned:
    """When and where a pending job is expected to start (squeue %S and %Y)."""

    start: float
    nodes: tuple[str, ...]
    cluster: str
    partition: str


def _exclusive(job: Job) -> bool:
    return job.spec.sharing is Sharing.EXCLUSIVE


def _take(f: NodeFree, p: RankPlacement, exclusive: bool) -> NodeFree:
    """`f` less one rank's share, exactly as Statement.allocate takes it."""
    return NodeFree(
        f.node,
        0 if exclusive else f.cpus - p.cpus,
        0 if exclusive else f.memory_mb - p.memory_mb,
        frozenset() if exclusive else f.gpus - set(p.gpus),
        f.exclusive_jobs + int(exclusive),
        f.jobs + 1,
    )


class Planner:
    """Start-now checks against binding reservations, and expected starts for blocked jobs."""

    def __init__(
        self,
        snap: Snapshot,
        reg: Registry,
        params: BackfillParams,
        place: PlaceFn,
        tests: NodeTests,
    ) -> None:
        self._snap = snap
        self._reg = reg
        self._tests = tests  # the cycle's filter verdicts, shared with its start tests
        self._params = params
        self._place = place
        self.now = snap.now
        self.plan: dict[int, Planned] = {}
        self.blocked = False
        self._tested = 0
        self._seq = 0
        self._ends: list[End] = []  # running shares by end
        self._running: dict[str, tuple[Use, ...]] = {}  # node -> running shares that end
        self._binding: dict[str, list[Use]] = {}  # node -> reservations not to delay
        self._binding_start = math.inf
        self._binding_starts: list[float] = []
        self._views: dict[tuple[int, tuple[bool, ...]], dict[str, NodeFree]] = {}
        self._hold_ends: list[float] = []
        self._reservations = 0
        self._estimates = 0
        # memo: bumped by every start and reservation (what is free, and when, changed)
        self._version = 0
        self._no_start: dict[tuple[NodeRequest, tuple[Target, ...]], tuple[int, float]] = {}
        self._windows: dict[tuple[str, tuple[bool, ...]], tuple[NodeFree, NodeFree]] = {}
        self._found: dict[tuple[NodeRequest, Target, float, int], tuple[float, Chosen] | None] = {}
        # nodes with a free cpu: no job fits anywhere else, and the cycle only takes
        self._pool = {n: f for n, f in snap.free.items() if f.cpus > 0}
        self._open = len(self._pool)  # pool nodes that still have a free cpu
        self._full: dict[str, NodeFree] = {}  # nodes this cycle filled (left the pool)
        self._any_down: bool | None = None
        self._indexed = False  # running jobs' ends, read only once a job is blocked
        self._started: list[tuple[Job, tuple[RankPlacement, ...], float]] = []  # until then
        self._timeline: tuple[tuple[int, float], Releases] | None = None
        self._spans: dict[tuple[str, float, float], tuple[NodeFree, int, NodeFree]] = {}

    def _index_running(self) -> None:
        if self._indexed:
            return
        self._indexed = True
        index = running_index(self._snap)  # kept across cycles (bf_running.py); not mutated
        self._ends = list(index.ends)
        self._running = dict(index.by_node)
        self._seq = index.next_seq
        for job, placement, end in self._started:
            self._track(job, placement, self.now, end)
        self._ends.sort()  # by (end, seq): seq is unique, so no further field is compared

    # --- what the cycle calls -------------------------------------------------------

    @property
    def any_down(self) -> bool:
        """Whether some node is down or drained (read only when a job cannot start)."""
        if self._any_down is None:
            states = map(id, map(_STATE, self._snap.free.values()))
            self._any_down = not _UNAVAILABLE_IDS.isdisjoint(states)
        return self._any_down

    def may_test(self) -> bool:
        """Whether one more job behind a blocked one may be examined (bf_max_job_test;
        plain FCFS examines none)."""
        if self._params.mode == "fcfs":
            return False
        self._tested += 1
        return self._tested <= self._params.max_job_test

    def exhausted(self) -> bool:
        """Whether `may_test` will refuse every further job this cycle."""
        return self._params.mode == "fcfs" or self._tested >= self._params.max_job_test

    def start_now(
        self, job: Job, req: NodeRequest, targets: Sequence[Target], free: dict[str, NodeFree]
    ) -> Chosen | None:
        """Place the job now if it fits without delaying a binding reservation; the free
        map takes the placement."""
        dur = duration_s(job)
        end = self.now + dur
        shape = (req, tuple(targets))
        failed = self._no_start.get(shape)
        if failed is not None and failed[0] == self._version and dur >= failed[1]:
            return None  # a shorter job of this shape did not fit, and nothing changed since
        if req.nodes > self._open:
            return None  # every rank needs a cpu on a node of its own
        if end <= self._binding_start:  # over before any binding reservation begins
            chosen = self._place(job, req, targets, self._pool, False)
            view = self._pool
        else:
            view = self._view_now(end)
            # a placement takes its nodes from the view: fewer nodes there, no placement
            chosen = None if len(view) < req.nodes else self._place(job, req, targets, view, False)
        if chosen is None:
            self._no_start[shape] = (self._version, dur)
            return None
        self._version += 1
        exclusive = _exclusive(job)
        for p in chosen[1]:
            if view is not self._pool:
                self._pool[p.node] = _take(self._pool[p.node], p, exclusive)
            free[p.node] = self._pool[p.node]
            if free[p.node].cpus <= 0:  # full: out of the pool, so no test scans it again
                self._open -= 1
                self._full[p.node] = self._pool.pop(p.node)
        if dur != math.inf and self._indexed:
            self._track(job, chosen[1], self.now, end, insort=True)
        elif dur != math.inf:
            self._started.append((job, chosen[1], end))
        return chosen

    def close(self) -> None:
        """Drop the release timeline once the cycle is done: it calls back into the planner
        (the one reference cycle a planner makes), and until broken that cycle left all the
        planner's records to the garbage collector instead of freeing them on return."""
        self._timeline = None

    def hold(self, placement: Sequence[RankPlacement], free: dict[str, NodeFree]) -> None:
        """Keep a preemptor's placement out of what later jobs may use now (it starts
        once its victims have ended: scheduler/preempt.py); never below nothing."""
        self._version += 1
        for p in placement:
            cur = self._pool.get(p.node)
            if cur is None:
                continue
            free[p.node] = self._pool[p.node] = replace(
                cur,
                cpus=max(0, cur.cpus - p.cpus),
                memory_mb=max(0, cur.memory_mb - p.memory_mb),
                gpus=cur.gpus - set(p.gpus),
                jobs=cur.jobs + 1,
            )
            if free[p.node].cpus <= 0:
                self._open -= 1
                self._full[p.node] = self._pool.pop(p.node)

    def block(
        self, job: Job, req: NodeRequest, targets: Sequence[Target], free: dict[str, NodeFree]
    ) -> None:
        """The job cannot start now: find its earliest start and nodes, and reserve them
        (binding for the first `binding` blocked jobs)."""
        self.blocked = True
        binding = self._reservations < self._params.binding
        if not binding:
            if self._estimates >= self._params.estimates:
                return
            self._estimates += 1
        dur = duration_s(job)
        horizon = self.now + self._params.window_s
        best: tuple[float, Chosen] | None = None
        for target in targets:
            limit = horizon if best is None else min(horizon, best[0])
            key = (req, target, dur, self._version)
            if key in self._found:
                found = self._found[key]
            else:
                self._index_running()  # only now: a cycle that plans nothing never reads it
                found = self._found[key] = self._earliest(job, req, target, dur, horizon)
            if found is not None and found[0] > limit:
                found = None
            if found is not None and (best is None or found[0] < best[0]):
                best = found
        if best is None:
            return
        start, (target, placement) = best
        nodes = tuple(p.node for p in placement)
        self.plan[job.job_id] = Planned(start, nodes, target.cluster, target.partition)
        if not binding:
            return  # an estimate only: lower jobs may take these nodes meanwhile
        self._reservations += 1
        self._version += 1
        for node, use in uses(placement, _exclusive(job), start, start + dur, self._snap.free):
            self._binding.setdefault(node, []).append(use)
        self._binding_start = min(self._binding_start, start)
        bisect.insort(self._binding_starts, start)
        if dur != math.inf:
            bisect.insort(self._hold_ends, start + dur)

    # --- the plan -------------------------------------------------------------------

    def _track(
        self,
        job: Job,
        placement: Sequence[RankPlacement],
        start: float,
        end: float,
        insort: bool = False,
    ) -> None:
        """Remember a running job's shares, to give them back when it ends."""
        for node, use in uses(placement, _exclusive(job), start, end, self._snap.free):
            self._running[node] = (*self._running.get(node, ()), use)
            entry = (end, self._seq, node, use)
            self._seq += 1
            if insort:
                bisect.insort(self._ends, entry)
            else:
                self._ends.append(entry)

    def _earliest(
        self, job: Job, req: NodeRequest, target: Target, dur: float, horizon: float
    ) -> tuple[float, Chosen] | None:
        """The first time (running jobs ending, reservations ending) at which the gang
        fits on `target` for its whole run, with the nodes it would get then. Nodes are
        released in end order and only those are re-checked, so a search costs the ends
        it walks, not the cluster's size."""
        one = on_partitions(req, (target.partition,))
        within = cluster_nodes(self._snap, target.cluster)
        binding, pool = self._binding, self._pool
        ok = self._tests.test(one)

        cands: set[str] = set()  # nodes that fit once what has ended by t is given back
        plain: dict[str, NodeFree] = {}  # those no binding reservation holds, as of t
        held: set[str] = set()  # those a binding reservation holds (checked per window)

        def admit(n: str, f: NodeFree) -> None:
            cands.add(n)
            if n in binding:
                held.add(n)
            else:
                plain[n] = f

        for n, f in pool.items():
            if n in within and ok(f):
                admit(n, f)
        released: set[str] = set()
        timeline = self._releases(horizon)
        k = 0
        while (step := timeline.step(k)) is not None:
            k += 1
            t, freed = step
            for node, f in freed:
                released.add(node)
                if node in plain:  # a second end on it: checked again, so the view
                    if ok(f):  # handed to placement holds only nodes that pass
                        plain[node] = f
                    else:
                        del plain[node]
                        cands.discard(node)
                elif node in within and node not in cands and ok(f):
                    admit(node, f)
            if len(cands) < req.nodes:
                continue
            stop = t + dur
            view = dict(plain)
            for n in held:
                f = timeline.window(n, t, stop)
                if ok(f):
                    view[n] = f
            if len(view) < req.nodes:
                continue
            # reserve nodes that are busy now when they suffice: the idle ones stay free
            # for backfilling (what EASY's "extra nodes" are when counted, not named)
            later = {n: f for n, f in view.items() if n in released and n not in pool}
            chosen = None
            if len(later) >= req.nodes:
                chosen = self._place(job, req, (target,), later, True)
            if chosen is None:
                chosen = self._place(job, req, (target,), view, True)
            if chosen is not None:
                return t, chosen
        return None

    def _releases(self, horizon: float) -> Releases:
        """The running jobs' ends as steps, shared by the searches of this version."""
        kept = self._timeline
        if kept is not None and kept[0] == (self._version, horizon):
            return kept[1]
        made = Releases(
            self._ends,
            self._hold_ends,
            self.now,
            self._params.resolution_s,
            horizon,
            self._pool_or_free,
            self._span,
        )
        self._timeline = ((self._version, horizon), made)
        return made

    def _view_now(self, end: float) -> dict[str, NodeFree]:
        """The pool as a run from now to `end` sees it next to the binding reservations.
        Kept while nothing starts or is reserved, per set of reservations the run overlaps
        (a failed placement leaves its view untouched; a success bumps the version)."""
        key = (self._version, tuple(end > s for s in self._binding_starts))
        view = self._views.get(key)
        if view is None:
            view = {}
            for n, f in self._pool.items():
                if n in self._binding:
                    f = self._window_now(n, f, end, key[1])
                    if f.cpus <= 0:
                        continue  # reserved for the whole run: no share fits
                view[n] = f
            if len(self._views) >= 64:
                self._views.clear()
            self._views[key] = view
        return view

    def _window_now(self, n: str, f: NodeFree, end: float, overlaps: tuple[bool, ...]) -> NodeFree:
        """`_window(n, f, now, end)`, kept per node and per set of reservations the run
        overlaps (`overlaps`: which binding starts are before `end`, which says which of the
        node's holds the run overlaps; that is all it depends on while the node's record `f`
        is unchanged): a cycle tests hundreds of jobs against the same few reservations."""
        key = (n, overlaps)
        hit = self._windows.get(key)
        if hit is not None and hit[0] is f:
            return hit[1]
        found = self._window(n, f, self.now, end, self._binding)
        self._windows[key] = (f, found)
        return found

    def _span(self, n: str, t0: float, t1: float) -> NodeFree:
        """`_window` of node `n`'s current record over [t0, t1), kept while that record
        and the binding reservations are unchanged (all it depends on: a start replaces
        the records of its own nodes only), since jobs of equal time limits searched at
        the same step ask for the same spans."""
        f = self._pool_or_free(n)
        key = (n, t0, t1)
        hit = self._spans.get(key)
        if hit is not None and hit[0] is f and hit[1] == self._reservations:
            return hit[2]
        found = self._window(n, f, t0, t1, self._binding)
        if len(self._spans) >= 1 << 18:
            self._spans.clear()
        self._spans[key] = (f, self._reservations, found)
        return found

    def _pool_or_free(self, node: str) -> NodeFree:
        found = self._pool.get(node) or self._full.get(node)
        return found if found is not None else self._snap.free[node]

    def _window(
        self, n: str, now_free: NodeFree, t0: float, t1: float, holds: dict[str, list[Use]]
    ) -> NodeFree:
        """What node `n` has free at every instant of [t0, t1): its capacity less the
        most that running jobs (those not ended yet) and reservations hold at once, per
        resource; GPUs held by anyone at any instant are not free."""
        node = now_free.node
        every = frozenset(g.index for g in node.gpus) if node.gpus else _NO_GPUS
        hs = [h for h in holds.get(n, ()) if h.start < t1 and h.end > t0]
        points = sorted({t0, *(h.start for h in hs if h.start > t0)}) if hs else (t0,)
        now = self.now
        running = [u for u in self._running.get(n, ()) if u.start <= now]  # may end by b
        c0, m0 = node.cpus - now_free.cpus, node.memory_mb - now_free.memory_mb
        g0 = every - now_free.gpus
        top_c = top_m = top_x = top_j = 0
        held: set[int] = set()
        for b in points:
            c, m, g = c0, m0, set(g0)
            x, jobs = now_free.exclusive_jobs, now_free.jobs
            for u in running:
                if u.end <= b:
                    c, m, x, jobs = c - u.cpus, m - u.memory_mb, x - int(u.exclusive), jobs - 1
                    g -= u.gpus
            if jobs <= 0:
                c = m = x = jobs = 0
                g.clear()
            for h in hs:
                if h.start <= b < h.end:
                    c, m, x, jobs = c + h.cpus, m + h.memory_mb, x + int(h.exclusive), jobs + 1
                    g |= h.gpus
            top_c, top_m = max(top_c, c), max(top_m, m)
            top_x, top_j = max(top_x, x), max(top_j, jobs)
            held |= g
        return NodeFree(
            node,
            max(node.cpus - top_c, 0),
            max(node.memory_mb - top_m, 0),
            every - held,
            top_x,
            top_j,
        )
