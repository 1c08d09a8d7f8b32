"""Running jobs' shares by node and by end, kept across cycles.

Why: once a job is blocked the planner needs every running rank's share (to give nodes
back in end order, and for the windows next to reservations), and rebuilding that index at
every cycle was ~14 % of a trace replay, though between two cycles only a few jobs start or
end. The index is kept per set of clusters and updated by difference: a job still running
as the same record, on the same node descriptions, keeps its entry; ended jobs' entries go;
new ones are added. The result is what a rebuild gives, order included: equal ends stay in
the order the snapshot lists their jobs (when the snapshot's order is not the kept order
with new jobs at the end, the index is rebuilt). An update makes new containers and never
mutates an index already handed out, so a planner may hold one while another cycle updates.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from operator import attrgetter

from gateway.model.cluster import ClusterState, Node
from gateway.model.job import Job
from gateway.model.jobspec import Sharing
from gateway.model.values import INFINITE
from gateway.scheduler.bf_timeline import Use, uses
from gateway.scheduler.snapshot import NodeFree, Snapshot

__all__ = ["End", "RunningIndex", "cluster_nodes", "duration_s", "running_index"]

End = tuple[float, int, str, Use]  # (end, seq, node, share): seq orders equal ends
_NODE = attrgetter("node")


def duration_s(job: Job) -> float:
    """Seconds a job may run (its time limit); infinite without one."""
    if job.time_limit in (0, INFINITE):
        return math.inf
    return job.time_limit * 60.0


@dataclass(frozen=True, slots=True)
class _Entry:
    """One running job's shares, and what they were derived from."""

    job: Job
    seq: int  # its first rank's seq (its ranks' follow; unique per entry)
    end: float
    names: tuple[str, ...]  # every rank's node
    nodes: tuple[Node, ...] | None  # those nodes' descriptions; None: one was unknown
    shares: tuple[tuple[str, Use], ...]

    def valid(self, free: Mapping[str, NodeFree]) -> bool:
        """Whether the shares still hold: every node known, with the same description."""
        if self.nodes is None:
            return False
        try:
            return tuple(map(_NODE, map(free.__getitem__, self.names))) == self.nodes
        except KeyError:
            return False


@dataclass(frozen=True, slots=True)
class RunningIndex:
    """Every running rank's share that ends, by (end, seq) and by node. Never mutated."""

    ends: tuple[End, ...]
    by_node: Mapping[str, tuple[Use, ...]]
    next_seq: int  # above every seq here: a planner numbers its own starts from it
    entries: tuple[_Entry, ...] = ()  # in the snapshot's order


def _entry(job: Job, start: float, end: float, seq: int, free: Mapping[str, NodeFree]) -> _Entry:
    exclusive = job.spec.sharing is Sharing.EXCLUSIVE
    shares = tuple(uses(job.placement, exclusive, start, end, free))
    names = tuple(p.node for p in job.placement)
    known = [f.node for n in names if (f := free.get(n)) is not None]
    nodes = tuple(known) if len(known) == len(names) else None
    return _Entry(job, seq, end, names, nodes, shares)


def _timed(running: Iterable[Job]) -> Iterable[tuple[Job, float, float]]:
    """The running jobs that end (a start time and a time limit), with start and end."""
    for job in running:
        dur = duration_s(job)
        if job.start_time is not None and dur != math.inf:
            yield job, job.start_time, job.start_time + dur


def build(snap: Snapshot, seq: int = 0) -> RunningIndex:
    """The index from scratch (seqs from `seq`)."""
    entries: list[_Entry] = []
    ends: list[End] = []
    by_node: dict[str, tuple[Use, ...]] = {}
    for job, start, end in _timed(snap.running):
        e = _entry(job, start, end, seq, snap.free)
        entries.append(e)
        for k, (node, use) in enumerate(e.shares):
            by_node[node] = (*by_node.get(node, ()), use)
            ends.append((end, seq + k, node, use))
        seq += max(len(e.shares), 1)  # unique per entry: it also orders the entries
    ends.sort()  # by (end, seq): seq is unique, so no further field is compared
    return RunningIndex(tuple(ends), by_node, seq, tuple(entries))


def update(prev: RunningIndex, snap: Snapshot) -> RunningIndex:
    """`prev` brought to `snap` by difference (equal to `build(snap)` up to seq values)."""
    old = {id(e.job): e for e in prev.entries}
    kept: dict[int, _Entry] = {}
    fresh: list[tuple[Job, float, float]] = []
    last = -1
    for job, start, end in _timed(snap.running):
        e = old.get(id(job))
        if e is not None and e.job is job and e.valid(snap.free):
            if fresh or e.seq <= last or id(job) in kept:
                return build(snap, prev.next_seq)  # not the kept order: equal ends would move
            last = e.seq
            kept[id(job)] = e
        else:
            fresh.append((job, start, end))
    gone = [e for e in prev.entries if kept.get(id(e.job)) is not e]
    if not gone and not fresh:
        return prev
    ends = list(prev.ends)
    by_node = dict(prev.by_node)
    for e in gone:
        if e.shares:  # a job's ranks are adjacent in (end, seq) order
            i = bisect.bisect_left(ends, (e.end, e.seq))
            del ends[i : i + len(e.shares)]
        for node, use in e.shares:
            held = by_node[node]
            at = next(k for k, u in enumerate(held) if u is use)
            rest = held[:at] + held[at + 1 :]
            if rest:
                by_node[node] = rest
            else:
                del by_node[node]
    entries = list(kept.values())
    seq = prev.next_seq
    for job, start, end in fresh:
        e = _entry(job, start, end, seq, snap.free)
        entries.append(e)
        at = bisect.bisect_left(ends, (end, seq))
        ends[at:at] = [(end, seq + k, node, use) for k, (node, use) in enumerate(e.shares)]
        for node, use in e.shares:
            by_node[node] = (*by_node.get(node, ()), use)
        seq += max(len(e.shares), 1)
    return RunningIndex(tuple(ends), by_node, seq, tuple(entries))


# cluster names -> the last index made for them: consecutive cycles over the same clusters
# (a live gateway's, or a replay's events) share most running jobs
_INDEXES: dict[tuple[str, ...], RunningIndex] = {}


def running_index(snap: Snapshot) -> RunningIndex:
    """The index of `snap`'s running jobs, updated from the last one for its clusters."""
    key = tuple(snap.clusters)
    prev = _INDEXES.get(key)
    found = build(snap) if prev is None else update(prev, snap)
    if prev is None and len(_INDEXES) >= 64:
        _INDEXES.clear()
    _INDEXES[key] = found
    return found


# id(cluster description) -> (it, its node names): a search asks for every blocked job
_NAMES: dict[int, tuple[ClusterState, frozenset[str]]] = {}


def cluster_nodes(snap: Snapshot, cluster: str) -> frozenset[str]:
    """The names of a cluster's nodes, kept per (immutable) description."""
    c = snap.clusters.get(cluster)
    if c is None:
        return frozenset()
    hit = _NAMES.get(id(c))
    if hit is not None and hit[0] is c:
        return hit[1]
    found = frozenset(n.name for n in c.nodes)
    if len(_NAMES) >= 64:
        _NAMES.clear()
    _NAMES[id(c)] = (c, found)
    return found
