"""Routing on /metrics: decisions by cluster and kind, moves between clusters and jobs
waiting for a prediction, counted as the router writes, on a gateway whose clusters are the
doubles of test_router.py; each count is checked against the events the store kept."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

from gateway.control.gateway import Gateway
from gateway.federation.routing import WAITING_NOTE
from gateway.metrics.observe import GatewayMetrics, route_kind
from gateway.metrics.source import gateway_page
from gateway.model.backend import BackendEvent, EventKind
from gateway.model.state import JobState
from tests.support.builders import make_job
from tests.support.expo_parser import Sample, parse_page
from tests.unit.test_router import Placed, Queues, _blocker, _cycles, _gateway, _pending


def _value(samples: list[Sample], name: str, **labels: str) -> float | None:
    for s in samples:
        if s.name == name and dict(s.labels) == labels:
            return s.value
    return None


def _stored_decisions(gw: Gateway, job_ids: list[int]) -> tuple[Counter[str], Counter[str]]:
    """(route events by target, revoke events by "from->to") as the store has them."""
    routes: Counter[str] = Counter()
    moves: Counter[str] = Counter()
    for job_id in job_ids:
        for e in gw.store.events(job_id):
            if e.kind in ("route", "revoke"):
                routes[str(e.detail.get("to") or "")] += 1
            if e.kind == "revoke":
                moves[f"{e.detail['cluster']}->{e.detail['to']}"] += 1
    return routes, moves


def test_a_burst_is_counted_once_with_its_wait_for_a_prediction(tmp_path: Path) -> None:
    home, far = Placed("home"), Queues("far", predicted=time.time())

    async def main() -> tuple[int, str, Counter[str], list[int]]:
        gw = _gateway(tmp_path, {"home": home, "far": far}, {"home": "home", "margin": 60})
        await gw.commit([_blocker(9, "home", 60), _pending(1), _pending(2)], "submit")
        await gw.cycle_once()  # far's planner is asked in a thread: both jobs wait
        waiting = gw.metrics.route_waiting
        await _cycles(gw)
        page = gateway_page(gw)
        gw.committer.close()
        routes, _ = _stored_decisions(gw, [1, 2])
        return waiting, page, routes, list(gw.metrics.recent_routes)

    waiting, page, routes, recent = asyncio.run(main())
    samples, types = parse_page(page)
    assert waiting == 2
    assert _value(samples, "caldera_routing_waiting_jobs") == 0
    assert types["caldera_routing_decisions_total"] == "counter"
    assert routes["far"] >= 1
    burst = _value(samples, "caldera_routing_decisions_total", cluster="far", kind="burst")
    counted = sum(s.value for s in samples if s.name == "caldera_routing_decisions_total")
    assert burst is not None
    assert burst >= 1
    assert counted == sum(routes.values())  # one count per stored decision
    assert sorted(set(recent)) == [1, 2]


def test_a_move_home_is_counted_as_a_revocation(tmp_path: Path) -> None:
    home = Placed("home")
    far = Queues("far", predicted=time.time() + 7200)

    async def main() -> tuple[GatewayMetrics, Counter[str], Counter[str]]:
        gw = _gateway(tmp_path, {"home": home, "far": far}, {"home": "home", "margin": 60})
        queued = replace(
            _pending(1),
            cluster="far",
            backend_id="far-1",
            routed_to="far",
            viable="home,far",
            origin="home",
        )
        await gw.commit([queued], "submit")
        await _cycles(gw)
        gw.committer.close()
        routes, moves = _stored_decisions(gw, [1])
        return gw.metrics, routes, moves

    metrics, routes, moves = asyncio.run(main())
    assert far.withdrawn == [1]
    assert moves == Counter({"far->home": 1})
    assert metrics.moves == {("far", "home"): 1}
    assert metrics.routes.get(("home", "home")) == 1
    assert sum(metrics.routes.values()) == sum(routes.values())


def test_route_kinds() -> None:
    pending = replace(make_job(1).build(), origin="home")
    first_home = replace(pending, routed_to="home", route_note="home: home starts now")
    assert route_kind(pending, first_home) == "home"
    away = replace(pending, routed_to="far", route_note="burst: far starts now")
    assert route_kind(pending, away) == "burst"
    assert route_kind(first_home, replace(first_home, route_note="stay: home")) == "stay"
    queued_far = replace(away, cluster="far", backend_id="far-1")
    assert route_kind(queued_far, replace(first_home, cluster="home")) == "home"
    assert route_kind(pending, replace(pending, route_note="nowhere: no start")) == "none"


def test_waiting_jobs_leave_the_gauge_when_they_end() -> None:
    m = GatewayMetrics()
    job = make_job(1).build()
    waiting = replace(job, route_note=WAITING_NOTE)
    m.job_changed(job, waiting)
    assert m.route_waiting == 1
    m.job_changed(waiting, replace(waiting, state=JobState.CANCELLED))
    assert m.route_waiting == 0
    assert m.routes == {}


def test_a_routed_start_is_measured_against_its_prediction(tmp_path: Path) -> None:
    """The far cluster predicted a start in 10 minutes and started the job at once: the
    prediction was 600 s late, counted once under (far, early)."""
    predicted = time.time() + 600
    home, far = Placed("home"), Queues("far", predicted=predicted)

    async def main() -> tuple[float | None, str]:
        gw = _gateway(tmp_path, {"home": home, "far": far}, {"home": "home", "margin": 60})
        await gw.commit([_blocker(9, "home", 60), _pending(1)], "submit")
        await _cycles(gw)
        route_start = gw.jobs[1].route_start
        far.events.append(
            BackendEvent(
                job_id=1,
                kind=EventKind.STARTED,
                time=time.time(),
                state=JobState.RUNNING,
                backend_id="far-1",
                nodes=("far-n1",),
            )
        )
        await _cycles(gw, 2)
        gw.committer.close()
        return route_start, gateway_page(gw)

    route_start, page = asyncio.run(main())
    assert route_start == predicted
    samples, types = parse_page(page)
    name = "caldera_routing_prediction_error_seconds"
    assert types[name] == "histogram"
    count = _value(samples, f"{name}_count", cluster="far", direction="early")
    total = _value(samples, f"{name}_sum", cluster="far", direction="early")
    assert count == 1
    assert total is not None
    assert 590 < total <= 600
    assert _value(samples, f"{name}_count", cluster="far", direction="late") is None
