"""The dashboard's routes: the page (`/ui/`), its JSON API (`/ui/api/...`) and `/v1/token`.

One router serves both listeners. On the Unix socket the caller is the socket's peer, as
for every other route; on the optional TCP listener (gateway/dashboard/tcp.py) there is no
peer, and the caller is whoever a valid bearer token names. The page itself (HTML, JS, CSS)
holds no data and is served to anyone; every byte of job data comes from the JSON routes,
which refuse a TCP request without a valid token. Responses forbid framing and inline
scripts (Content-Security-Policy), so a job named `<script>...` stays text.
"""

from __future__ import annotations

import asyncio
import grp
import logging
import math
import pwd
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, HTTPException, Path, Query, Request
from fastapi.responses import RedirectResponse, Response
from pydantic import BaseModel, Field

from gateway.api.node_routes import node_states
from gateway.api.peercred import PEER_KEY
from gateway.control import ops
from gateway.control.arraytasks import Target
from gateway.control.gateway import Gateway
from gateway.control.submit import Caller
from gateway.dashboard.auth import (
    DEFAULT_LIFESPAN_S,
    TokenError,
    bearer_from,
    issue_token,
    load_key,
    verify_token,
)
from gateway.dashboard.decisions import decision_log
from gateway.dashboard.detail import job_detail
from gateway.dashboard.maps import share_tree, topology_map
from gateway.dashboard.sampler import Sampler
from gateway.dashboard.settings import DashboardSettings, dashboard_settings
from gateway.dashboard.views import NodeUse, QueueQuery, cluster_view, queue_page
from gateway.logutil import RateLimitedLogger
from gateway.policy.service import policy_of
from gateway.policy.shares import compute_shares

__all__ = ["DashboardState", "dashboard_router", "dashboard_state"]

log = logging.getLogger("caldera.dashboard")
_refusals = RateLimitedLogger(log)

MAX_ID = 2**32 - 1
CallerFromScope = Callable[[Mapping[str, Any], Gateway], Caller]

_SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
_STATIC = {"app.js": "text/javascript", "style.css": "text/css", "index.html": "text/html"}


class QueuePages:
    """Queue pages answered in the last `ttl_s` seconds, by query.

    With 100,000 jobs one page costs ~0.1 s of CPU (a pass and a sort over the whole
    queue), and every open dashboard asks every 2 s; viewers looking at the same page
    share one answer, and the work runs in a thread so that the event loop (submissions,
    squeue) only waits for the GIL's time slices, not for whole pages."""

    def __init__(self, ttl_s: float = 1.0, keep: int = 64) -> None:
        self.ttl_s = ttl_s
        self.keep = keep
        self._pages: dict[QueueQuery, tuple[float, bytes]] = {}

    async def get(self, q: QueueQuery, gw: Gateway) -> bytes:
        """The JSON of page `q`, fresh within `ttl_s`."""
        now = time.monotonic()
        hit = self._pages.get(q)
        if hit is not None and now - hit[0] < self.ttl_s:
            return hit[1]
        jobs = gw.visible_jobs()  # a list of frozen Jobs: safe to read from a thread
        body = await asyncio.to_thread(lambda: orjson.dumps(queue_page(jobs, q)))
        if len(self._pages) >= self.keep:
            self._pages = {k: v for k, v in self._pages.items() if now - v[0] < self.ttl_s}
            if len(self._pages) >= self.keep:
                self._pages.clear()
        self._pages[q] = (now, body)
        return body


@dataclass
class DashboardState:
    """What the dashboard keeps per gateway: settings, the chart's samples, the key."""

    settings: DashboardSettings
    sampler: Sampler
    queue_pages: QueuePages = field(default_factory=QueuePages)
    _key: bytes | None = field(default=None, repr=False)

    def key(self) -> bytes:
        """The JWT signing key (made on first use; refused if others can read it)."""
        if self._key is None:
            self._key = load_key(self.settings.key_path)
        return self._key


_states: weakref.WeakKeyDictionary[Gateway, DashboardState] = weakref.WeakKeyDictionary()


def dashboard_state(gw: Gateway) -> DashboardState:
    """The one DashboardState of `gw` (shared by the Unix-socket and TCP listeners)."""
    state = _states.get(gw)
    if state is None:
        settings = dashboard_settings(gw.config.home, gw.config.dashboard)
        sampler = Sampler(gw, settings.sample_interval_s, settings.history_samples)
        state = _states[gw] = DashboardState(settings, sampler)
    return state


def _static(name: str) -> bytes:
    return (resources.files("gateway.dashboard") / "static" / name).read_bytes()


def _json_headers() -> dict[str, str]:
    return dict(_SECURITY_HEADERS)


class TokenBody(BaseModel):
    """`caldera token [--lifespan S] [--user NAME]` (another user's: operators only)."""

    lifespan: int = Field(default=DEFAULT_LIFESPAN_S, ge=1)
    user: str | None = Field(default=None, max_length=256)


def _denied(message: str = "Access/permission denied") -> HTTPException:
    return HTTPException(
        401, {"code": 2002, "message": message}, headers={"WWW-Authenticate": "Bearer"}
    )


def _node_use(gw: Gateway) -> dict[str, NodeUse]:
    """What the gateway's own placements hold on each node now."""
    states = node_states(gw)
    use: dict[str, NodeUse] = {}
    for name, f in gw.free_resources().items():
        node = f.node
        use[name] = NodeUse(
            states.get(name, node.state),
            node.cpus - f.cpus,
            node.memory_mb - f.memory_mb,
            max(0, node.gpu_count() - len(f.gpus)),
            f.jobs,
        )
    return use


def dashboard_router(gw: Gateway, caller_from_scope: CallerFromScope) -> APIRouter:
    """The dashboard over a running gateway (`caller_from_scope`: the API's peer check)."""
    state = dashboard_state(gw)
    state.sampler.start()
    pages = {name: _static(name) for name in _STATIC}
    pages_cache = state.queue_pages
    router = APIRouter()

    def caller(request: Request) -> Caller:
        if request.scope.get(PEER_KEY) is not None:
            return caller_from_scope(request.scope, gw)
        token = bearer_from(dict(request.headers))
        if token is None:
            raise _denied("a bearer token is required (caldera token)")
        try:
            who = verify_token(state.key(), token)
        except TokenError as exc:
            client = request.client.host if request.client else "?"
            # a line a minute per address at most: anyone who reaches the port can send junk
            _refusals.log(
                logging.WARNING,
                client,
                "token",
                "dashboard: token from %s refused: %s",
                client,
                exc,
            )
            raise _denied() from None
        try:
            group = grp.getgrgid(who.gid).gr_name
        except KeyError:
            group = str(who.gid)
        return Caller(who.uid, who.gid, who.user, group, who.uid in gw.config.operators)

    def page(name: str) -> Response:
        return Response(pages[name], media_type=_STATIC[name], headers=_json_headers())

    @router.get("/ui", include_in_schema=False)
    async def ui_root() -> RedirectResponse:
        """The page lives at /ui/ (relative links resolve against the slash)."""
        return RedirectResponse("/ui/", status_code=307)

    @router.get("/ui/", include_in_schema=False)
    async def index() -> Response:
        """The page: no data in it; it asks the JSON routes below."""
        return page("index.html")

    @router.get("/ui/static/{name}", include_in_schema=False)
    async def static(name: str) -> Response:
        """The page's script and style sheet."""
        if name not in _STATIC or name == "index.html":
            raise HTTPException(404, "not found")
        return page(name)

    @router.get("/ui/api/whoami")
    async def whoami(request: Request) -> dict[str, Any]:
        """Who the dashboard thinks is looking (and the cluster's name)."""
        c = caller(request)
        return {
            "user": c.user,
            "uid": c.uid,
            "operator": c.operator,
            "cluster": gw.config.cluster_name,
        }

    @router.get("/ui/api/queue", response_model=None)
    async def queue(
        request: Request,
        user: Annotated[str | None, Query(max_length=256)] = None,
        state_name: Annotated[str | None, Query(alias="state", max_length=32)] = None,
        partition: Annotated[str | None, Query(max_length=256)] = None,
        cluster: Annotated[str | None, Query(max_length=256)] = None,
        sort: Annotated[str, Query(max_length=32)] = "id",
        order: Annotated[str, Query(pattern="^(asc|desc)$")] = "asc",
        offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
    ) -> Response:
        """One page of the queue (every job squeue shows), sorted and filtered here."""
        caller(request)
        q = QueueQuery(
            user or None,
            state_name or None,
            partition or None,
            cluster or None,
            sort,
            order == "desc",
            offset,
            limit,
        )
        body = await pages_cache.get(q, gw)
        return Response(body, media_type="application/json", headers=_json_headers())

    @router.get("/ui/api/jobs/{job_id}")
    async def job(
        request: Request, job_id: Annotated[int, Path(ge=0, le=MAX_ID)]
    ) -> dict[str, Any]:
        """One job's page: private parts only for its owner and operators."""
        c = caller(request)
        found = await gw.find(job_id)
        if found is None:
            raise HTTPException(404, {"code": 2017, "message": "Invalid job id specified"})
        return await job_detail(gw, c, found)

    @router.post("/ui/api/jobs/{job_id}/cancel")
    async def cancel(
        request: Request, job_id: Annotated[int, Path(ge=0, le=MAX_ID)]
    ) -> dict[str, Any]:
        """scancel JOBID, with the same rule: one's own jobs (operators: any)."""
        c = caller(request)
        results = await ops.cancel(gw, [Target(job_id)], c)
        error = results[0].error if results else None
        if error is not None:
            status = 403 if error.code == 2002 else 400
            raise HTTPException(status, {"code": error.code, "message": error.text})
        return {"id": job_id, "error": None}

    @router.get("/ui/api/clusters")
    async def clusters(request: Request) -> dict[str, Any]:
        """Clusters, partitions and nodes with what is allocated and why nodes are down."""
        caller(request)
        reasons = {name: a.reason for name, a in gw.drained.items()}
        view = cluster_view(gw.schedulable().values(), _node_use(gw), reasons)
        return {"now": time.time(), "clusters": view}

    @router.get("/ui/api/decisions")
    async def decisions(
        request: Request, limit: Annotated[int, Query(ge=1, le=500)] = 200
    ) -> dict[str, Any]:
        """The latest routing and revoke decisions the caller may see, newest first."""
        c = caller(request)
        return {"now": time.time(), **await decision_log(gw, c, limit)}

    @router.get("/ui/api/fairshare")
    async def fairshare(request: Request) -> dict[str, Any]:
        """sshare's association tree (operators: users see theirs with sshare)."""
        c = caller(request)
        if not c.operator:
            raise HTTPException(403, {"code": 2002, "message": "Access/permission denied"})
        svc = policy_of(gw)
        _, rows = await asyncio.to_thread(compute_shares, svc.state, svc.usage, svc.cfg)
        tree = share_tree(rows, svc.cfg, svc.state.cluster)
        return {"now": time.time(), "usage_time": svc.usage_time, "rows": tree}

    @router.get("/ui/api/topology")
    async def topology(request: Request) -> dict[str, Any]:
        """Clusters -> switches -> nodes with their state and allocated share."""
        caller(request)
        agents = gw.metrics.agents
        fabric = await asyncio.to_thread(agents.topology) if agents is not None else None
        view = topology_map(gw.schedulable().values(), _node_use(gw), fabric)
        return {"now": time.time(), "clusters": view}

    @router.get("/ui/api/history")
    async def history(request: Request) -> dict[str, Any]:
        """Queue length and utilisation samples for the chart."""
        caller(request)
        return {
            "now": time.time(),
            "interval_s": state.settings.sample_interval_s,
            "samples": state.sampler.history(),
        }

    @router.post("/v1/token")
    async def token(request: Request, body: TokenBody) -> dict[str, Any]:
        """A bearer token for the caller (scontrol token): over the Unix socket only, so a
        token never mints another."""
        if request.scope.get(PEER_KEY) is None:
            raise _denied("tokens are issued over the gateway's Unix socket only")
        c = caller_from_scope(request.scope, gw)
        user = body.user or c.user
        if user != c.user and not c.operator:
            raise HTTPException(403, {"code": 2002, "message": "Access/permission denied"})
        try:
            pwd.getpwnam(user)
        except (KeyError, ValueError):  # ValueError: a NUL in the name
            raise HTTPException(400, {"code": 2003, "message": "Invalid user id"}) from None
        if body.lifespan > state.settings.max_lifespan_s:
            message = f"lifespan is at most {state.settings.max_lifespan_s} seconds"
            raise HTTPException(400, {"code": 2002, "message": message})
        try:
            key = state.key()
        except OSError as exc:
            log.error("dashboard: no JWT key: %s", exc)
            raise HTTPException(503, {"code": 1, "message": str(exc)}) from None
        now = time.time()
        return {
            "user": user,
            "token": issue_token(key, user, body.lifespan, now),
            "expires": math.ceil(now + body.lifespan),
        }

    return router
