"""Policy routes: sacctmgr (accounts, users, QOS, associations), sshare and sprio.

Each command is answered on the gateway from the stored policy (gateway/policy/service.py)
and comes back as the command's own output and exit status; the command-line shims only
print it. A sacctmgr change is refused for callers who are not operators (slurmdbd's
"Access/permission denied"), and stored before it is answered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from gateway.control.gateway import Gateway
from gateway.control.submit import Caller
from gateway.policy.service import Answer, policy_of

__all__ = ["CommandBody", "policy_router"]

Arg = Annotated[str, Field(max_length=65536)]


class CommandBody(BaseModel):
    """A command's arguments; `commit`: apply a sacctmgr change (-i, or the user's "y")."""

    argv: list[Arg] = Field(default_factory=list, max_length=4096)
    commit: bool = False


def _answer(a: Answer) -> dict[str, Any]:
    return {"stdout": a.stdout, "stderr": a.stderr, "rc": a.rc, "ask": a.ask}


def policy_router(gw: Gateway, caller: Callable[[Request, Gateway], Caller]) -> APIRouter:
    """The routes over a gateway."""
    router = APIRouter()

    @router.post("/v1/policy/sacctmgr")
    async def sacctmgr(request: Request, body: CommandBody) -> dict[str, Any]:
        """sacctmgr add/modify/delete/show account|user|qos|association."""
        who = caller(request, gw)
        answer = await policy_of(gw).sacctmgr(body.argv, who.operator, body.commit)
        return _answer(answer)

    @router.post("/v1/policy/sshare")
    async def sshare(request: Request, body: CommandBody) -> dict[str, Any]:
        """sshare: shares, usage and fair-share factors of the association tree."""
        who = caller(request, gw)
        return _answer(policy_of(gw).sshare(body.argv, who.user))

    @router.post("/v1/policy/sprio")
    async def sprio(request: Request, body: CommandBody) -> dict[str, Any]:
        """sprio: pending jobs' priority factors."""
        caller(request, gw)
        return _answer(policy_of(gw).sprio(body.argv))

    return router
