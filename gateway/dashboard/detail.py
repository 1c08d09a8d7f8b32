"""One job's page: its record, its history of events and of routing decisions, steps, and,
for its owner and operators only, its script, environment and the tail of its output.

Slurm's PrivateData rule is kept as the API's /v1/jobs/{id}/script keeps it
(gateway/api/privacy.py): anyone sees the record, only the owner and operators the private
parts. The output file is read by the gateway (root) from a path the job's owner controls,
so it is opened without following a final symlink and shown only when the file belongs to
the job's owner: a user who points a symlink or hard link at /etc/shadow gets nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from gateway.api.privacy import may_read_private
from gateway.api.why_route import why_input
from gateway.compat.filename import NO_TASK, PatternContext, default_output, expand_for_open
from gateway.control.gateway import Gateway
from gateway.control.submit import Caller
from gateway.dashboard.decisions import routing_history
from gateway.dashboard.tail import TAIL_BYTES, read_tail, tail_as_owner
from gateway.dashboard.views import job_row, step_row
from gateway.model.job import Job
from gateway.model.state import JobState
from gateway.scheduler.explain import explain

__all__ = ["TAIL_BYTES", "job_detail", "output_path", "read_tail"]

log = logging.getLogger("caldera.dashboard")

_MAX_EVENTS = 1000
_MAX_ENV = 64 * 1024


def output_path(job: Job) -> str:
    """Where the job's standard output goes (its batch step's, on its first node)."""
    spec = job.spec
    ctx = PatternContext(
        job_id=job.job_id,
        job_name=spec.name,
        user=job.user,
        workdir=spec.workdir,
        array_job_id=job.array_job_id,
        array_task_id=job.array_task_id if job.array_task_id is not None else NO_TASK,
        node_name=job.nodes[0] if job.nodes else "",
    )
    return expand_for_open(spec.stdout or default_output(job.array_task_id is not None), ctx)


def _private(job: Job, found: tuple[str, dict[str, str]] | None) -> dict[str, Any]:
    script, env = found if found is not None else ("", {})
    environment: dict[str, str] = {}
    size = 0
    for name in sorted(env):
        size += len(name) + len(env[name])
        if size > _MAX_ENV:
            break
        environment[name] = env[name]
    # a job of any cluster: its output is here when that cluster shares the submit host's
    # files (a Slurm cluster's shared home, a Kubernetes filesystem map); read as its owner
    path = output_path(job)
    tail = tail_as_owner(path, job) if path and job.start_time is not None else None
    return {
        "script": script if found is not None else None,
        "environment": environment,
        "output_path": path,
        "output_tail": tail,
    }


async def _why(gw: Gateway, job: Job) -> list[str]:
    """`caldera why`'s lines for a pending job (public, as squeue's reason is). Best
    effort: the page still shows the job when the explanation fails."""
    if job.state is not JobState.PENDING:
        return []
    try:
        return explain(job, await why_input(gw, job))
    except Exception:  # one failing explanation must not hide the job (logged)
        log.exception("dashboard: no explanation for job %d", job.job_id)
        return []


async def job_detail(gw: Gateway, caller: Caller, job: Job) -> dict[str, Any]:
    """Everything the job page shows to `caller`."""
    now = time.time()
    record_id = job.array_job_id or job.job_id
    events = await asyncio.to_thread(gw.store.events, job.job_id)
    steps = await asyncio.to_thread(gw.store.steps, [job.job_id])
    private: dict[str, Any] | None = None
    allowed = may_read_private(caller, job)
    if allowed:
        found = await asyncio.to_thread(gw.store.script, record_id)
        private = await asyncio.to_thread(_private, job, found)
    spec = job.spec
    return {
        "now": now,
        "job": {
            **job_row(job, now),
            "state_desc": job.state_desc,
            "hold": job.hold.name if job.hold is not None else None,
            "group": job.group,
            "qos": job.qos,
            "exit_code": job.exit_code,
            "restart_count": job.restart_count,
            "eligible_time": job.eligible_time,
            "workdir": spec.workdir,
            "routed_to": job.routed_to,
            "viable": job.viable,
            "origin": job.origin,
            "route_note": job.route_note,
            "requested": {
                "nodes": spec.nodes_min,
                "ntasks": spec.ntasks,
                "cpus_per_task": spec.cpus_per_task,
                "mem_per_node_mb": spec.mem_per_node_mb,
                "time_limit": spec.time_limit,
                "partitions": list(spec.partitions),
                "clusters": list(spec.clusters),
                "dependency": spec.dependency.display() if spec.dependency else None,
            },
        },
        "events": [
            {"time": e.time, "kind": e.kind, "detail": dict(e.detail)}
            for e in events[-_MAX_EVENTS:]
        ],
        "routing": routing_history(events),
        "steps": [step_row(s) for s in steps],
        "why": await _why(gw, job),
        "may_read_private": allowed,
        "private": private,
    }
