"""The multi-cluster replay (gateway/simulate/multi.py, predict.py, multi_cli.py): invariants
on small random traces (each job runs once, no cluster over capacity, latency respected,
`home` = the single-cluster replay), the routings' distinct behaviours, and the command."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.simulate.cli import simulate_command
from gateway.simulate.engine import POLICIES, simulate
from gateway.simulate.multi import ROUTINGS, MultiOutcome, Routing, Site, simulate_multi
from gateway.simulate.predict import Profile
from gateway.simulate.swf import Trace, parse_lines


def swf(job: int, submit: int, run: int, procs: int, req_time: int) -> str:
    fields = [job, submit, -1, run, procs, -1, -1, procs, req_time, -1, 1, 7, 1, -1, 1, -1]
    return " ".join(str(f) for f in [*fields, -1, -1])


def random_trace(seed: int, n: int = 60, size: int = 8) -> Trace:
    rng = random.Random(seed)
    lines = [f"; MaxProcs: {size}"]
    t = 0
    for k in range(1, n + 1):
        t += rng.randrange(0, 400)
        run = rng.randrange(10, 3000)
        lines.append(swf(k, t, run, rng.randrange(1, size + 1), run + rng.randrange(0, 3000)))
    return parse_lines(lines)


SITES = [Site("home", 6), Site("burst", 2, 90.0)]
EASY = POLICIES["easy"]


def check_invariants(trace: Trace, sites: list[Site], o: MultiOutcome) -> None:
    by_id = {j.job_id: j for j in trace.jobs}
    ids = [j for j, _, _ in o.runs]
    assert len(ids) == len(set(ids)) == o.jobs  # each job ran exactly once
    fits = max(s.nodes for s in sites) if o.routing != "home" else sites[0].nodes
    assert set(ids) == {j.job_id for j in trace.jobs if j.procs <= fits}
    for site in sites:
        spans = [(t, t + by_id[j].run, by_id[j].procs) for j, c, t in o.runs if c == site.name]
        for t, _, _ in spans:  # usage is highest just after some start
            assert sum(p for s, e, p in spans if s <= t < e) <= site.nodes
        for j, c, t in o.runs:
            if c == site.name:
                assert t >= by_id[j].submit + site.latency_s
    assert sum(c.jobs for c in o.clusters) == o.jobs


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("routing", ROUTINGS)
def test_every_job_runs_once_within_every_cluster(seed: int, routing: str) -> None:
    trace = random_trace(seed)
    o = simulate_multi(trace, SITES, EASY, Routing(routing, wait_s=300, reroute_s=120))
    check_invariants(trace, SITES, o)
    if routing == "home":
        assert o.clusters[1].jobs == 0


@pytest.mark.parametrize("seed", [4, 5])
@pytest.mark.parametrize("policy", ["fcfs", "easy"])
def test_home_only_is_the_single_cluster_replay_of_the_home_share(seed: int, policy: str) -> None:
    trace = random_trace(seed)
    single = simulate(trace, SITES[0].nodes, POLICIES[policy])
    multi = simulate_multi(trace, SITES, POLICIES[policy], Routing("home"))
    home = multi.clusters[0]
    assert (multi.jobs, multi.too_big) == (single.jobs, single.too_big)
    assert multi.mean_wait == pytest.approx(single.mean_wait)
    assert multi.mean_bsld == pytest.approx(single.mean_bsld)
    assert multi.makespan == pytest.approx(single.makespan)
    assert home.utilisation == pytest.approx(single.utilisation)


# home: 4 nodes, job 1 holds all of them for an hour; job 2 (2 procs, 10 min) arrives at
# t=10. Home can start it at t=3600; the burst cluster (2 nodes, 60 s away) at t=70.
BUSY = parse_lines(
    ["; MaxProcs: 6", swf(1, 0, 3600, 4, 3600), swf(2, 10, 600, 2, 600), swf(3, 20, 30, 1, 60)]
)
TWO = [Site("home", 4), Site("burst", 2, 60.0)]


def start_of(o: MultiOutcome, job: int) -> tuple[str, float]:
    return next((c, t) for j, c, t in o.runs if j == job)


def test_the_routings_differ_where_they_should() -> None:
    home = simulate_multi(BUSY, TWO, EASY, Routing("home"))
    first = simulate_multi(BUSY, TWO, EASY, Routing("first"))
    wait = simulate_multi(BUSY, TWO, EASY, Routing("wait", wait_s=300))
    caldera = simulate_multi(BUSY, TWO, EASY, Routing("caldera", reroute_s=None))
    assert start_of(home, 2) == ("home", 3600)
    assert start_of(first, 2) == ("burst", 70)
    assert start_of(wait, 2) == ("burst", 10 + 300 + 60)
    assert start_of(caldera, 2) == ("burst", 70)
    # job 3 (1 proc): burst is planned full with job 2 until 670, home until 3600: burst
    assert start_of(caldera, 3) == ("burst", 670)
    for o in (home, first, wait, caldera):
        check_invariants(BUSY, TWO, o)


def test_caldera_moves_a_pending_job_when_home_frees_up() -> None:
    # job 1 holds home for 10 hours by its limit but runs 100 s; job 3 (2 hours) is routed to
    # burst (there at t=61); job 2 goes to burst too, behind job 3 (t=61+7200), and is
    # moved home by re-routing once job 1 has ended
    lines = [
        "; MaxProcs: 6",
        swf(1, 0, 100, 4, 36000),
        swf(3, 1, 7200, 2, 7200),
        swf(2, 30, 60, 2, 600),
    ]
    trace = parse_lines(lines)
    once = simulate_multi(trace, TWO, EASY, Routing("caldera", reroute_s=None))
    moving = simulate_multi(trace, TWO, EASY, Routing("caldera", reroute_s=60))
    assert start_of(once, 2) == ("burst", 1 + 60 + 7200)
    assert start_of(moving, 2)[0] == "home"
    assert moving.moved >= 1
    check_invariants(trace, TWO, moving)


def test_unknown_routing_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown routing 'x'; known: home, first, wait"):
        Routing("x")


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 50), st.integers(1, 8)), max_size=6),
    st.lists(st.tuples(st.integers(1, 8), st.integers(1, 40), st.integers(0, 60)), max_size=6),
)
def test_a_profile_reserves_the_earliest_slot_that_fits(
    running: list[tuple[int, int]], queue: list[tuple[int, int, int]]
) -> None:
    """Against counting processors second by second."""
    size = 8
    running = [(e, p) for e, p in running]
    while sum(p for _, p in running) > size:
        running.pop()
    prof = Profile(0.0, size, [(float(e), p) for e, p in running])
    horizon = 60 + 50 + 40 * 7
    used = [sum(p for e, p in running if t < e) for t in range(horizon)]
    for procs, dur, not_before in queue:
        want = next(
            t
            for t in range(not_before, horizon)
            if all(used[u] + procs <= size for u in range(t, t + dur))
        )
        assert prof.reserve(procs, float(dur), float(not_before)) == want
        for u in range(want, want + dur):
            used[u] += procs
    assert min(prof.free) >= 0


def test_simulate_clusters_prints_each_routing_and_refuses_a_bad_split(tmp_path: Path) -> None:
    path = tmp_path / "t.swf"
    jobs = [(1, 0, 3600, 4, 3600), (2, 10, 600, 2, 600), (3, 20, 30, 1, 60)]
    path.write_text("\n".join(["; MaxProcs: 6", *[swf(*a) for a in jobs]]) + "\n")
    res = CliRunner().invoke(
        simulate_command, [str(path), "--policy", "easy", "--clusters", "0.67,0.33"]
    )
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[1] == "clusters: home=4 nodes (latency 0s), burst=2 nodes (latency 120s)"
    heads = [ln.split()[0] for ln in lines if ln.startswith("easy/")]
    assert heads == [f"easy/{r}" for r in ROUTINGS]
    assert all("bsld=" in ln for ln in lines if ln.startswith("easy/"))
    bad = CliRunner().invoke(simulate_command, [str(path), "--clusters", "0.9,0.9"])
    assert bad.exit_code == 2
    assert "--clusters: give two or more fractions in (0, 1] summing to at most 1" in bad.output
    assert "Traceback" not in bad.output
    bad = CliRunner().invoke(simulate_command, [str(path), "--clusters", "1,0", "--routing", "x"])
    assert bad.exit_code == 2
