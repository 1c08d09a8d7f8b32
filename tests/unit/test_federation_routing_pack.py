"""Packing in the routing decision (RoutePolicy.pack_s with cluster sizes): the smallest
cluster a job fits is favoured, capped by the job's length; the batch path agrees; the
replay that measures it still runs every job once."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.federation.routing import Burst, Prediction, RoutePolicy, choose, choose_batch
from gateway.simulate.engine import POLICIES
from gateway.simulate.multi import Routing, Site, simulate_multi
from gateway.simulate.swf import SwfJob, Trace

NOW = 1_000_000.0


def at(cluster: str, minutes: float | None, size: int) -> Prediction:
    return Prediction(cluster, None if minutes is None else NOW + 60 * minutes, size)


def test_the_smaller_cluster_is_favoured_by_pack_beyond_the_home_margin() -> None:
    pol = RoutePolicy("home", margin_s=300, pack_s=3600)
    soon = choose([at("home", 0, 96), at("burst", 50, 32)], pol, now=NOW)
    late = choose([at("home", 0, 96), at("burst", 56, 32)], pol, now=NOW)
    # burst wins while it starts less than pack - margin (55 min) after home
    assert (soon.cluster, late.cluster) == ("burst", "home")
    assert soon.reason.endswith("(margin 5m, pack 1h00m)")


def test_pack_is_capped_by_the_jobs_length() -> None:
    pol = RoutePolicy("home", margin_s=300, pack_s=3600)
    preds = [at("home", 0, 96), at("burst", 20, 32)]
    assert choose(preds, pol, now=NOW, length_s=7200).cluster == "burst"
    assert choose(preds, pol, now=NOW, length_s=1200).cluster == "home"  # 20m - 20m vs -5m
    assert choose(preds, pol, now=NOW, length_s=1600).cluster == "burst"
    assert choose(preds, pol, now=NOW, length_s=float("nan")).cluster == "burst"


def test_no_sizes_or_equal_sizes_favour_nobody() -> None:
    packed = RoutePolicy("home", margin_s=300, pack_s=3600)
    plain = RoutePolicy("home", margin_s=300)
    for sizes in ((0, 0), (64, 64), (96, 0)):
        preds = [at("home", 0, sizes[0]), at("burst", 3, sizes[1])]
        a, b = choose(preds, packed, now=NOW), choose(preds, plain, now=NOW)
        assert (
            (a.cluster, a.reason)
            == (b.cluster, b.reason)
            == (
                "home",
                "home: home starts now; burst in 3m (margin 5m)",
            )
        )


def test_pack_adds_to_the_current_clusters_hysteresis() -> None:
    pol = RoutePolicy("home", margin_s=300, pack_s=600)
    preds = [at("home", 0, 96), at("burst", 9, 32)]
    # a new job goes home (burst 9 min later: more than pack - margin, 5 min) ...
    assert choose(preds, pol, now=NOW).cluster == "home"
    # ... and one already on burst stays (home favoured, burst current: pack decides, 10 min)
    assert choose(preds, pol, now=NOW, current="burst").cluster == "burst"
    later = [at("home", 0, 96), at("burst", 11, 32)]
    assert choose(later, pol, now=NOW, current="burst").cluster == "home"


def test_burst_never_and_burst_after_still_keep_the_job_home() -> None:
    pol = RoutePolicy("home", margin_s=0, pack_s=3600)
    preds = [at("home", 30, 96), at("burst", 0, 32)]
    assert choose(preds, pol, Burst.NEVER, now=NOW).cluster == "home"
    assert choose(preds, pol, waited_s=10, burst_after_s=600, now=NOW).cluster == "home"


def test_bad_pack_and_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="pack must be a finite number >= 0"):
        RoutePolicy("a", pack_s=-1)
    with pytest.raises(ValueError, match="pack must be a finite number >= 0"):
        RoutePolicy("a", pack_s=float("inf"))
    with pytest.raises(ValueError, match="1 cluster sizes for 2 clusters"):
        choose_batch(["a", "b"], [[NOW, NOW]], RoutePolicy("a"), sizes=[4])


NAMES = ("a", "b", "c")
starts = st.one_of(st.none(), st.integers(-600, 7200).map(lambda s: NOW + s))
sizes_st = st.lists(st.sampled_from([0, 16, 32, 96]), min_size=3, max_size=3)
policy_st = st.builds(
    RoutePolicy,
    st.sampled_from(NAMES),
    st.integers(0, 1800).map(float),
    st.dictionaries(st.sampled_from(NAMES), st.integers(-900, 900).map(float), max_size=2),
    st.integers(0, 7200).map(float),
)
lengths_st = st.one_of(st.none(), st.integers(0, 10_000).map(float))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(starts, min_size=3, max_size=3),
            st.sampled_from(list(Burst)),
            st.one_of(st.none(), st.integers(0, 2)),
            lengths_st,
        ),
        max_size=20,
    ),
    policy_st,
    sizes_st,
)
def test_the_batch_path_packs_as_choose(
    jobs: list[tuple[list[float | None], Burst, int | None, float | None]],
    pol: RoutePolicy,
    sizes: list[int],
) -> None:
    got = choose_batch(
        NAMES,
        [j[0] for j in jobs],
        pol,
        [j[1] for j in jobs],
        now=NOW,
        current=[j[2] for j in jobs],
        sizes=sizes,
        lengths=[j[3] for j in jobs],
    )
    want = []
    for row, burst, cur, length in jobs:
        preds = [Prediction(c, s, z) for c, s, z in zip(NAMES, row, sizes, strict=True)]
        r = choose(
            preds,
            pol,
            burst,
            now=NOW,
            current=None if cur is None else NAMES[cur],
            length_s=length,
        )
        want.append(None if r.cluster is None else NAMES.index(r.cluster))
    assert got == want


@settings(max_examples=300, deadline=None)
@given(st.lists(starts, min_size=3, max_size=3), policy_st, sizes_st, st.integers(0, 3600))
def test_monotone_in_pack(
    row: list[float | None], pol: RoutePolicy, sizes: list[int], more: int
) -> None:
    """A job sent to the smallest cluster stays there at any larger pack; the chosen
    cluster's start is within margin + pack of the best known start."""
    preds = [Prediction(c, s, z) for c, s, z in zip(NAMES, row, sizes, strict=True)]
    more_pol = RoutePolicy(pol.home, pol.margin_s, pol.weights, pol.pack_s + more)
    given_sizes = [z for z in sizes if z > 0]
    chosen = choose(preds, pol, now=NOW).cluster
    if chosen is None:
        assert all(s is None for s in row)
        return
    size = dict(zip(NAMES, sizes, strict=True))[chosen]
    if given_sizes and size == min(given_sizes) < max(given_sizes):
        assert choose(preds, more_pol, now=NOW).cluster == chosen
    known = {
        p.cluster: max(p.start, NOW) + pol.weights.get(p.cluster, 0.0)
        for p in preds
        if p.start is not None
    }
    assert known[chosen] <= min(known.values()) + pol.margin_s + pol.pack_s


def _trace() -> Trace:
    """Every 30 minutes two narrow jobs (4 processors: they fit either cluster) and then
    one as wide as home: what packing is for."""
    jobs: list[SwfJob] = []
    for wave in range(12):
        t = 1800.0 * wave
        for k in range(2):
            jobs.append(SwfJob(len(jobs) + 1, t + k, 900.0, 4, 20, 2))
        jobs.append(SwfJob(len(jobs) + 1, t + 2, 1500.0, 16, 30, 1))
    return Trace(tuple(jobs), 24, 0)


def test_the_replay_packs_narrow_jobs_onto_the_small_cluster_and_runs_each_once() -> None:
    sites = [Site("home", 16), Site("burst", 8, 60.0)]
    trace = _trace()
    out = {
        pack: simulate_multi(
            trace, sites, POLICIES["easy"], Routing("caldera", reroute_s=60.0, pack_s=pack)
        )
        for pack in (0.0, 3600.0)
    }
    for o in out.values():
        ids = [j for j, _, _ in o.runs]
        assert sorted(ids) == [j.job_id for j in trace.jobs]  # each job ran, once
        wide = {j.job_id for j in trace.jobs if j.procs > 8}
        assert all(c == "home" for j, c, _ in o.runs if j in wide)
    # unpacked, the narrow jobs start at home at once and the wide one waits for them;
    # packed, they take the small cluster (60 s away) and the wide one starts at once
    burst = {p: o.clusters[1].jobs for p, o in out.items()}
    assert burst[3600.0] > burst[0.0]
    assert out[3600.0].clusters[0].mean_wait < out[0.0].clusters[0].mean_wait
