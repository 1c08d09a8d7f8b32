"""Accounting policy in the store (schema 5): one `policy` document per cluster (accounts,
users, QOS, associations: what slurmdbd keeps) and `policy_usage`, the decayed raw usage
per association with the time the decay was last applied (slurmctld's assoc_usage and
priority_last_decay_ran files). A sacctmgr change is one transaction.
"""

from __future__ import annotations

import sqlite3

import orjson

from gateway.policy.codec import policy_from_dict, policy_to_dict
from gateway.policy.model import PolicyState

__all__ = [
    "POLICY_DDL",
    "PolicyState",
    "load_policy",
    "load_usage",
    "migrate_to_policy",
    "save_both",
    "save_policy",
    "save_usage",
]

POLICY_DDL = """
CREATE TABLE IF NOT EXISTS policy (cluster TEXT PRIMARY KEY, doc BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS policy_usage (cluster TEXT NOT NULL, assoc_id INTEGER NOT NULL,
                                         usage_raw REAL NOT NULL,
                                         PRIMARY KEY (cluster, assoc_id));
CREATE TABLE IF NOT EXISTS policy_decay (cluster TEXT PRIMARY KEY, last_ran REAL NOT NULL);
"""


def load_policy(conn: sqlite3.Connection, cluster: str) -> PolicyState | None:
    """The cluster's stored policy, None when never saved."""
    row = conn.execute("SELECT doc FROM policy WHERE cluster=?", (cluster,)).fetchone()
    return None if row is None else policy_from_dict(orjson.loads(row[0]))


def save_policy(conn: sqlite3.Connection, state: PolicyState) -> None:
    """Replace the cluster's policy (inside the caller's transaction)."""
    conn.execute(
        "INSERT OR REPLACE INTO policy(cluster, doc) VALUES (?, ?)",
        (state.cluster, orjson.dumps(policy_to_dict(state))),
    )


def load_usage(conn: sqlite3.Connection, cluster: str) -> tuple[dict[int, float], float | None]:
    """Raw usage by association id, and when decay was last applied (None: never)."""
    rows = conn.execute(
        "SELECT assoc_id, usage_raw FROM policy_usage WHERE cluster=?", (cluster,)
    ).fetchall()
    last = conn.execute("SELECT last_ran FROM policy_decay WHERE cluster=?", (cluster,)).fetchone()
    return {int(r[0]): float(r[1]) for r in rows}, (None if last is None else float(last[0]))


def save_usage(
    conn: sqlite3.Connection, cluster: str, usage: dict[int, float], last_ran: float
) -> None:
    """Replace the usage table of a cluster (inside the caller's transaction)."""
    conn.execute("DELETE FROM policy_usage WHERE cluster=?", (cluster,))
    conn.executemany(
        "INSERT INTO policy_usage(cluster, assoc_id, usage_raw) VALUES (?,?,?)",
        [(cluster, k, v) for k, v in usage.items()],
    )
    conn.execute(
        "INSERT OR REPLACE INTO policy_decay(cluster, last_ran) VALUES (?, ?)", (cluster, last_ran)
    )


def save_both(
    conn: sqlite3.Connection,
    state: PolicyState | None,
    usage: tuple[str, dict[int, float], float] | None,
) -> None:
    """The policy and/or (cluster, usage, last decay), inside the caller's transaction."""
    if state is not None:
        save_policy(conn, state)
    if usage is not None:
        save_usage(conn, *usage)


def migrate_to_policy(conn: sqlite3.Connection) -> bool:
    """Schema 4 -> 5: the tables come from the schema's DDL; only the version moves. Read
    again inside the transaction (another process may have migrated meanwhile)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        old = int(conn.execute("SELECT value FROM meta WHERE key='schema'").fetchone()[0])
        if old == 4:
            for statement in (s for s in POLICY_DDL.split(";") if s.strip()):
                conn.execute(statement)
            conn.execute("UPDATE meta SET value='5' WHERE key='schema'")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return old == 4
