"""Extension points of the scheduler: one small Protocol each, and an explicit registry.

As in the Kubernetes scheduler framework, every plugin answers with a typed Status; as in
Volcano, plugins are named in configuration. Unlike both, there is no session god-object:
a plugin sees the immutable Snapshot and the job, and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol, runtime_checkable

from gateway.model.job import Job
from gateway.model.state import Reason
from gateway.scheduler.bf_params import BackfillParams
from gateway.scheduler.request import NodeRequest
from gateway.scheduler.selection import ClusterSelector, NamedPartitions
from gateway.scheduler.snapshot import NodeFree, Snapshot

__all__ = [
    "Code",
    "JobGate",
    "KeyedFilter",
    "NodeFilter",
    "NodeScore",
    "NodeTests",
    "PlacementPlugin",
    "QueueOrder",
    "Registry",
    "Status",
    "node_test",
    "score_key",
]


class Code(Enum):
    """A plugin's verdict."""

    OK = "ok"
    WAIT = "wait"  # not now; the reason says why
    NEVER = "never"  # can never run as asked (the reason says why)


@dataclass(frozen=True, slots=True)
class Status:
    """A verdict with the reason a user will see in squeue."""

    code: Code = Code.OK
    reason: Reason = Reason.NONE
    detail: str = ""

    @property
    def ok(self) -> bool:
        """Whether the verdict lets the job go on."""
        return self.code is Code.OK


OK = Status()


@runtime_checkable
class QueueOrder(Protocol):
    """Orders pending jobs; the first gets resources first."""

    name: str

    def key(self, job: Job, snap: Snapshot) -> tuple[float, ...]:
        """Sort key (ascending)."""
        ...


@runtime_checkable
class JobGate(Protocol):
    """Decides whether a job may be considered at all this cycle (holds, time, deps...)."""

    name: str

    def check(self, job: Job, snap: Snapshot) -> Status:
        """OK, or why the job waits."""
        ...


@runtime_checkable
class NodeFilter(Protocol):
    """Decides whether a node can take its share of a job."""

    name: str

    def fits(self, req: NodeRequest, free: NodeFree, snap: Snapshot) -> bool:
        """Whether the node has room and the right properties."""
        ...


@runtime_checkable
class KeyedFilter(NodeFilter, Protocol):
    """A NodeFilter that names the part of a request its verdict reads, so that requests
    equal in it share their verdicts on a node record (a cycle's ~500 tested jobs ask with
    a few hundred requests but only a handful of distinct filter shapes)."""

    def verdict_key(self, req: NodeRequest) -> Hashable:
        """Every field of `req` that `fits` reads (a field left out would share a stale
        verdict between requests that differ in it)."""
        ...


@runtime_checkable
class NodeScore(Protocol):
    """Prefers some nodes over others (higher is better)."""

    name: str

    def score(self, req: NodeRequest, free: NodeFree, snap: Snapshot) -> float:
        """A score; scores of all plugins are added."""
        ...


@runtime_checkable
class PlacementPlugin(Protocol):
    """Chooses the set of nodes of a gang (e.g. fewest leaf switches); may decline."""

    name: str

    def choose(
        self, req: NodeRequest, candidates: Sequence[NodeFree], snap: Snapshot
    ) -> Sequence[NodeFree] | None:
        """The nodes to use, or None to leave it to the default (best scores)."""
        ...


@dataclass
class Registry:
    """The plugins of a scheduler, by extension point, in order."""

    queue_order: QueueOrder | None = None
    gates: list[JobGate] = field(default_factory=list)
    filters: list[NodeFilter] = field(default_factory=list)
    scores: list[NodeScore] = field(default_factory=list)
    placement: list[PlacementPlugin] = field(default_factory=list)
    # where a job may start (cluster, partition): the home of routing and bursting
    selector: ClusterSelector = field(default_factory=NamedPartitions)
    # walltime backfill knobs (caldera.toml scheduler_parameters; gateway/scheduler/backfill.py)
    backfill: BackfillParams = field(default_factory=BackfillParams)
    # when the last cycle that estimated every blocked job's start ran (bf_interval)
    estimated_at: float | None = None

    @classmethod
    def build(cls, names: Sequence[str], factories: dict[str, Callable[[], object]]) -> Registry:
        """A registry from plugin names (configuration) and their factories."""
        reg = cls()
        for name in names:
            if name not in factories:
                raise ValueError(f"unknown scheduler plugin {name!r}")
            plugin = factories[name]()
            placed = False
            if isinstance(plugin, QueueOrder):
                reg.queue_order = plugin
                placed = True
            if isinstance(plugin, JobGate):
                reg.gates.append(plugin)
                placed = True
            if isinstance(plugin, NodeFilter):
                reg.filters.append(plugin)
                placed = True
            if isinstance(plugin, NodeScore):
                reg.scores.append(plugin)
                placed = True
            if isinstance(plugin, PlacementPlugin):
                reg.placement.append(plugin)
                placed = True
            if not placed:
                raise ValueError(f"plugin {name!r} implements no extension point")
        return reg


def node_test(
    filters: Sequence[NodeFilter], req: NodeRequest, snap: Snapshot
) -> Callable[[NodeFree], bool]:
    """Whether a node passes every filter for `req`, bound once per search: the searches
    call it ~900 times each, and a generator per call cost more than most filters."""
    fns = tuple(p.fits for p in filters)
    if len(fns) == 1:
        only = fns[0]
        return lambda f: only(req, f, snap)

    def every(f: NodeFree) -> bool:
        for fn in fns:  # noqa: SIM110 - all() with a generator is what this avoids
            if not fn(req, f, snap):
                return False
        return True

    return every


def score_key(
    scores: Sequence[NodeScore], req: NodeRequest, snap: Snapshot
) -> Callable[[NodeFree], tuple[float, str]]:
    """Best score first, then name; one or two scores (the default's) are added without
    a generator per node (the same sums: 0 + a + b is a + b)."""
    fns = tuple(s.score for s in scores)
    if len(fns) == 1:
        (a,) = fns
        return lambda f: (-a(req, f, snap), f.node.name)
    if len(fns) == 2:
        a, b = fns
        return lambda f: (-(a(req, f, snap) + b(req, f, snap)), f.node.name)
    return lambda f: (-sum(fn(req, f, snap) for fn in fns), f.node.name)


class NodeTests:
    """The filters' verdicts of one cycle, remembered per (request, node record).

    Why: a job's start test and its reservation search ask about the same idle nodes, and
    later jobs ask again about the records nothing has changed; a verdict reads only the
    request, the record and the snapshot, and records are immutable (a placement makes new
    ones), so the record's identity is its key. Records asked about are kept alive for the
    cycle, so that their ids are not reused. Make one per cycle (per snapshot and filter
    list): a verdict is never carried into another cycle."""

    def __init__(self, filters: Sequence[NodeFilter], snap: Snapshot) -> None:
        self._filters = tuple(filters)
        self._snap = snap
        keyed = [p.verdict_key for p in self._filters if isinstance(p, KeyedFilter)]
        # every filter keyed: requests share verdicts by their keys; else by the request
        self._keys = tuple(keyed) if len(keyed) == len(self._filters) else None
        self._verdicts: dict[Hashable, dict[int, bool]] = {}
        self._keep: list[NodeFree] = []

    def _memo(self, req: NodeRequest) -> dict[int, bool]:
        key: Hashable = req if self._keys is None else tuple(k(req) for k in self._keys)
        memo = self._verdicts.get(key)
        if memo is None:
            memo = self._verdicts[key] = {}
        return memo

    def test(self, req: NodeRequest) -> Callable[[NodeFree], bool]:
        """Whether a record passes every filter for `req` (as `node_test`, remembered)."""
        memo = self._memo(req)
        raw = node_test(self._filters, req, self._snap)
        keep = self._keep.append

        def ok(f: NodeFree) -> bool:
            verdict = memo.get(id(f))
            if verdict is None:
                verdict = memo[id(f)] = raw(f)
                keep(f)
            return verdict

        return ok

    def select(
        self, req: NodeRequest, records: Iterable[NodeFree], within: frozenset[str] | None = None
    ) -> list[NodeFree]:
        """The records (of nodes in `within`, when given) that pass, in their order: `test`
        without a call per record."""
        memo = self._memo(req)
        raw = node_test(self._filters, req, self._snap)
        keep = self._keep.append
        out: list[NodeFree] = []
        for f in records:
            if within is not None and f.node.name not in within:
                continue
            verdict = memo.get(id(f))
            if verdict is None:
                verdict = memo[id(f)] = raw(f)
                keep(f)
            if verdict:
                out.append(f)
        return out
