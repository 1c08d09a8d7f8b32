"""The gateway's view of its node agents: inventories, heartbeats, and down-marking.

A node is DOWN once `missed` heartbeats in a row have not arrived: no message for
`missed * period_s` seconds, plus half a period of tolerance for jitter. Listeners get a
`NodeEvent` for every change (`up`, `down`, `inventory`); on `down` the gateway fails or
requeues the jobs on that node as whole gangs. A heartbeat from a DOWN node brings it back
`up`. Listeners are called outside the registry's lock, from the thread that observed the
change (the receiver's thread).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum

from gateway.inventory.convert import node_from_inventory
from gateway.inventory.messages import Heartbeat, Inventory
from gateway.logutil import RateLimitedLogger
from gateway.model.cluster import Node, NodeState
from gateway.model.topology import Topology
from gateway.topology.discovery import topology_from_inventories

__all__ = ["EventKind", "NodeEvent", "NodeRecord", "NodeRegistry"]

log = logging.getLogger("caldera.inventory")


class EventKind(Enum):
    """What happened to a node."""

    UP = "up"  # first report, or back after being down
    DOWN = "down"  # missed heartbeats
    INVENTORY = "inventory"  # a new inventory from an up node


@dataclass(frozen=True, slots=True)
class NodeEvent:
    """One change, as listeners receive it."""

    kind: EventKind
    node: str
    reason: str = ""
    at: float = 0.0  # wall clock


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """What the registry knows about one node."""

    name: str
    inventory: Inventory | None
    heartbeat: Heartbeat | None
    last_seen: float  # registry clock (monotonic)
    up: bool
    since: float  # wall clock of the last up/down change
    reason: str = ""


Listener = Callable[[NodeEvent], None]


class NodeRegistry:
    """Thread-safe store of agent reports with heartbeat-based liveness."""

    def __init__(
        self,
        period_s: float = 1.0,
        missed: int = 3,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        if period_s <= 0 or missed < 1:
            raise ValueError("period_s must be > 0 and missed >= 1")
        self.period_s = period_s
        self.missed = missed
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()
        self._nodes: dict[str, NodeRecord] = {}
        self._listeners: list[Listener] = []
        self._limited = RateLimitedLogger(log)

    @property
    def timeout_s(self) -> float:
        """Silence after which a node is marked DOWN."""
        return (self.missed + 0.5) * self.period_s

    def subscribe(self, listener: Listener) -> None:
        """Call `listener` for every NodeEvent."""
        with self._lock:
            self._listeners.append(listener)

    def _emit(self, events: list[NodeEvent]) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for event in events:
            reason = f" ({event.reason})" if event.reason else ""
            if event.kind is EventKind.INVENTORY:  # an agent may change it at every message
                self._limited.log(
                    logging.INFO, event.node, "inventory", "node %s inventory%s", event.node, reason
                )
            else:  # up and down cannot flap faster than the heartbeat timeout
                log.info("node %s %s%s", event.node, event.kind.value, reason)
            for listener in listeners:
                try:
                    listener(event)
                except Exception:  # a listener's bug must not stop heartbeat processing
                    log.exception("node event listener failed on %s", event)

    def _seen(self, name: str, **changes: object) -> list[NodeEvent]:
        now, wall = self._clock(), self._wall()
        rec = self._nodes.get(name)
        events: list[NodeEvent] = []
        if rec is None:
            rec = NodeRecord(name, None, None, now, True, wall)
            events.append(NodeEvent(EventKind.UP, name, "registered", wall))
        elif not rec.up:
            events.append(NodeEvent(EventKind.UP, name, "heartbeat resumed", wall))
            rec = replace(rec, up=True, since=wall, reason="")
        self._nodes[name] = replace(rec, last_seen=now, **changes)  # type: ignore[arg-type]
        return events

    def report_inventory(self, inv: Inventory) -> None:
        """Record an inventory (a first one registers the node)."""
        with self._lock:
            old = self._nodes.get(inv.node)
            events = self._seen(inv.node, inventory=inv)
            changed = old is not None and old.inventory is not None and old.inventory != inv
        if changed:
            events.append(NodeEvent(EventKind.INVENTORY, inv.node, "changed", self._wall()))
        self._emit(events)

    def report_heartbeat(self, hb: Heartbeat) -> bool:
        """Record a heartbeat; False when the node's inventory is unknown or stale (the
        agent should send it again)."""
        with self._lock:
            events = self._seen(hb.node, heartbeat=hb)
            inv = self._nodes[hb.node].inventory
            current = inv is not None and (not hb.inventory or inv.fingerprint() == hb.inventory)
        self._emit(events)
        return current

    def check(self) -> list[str]:
        """Mark nodes silent for too long DOWN; returns the newly down ones."""
        now, wall = self._clock(), self._wall()
        events: list[NodeEvent] = []
        with self._lock:
            for name, rec in self._nodes.items():
                if rec.up and now - rec.last_seen > self.timeout_s:
                    missed = int((now - rec.last_seen) // self.period_s)
                    reason = f"agent silent: {missed} heartbeats missed"
                    self._nodes[name] = replace(rec, up=False, since=wall, reason=reason)
                    events.append(NodeEvent(EventKind.DOWN, name, reason, wall))
        self._emit(events)
        return [e.node for e in events]

    def forget(self, name: str) -> None:
        """Drop a node (decommissioned)."""
        with self._lock:
            self._nodes.pop(name, None)

    def records(self) -> dict[str, NodeRecord]:
        """A copy of every node's record."""
        with self._lock:
            return dict(self._nodes)

    def record(self, name: str) -> NodeRecord | None:
        """One node's record."""
        with self._lock:
            return self._nodes.get(name)

    def down_nodes(self) -> tuple[str, ...]:
        """Nodes currently DOWN."""
        with self._lock:
            return tuple(sorted(n for n, r in self._nodes.items() if not r.up))

    def topology(self) -> Topology:
        """The switch tree the agents' fabric reports describe."""
        with self._lock:
            invs = [r.inventory for r in self._nodes.values() if r.inventory is not None]
        return topology_from_inventories(invs)

    def nodes(self, partitions: tuple[str, ...] = ()) -> tuple[Node, ...]:
        """Nodes for the scheduler (agents' view only): DOWN ones with their reason, each
        with its leaf switch from the discovered topology."""
        topo = self.topology()
        out: list[Node] = []
        for rec in sorted(self.records().values(), key=lambda r: r.name):
            if rec.inventory is None:
                continue
            out.append(
                node_from_inventory(
                    rec.inventory,
                    rec.heartbeat,
                    state=NodeState.IDLE if rec.up else NodeState.DOWN,
                    partitions=partitions,
                    switch=topo.group_of(rec.name),
                    reason=rec.reason or None,
                )
            )
        return tuple(out)
