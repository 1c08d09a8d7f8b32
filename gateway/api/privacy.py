"""Who may read a job's batch script and environment: its owner and operators.

Slurm's rule (`scontrol write batch_script`, the environment of `scontrol show job -d`,
`sacct --batch-script/--env-vars`): any user sees every job's record, but the script and
the environment it was submitted with (tokens, passwords) only its owner and the operators.
The job records the API returns (codec.job_to_dict) never hold either; this is the one
route that does.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import HTTPException

from gateway.api.wire import wire_script
from gateway.control.gateway import Gateway
from gateway.control.submit import Caller
from gateway.model.job import Job

__all__ = ["may_read_private", "script_answer"]


def may_read_private(caller: Caller, job: Job) -> bool:
    """The job's owner, or an operator."""
    return caller.operator or caller.uid == job.uid


async def script_answer(gw: Gateway, caller: Caller, job_id: int) -> dict[str, Any]:
    """GET /v1/jobs/{id}/script: the batch script and environment, to those who may."""
    job = await gw.find(job_id)
    if job is None:
        raise HTTPException(404, {"code": 2017, "message": "Invalid job id specified"})
    if not may_read_private(caller, job):
        raise HTTPException(403, {"code": 2002, "message": "Access/permission denied"})
    found = await asyncio.to_thread(gw.store.script, job.array_job_id or job.job_id)
    if found is None:
        raise HTTPException(
            404, {"code": 2017, "message": f"No batch script for job {job.display_id}"}
        )
    script, environment = found
    return {"job_id": job.job_id, **wire_script(script, environment, "environment")}
