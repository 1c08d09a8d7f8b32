"""Routes for `scontrol suspend` and `scontrol resume` (gateway/control/suspend.py).

Kept out of app.py (which is at its size limit); ids are parsed and answers shaped by
app.py's own helpers, passed in, so these routes answer exactly as hold/release do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from gateway.control import suspend as ops
from gateway.control.arraytasks import Target
from gateway.control.gateway import Gateway
from gateway.control.ops import OpResult
from gateway.control.submit import Caller

__all__ = ["SuspendBody", "suspend_router"]


class SuspendBody(BaseModel):
    """The job ids (`12`, `12_3`, `12_[1-4]`), as scontrol lists them."""

    ids: list[Annotated[str, Field(max_length=1024)]] = Field(min_length=1, max_length=100_000)


def suspend_router(
    gw: Gateway,
    caller: Callable[[Request, Gateway], Caller],
    targets: Callable[[list[str]], list[Target]],
    results: Callable[[list[OpResult]], dict[str, Any]],
) -> APIRouter:
    """POST /v1/jobs/suspend and /v1/jobs/resume."""
    router = APIRouter()

    @router.post("/v1/jobs/suspend")
    async def suspend(request: Request, body: SuspendBody) -> dict[str, Any]:
        """scontrol suspend: operators only."""
        return results(await ops.suspend(gw, targets(body.ids), caller(request, gw)))

    @router.post("/v1/jobs/resume")
    async def resume(request: Request, body: SuspendBody) -> dict[str, Any]:
        """scontrol resume: operators only."""
        return results(await ops.resume(gw, targets(body.ids), caller(request, gw)))

    return router
