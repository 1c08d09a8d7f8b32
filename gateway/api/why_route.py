"""GET /v1/jobs/{id}/why: the detail behind a pending job's reason (`caldera why`).

Any user may ask about any job, as squeue shows every job's reason to every user; the
answer names resources, partitions and other jobs' ids and states, never scripts or
environments.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Request

from gateway.control.gateway import Gateway
from gateway.control.snapshots import dep_target
from gateway.control.submit import Caller
from gateway.model.job import Job
from gateway.scheduler.explain import WhyInput, explain
from gateway.store.base import JobQuery

__all__ = ["why_router"]


async def why_input(gw: Gateway, job: Job) -> WhyInput:
    """The gateway's current view, as the scheduler's next cycle would see it."""
    dep = job.spec.dependency
    ids = {i.job_id for i in dep.items if i.job_id} if dep is not None else set()
    stored: dict[int, list[Job]] = {}
    for target_id in ids:
        if not gw.jobs.job_or_array(target_id):
            q = JobQuery(job_ids=[target_id])
            stored[target_id] = await asyncio.to_thread(gw.store.query, q)
    targets = {
        i: tuple(dep_target(j) for j in (gw.jobs.job_or_array(i) or stored.get(i, []))) for i in ids
    }
    return WhyInput(
        now=time.time(),
        clusters=gw.schedulable(),
        free=gw.free_resources(),
        running=tuple(gw.jobs.active.values()),
        pending=tuple(gw.jobs.pending.values()),
        dep_targets=targets,
        same_user_name=gw.jobs.same_user_name(job.uid, job.spec.name),
        self_placing=frozenset(n for n, c in gw.caps.items() if c.places_itself),
        def_mem_per_cpu_mb=gw.config.def_mem_per_cpu_mb,
        time_scale=gw.config.time_scale,
    )


def why_router(gw: Gateway, caller: Callable[[Request, Gateway], Caller]) -> APIRouter:
    """The route over a running gateway."""
    router = APIRouter()

    @router.get("/v1/jobs/{job_id}/why")
    async def why(
        request: Request, job_id: Annotated[int, Path(ge=0, le=2**32 - 1)]
    ) -> dict[str, Any]:
        """{job_id, state, reason, lines}: what the job waits for, in numbers."""
        caller(request, gw)
        job = await gw.find(job_id)
        if job is None:
            raise HTTPException(404, {"code": 2017, "message": "Invalid job id specified"})
        lines = explain(job, await why_input(gw, job))
        return {
            "job_id": job.job_id,
            "state": job.state.long,
            "reason": job.reason.value,
            "lines": lines,
        }

    return router
