"""Nodes an operator drained (`scontrol update NodeName=... State=DRAIN Reason=...`).

slurmctld keeps a drained node's state, reason, who set it and when across restarts (its
node_state file); the store keeps the same in the `node_admin` table (schema 4), written in
one transaction per update. `drain_overlay` shows the backends' nodes with that state: the
scheduler's fit check skips drained nodes, and sinfo/scontrol show them as slurmctld does.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from gateway.model.cluster import ClusterState, NodeState

__all__ = [
    "NODE_ADMIN_DDL",
    "NodeAdmin",
    "drain_overlay",
    "load_node_admin",
    "migrate_to_node_admin",
    "save_node_admin",
]

NODE_ADMIN_DDL = """
CREATE TABLE IF NOT EXISTS node_admin (node TEXT PRIMARY KEY, reason TEXT NOT NULL,
                                       uid INTEGER NOT NULL, user TEXT NOT NULL,
                                       time REAL NOT NULL);
"""


@dataclass(frozen=True, slots=True)
class NodeAdmin:
    """A drained node: why, by whom (uid and name), since when (epoch seconds)."""

    node: str
    reason: str
    uid: int
    user: str
    time: float


def load_node_admin(conn: sqlite3.Connection) -> dict[str, NodeAdmin]:
    """Every drained node by name."""
    rows = conn.execute("SELECT node, reason, uid, user, time FROM node_admin").fetchall()
    return {r[0]: NodeAdmin(r[0], r[1], int(r[2]), r[3], float(r[4])) for r in rows}


def save_node_admin(
    conn: sqlite3.Connection, drain: Sequence[NodeAdmin], resume: Sequence[str]
) -> None:
    """Drain and resume nodes (inside the caller's transaction)."""
    conn.executemany(
        "INSERT OR REPLACE INTO node_admin(node, reason, uid, user, time) VALUES (?,?,?,?,?)",
        [(a.node, a.reason, a.uid, a.user, a.time) for a in drain],
    )
    conn.executemany("DELETE FROM node_admin WHERE node = ?", [(n,) for n in resume])


def migrate_to_node_admin(conn: sqlite3.Connection) -> bool:
    """Schema 3 -> 4: the table itself comes from the schema's DDL; only the version moves.
    Read again inside the transaction (another process may have migrated meanwhile)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        old = int(conn.execute("SELECT value FROM meta WHERE key='schema'").fetchone()[0])
        if old == 3:
            conn.execute(NODE_ADMIN_DDL)
            conn.execute("UPDATE meta SET value='4' WHERE key='schema'")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return old == 3


def drain_overlay(
    clusters: Mapping[str, ClusterState], drained: Mapping[str, NodeAdmin]
) -> Mapping[str, ClusterState]:
    """The clusters with drained nodes in state DRAINED and their reason (the same mapping
    when nothing is drained, so the common case costs nothing). A node that is down stays
    down: slurmctld shows DOWN+DRAIN, and neither takes jobs."""
    if not drained:
        return clusters
    out: dict[str, ClusterState] = {}
    for name, cluster in clusters.items():
        if not any(n.name in drained for n in cluster.nodes):
            out[name] = cluster
            continue
        nodes = tuple(
            replace(
                n,
                state=n.state if n.state is NodeState.DOWN else NodeState.DRAINED,
                reason=drained[n.name].reason,
            )
            if n.name in drained
            else n
            for n in cluster.nodes
        )
        out[name] = replace(cluster, nodes=nodes)
    return out
