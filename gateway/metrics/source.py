"""The gateway as the source of a /metrics page, and the page's routes: GET /metrics on
the API socket (any local user, as `squeue` shows every job to every user) and the ASGI
wrapper that times every API request."""

from __future__ import annotations

import time
from collections.abc import Callable

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.api.node_routes import node_states
from gateway.api.why_route import why_router
from gateway.control.gateway import Gateway
from gateway.control.submit import Caller
from gateway.metrics.collect import count_keys
from gateway.metrics.expo import CONTENT_TYPE
from gateway.metrics.observe import GatewayMetrics, route_templates
from gateway.metrics.render import MetricsInput, render

__all__ = ["gateway_page", "metrics_router", "timed_api"]


def gateway_page(gw: Gateway) -> str:
    """The page for a running gateway (on its event loop: the job table does not change
    while it is counted)."""
    free = gw.free_resources()
    inp = MetricsInput(
        counts=count_keys(gw.jobs.label_counts),
        active=gw.jobs.active.values(),
        clusters=gw.schedulable(),
        free=free,
        node_states=node_states(gw, free),
        observed=gw.metrics,
    )
    return render(inp)


def metrics_router(gw: Gateway, caller: Callable[[Request, Gateway], Caller]) -> APIRouter:
    """GET /metrics on the API socket (and `caldera why`'s route: both explain the queue)."""
    router = APIRouter()
    router.include_router(why_router(gw, caller))  # /v1/jobs/{id}/why: the detail behind %R

    @router.get("/metrics", response_model=None)
    async def metrics(request: Request) -> Response:
        """The Prometheus text exposition of jobs, clusters and the scheduler."""
        caller(request, gw)
        return Response(gateway_page(gw).encode(), media_type=CONTENT_TYPE)

    return router


def _paths(routes: list[BaseRoute]) -> list[str]:
    return [r.path for r in routes if isinstance(r, Route)]


def timed_api(api: FastAPI, app: ASGIApp, observed: GatewayMetrics) -> ASGIApp:
    """`app` (the API, perhaps behind the sbatch fast path) with each HTTP request's time
    to its answer counted by method and by `api`'s route template."""
    observed.api_routes = route_templates(_paths(api.routes))

    async def asgi(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        started = time.perf_counter()
        try:
            await app(scope, receive, send)
        finally:
            observed.observe_api(scope["method"], scope["path"], time.perf_counter() - started)

    return asgi
