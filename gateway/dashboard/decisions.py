"""The routing decision log: the latest `route` and `revoke` events across the jobs a viewer
may see, newest first, each with the predicted starts it compared.

The store keeps events per job; which jobs were decided last is kept as the gateway writes
them (`GatewayMetrics.recent_routes`), so a page reads the events of at most that many
jobs instead of scanning the event log. A user sees the decisions about their own jobs and
an operator everyone's; the events hold where, why and what was compared, never a script,
an environment or an output path. The log starts empty when the gateway starts (each job's
page still shows its whole routing history from the store).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gateway.control.gateway import Gateway
from gateway.control.submit import Caller
from gateway.model.job import Job
from gateway.store.base import StoredEvent

__all__ = ["DECISION_KINDS", "decision_log", "decision_rows", "routing_history"]

DECISION_KINDS = frozenset({"route", "revoke"})
_MAX_ROWS = 200


def _compared(detail: Mapping[str, Any]) -> list[dict[str, Any]]:
    raw = detail.get("compared")
    if not isinstance(raw, Mapping):
        return []
    out: list[dict[str, Any]] = []
    for cluster, start in raw.items():
        known = isinstance(start, int | float) and not isinstance(start, bool)
        out.append({"cluster": str(cluster), "start": float(start) if known else None})
    return out


def routing_history(events: Iterable[StoredEvent]) -> list[dict[str, Any]]:
    """A job's routing decisions in time order: kind, from (the cluster it left: a revoke's,
    or a route's away from the cluster it waited for in Caldera's own queue), to, why and
    the compared predictions (epoch seconds, None: unknown)."""
    out: list[dict[str, Any]] = []
    for e in events:
        if e.kind not in DECISION_KINDS:
            continue
        d = e.detail
        left = d.get("cluster") if e.kind == "revoke" else d.get("from")
        out.append(
            {
                "time": e.time,
                "kind": e.kind,
                "from": None if left is None else str(left),
                "to": None if d.get("to") is None else str(d.get("to")),
                "why": str(d.get("why") or ""),
                "compared": _compared(d),
            }
        )
    return out


def decision_rows(
    found: Sequence[tuple[Job, Sequence[StoredEvent]]], limit: int = _MAX_ROWS
) -> list[dict[str, Any]]:
    """The decisions of these jobs, newest first, with the job's id, name and user."""
    rows: list[dict[str, Any]] = []
    for job, events in found:
        for entry in routing_history(events):
            entry.update(job_id=job.job_id, id=job.display_id, name=job.spec.name, user=job.user)
            rows.append(entry)
    rows.sort(key=lambda r: (r["time"], r["job_id"]), reverse=True)
    return rows[: max(0, limit)]


def _may_see(caller: Caller, job: Job) -> bool:
    return caller.operator or job.uid == caller.uid


async def decision_log(gw: Gateway, caller: Caller, limit: int = _MAX_ROWS) -> dict[str, Any]:
    """The log page's data for `caller`: the jobs decided last that it may see."""
    seen: set[int] = set()
    jobs: list[Job] = []
    for job_id in reversed(gw.metrics.recent_routes):
        if len(jobs) >= limit:  # the newest `limit` decisions are among these jobs'
            break
        job = gw.jobs.get(job_id)
        if job_id in seen or job is None or not _may_see(caller, job):
            continue
        seen.add(job_id)
        jobs.append(job)

    def read() -> list[tuple[Job, list[StoredEvent]]]:
        return [(j, gw.store.events(j.job_id)) for j in jobs]

    found = await asyncio.to_thread(read)
    return {"decisions": decision_rows(found, limit), "jobs": len(jobs)}
