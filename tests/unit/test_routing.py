"""The pure routing decision (gateway/federation/routing.py): examples of each rule, and
properties over random predictions (hypothesis) that hold for every input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.federation.routing import Burst, Prediction, RoutePolicy, choose, choose_batch

NOW = 1_000_000.0
P = Prediction


def at(cluster: str, minutes: float | None) -> Prediction:
    return P(cluster, None if minutes is None else NOW + 60 * minutes)


def test_home_wins_within_the_margin_and_loses_beyond_it() -> None:
    pol = RoutePolicy("a", margin_s=300)
    near = choose([at("a", 4), at("b", 0)], pol, now=NOW)
    far = choose([at("a", 6), at("b", 0)], pol, now=NOW)
    assert (near.cluster, far.cluster) == ("a", "b")
    assert near.reason == "home: a starts in 4m; b now (margin 5m)"
    assert far.reason == "burst: b starts now, home (a) in 6m (margin 5m)"
    assert far.compared == (at("a", 6), at("b", 0))


def test_prefer_goes_away_unless_home_is_more_than_the_margin_sooner() -> None:
    pol = RoutePolicy("a", margin_s=300)
    assert choose([at("a", 0), at("b", 4)], pol, Burst.PREFER, now=NOW).cluster == "b"
    assert choose([at("a", 0), at("b", 6)], pol, Burst.PREFER, now=NOW).cluster == "a"


def test_never_stays_home_even_when_home_is_unknown() -> None:
    pol = RoutePolicy("a")
    r = choose([at("b", 0), at("a", None)], pol, Burst.NEVER, now=NOW)
    assert r.cluster == "a"
    assert r.reason == "home only (burst=never): a unknown"
    # home not eligible: the first prediction is the job's own cluster
    assert choose([at("c", 90), at("b", 0)], pol, Burst.NEVER, now=NOW).cluster == "c"


def test_burst_after_keeps_the_job_home_until_it_has_waited() -> None:
    pol = RoutePolicy("a", margin_s=0)
    preds = [at("a", 60), at("b", 0)]
    early = choose(preds, pol, waited_s=599, burst_after_s=600, now=NOW)
    late = choose(preds, pol, waited_s=600, burst_after_s=600, now=NOW)
    assert (early.cluster, late.cluster) == ("a", "b")
    assert "burst-after" in early.reason


def test_weights_are_seconds_added_to_a_cluster() -> None:
    pol = RoutePolicy("a", margin_s=0, weights={"b": 3600})
    assert choose([at("a", 30), at("b", 0)], pol, now=NOW).cluster == "a"
    assert choose([at("a", 61), at("b", 0)], pol, now=NOW).cluster == "b"


def test_unknown_is_never_chosen_and_all_unknown_goes_nowhere() -> None:
    pol = RoutePolicy("a")
    assert choose([at("a", None), at("b", 600)], pol, now=NOW).cluster == "b"
    r = choose([at("a", None), at("b", None)], pol, now=NOW)
    assert r.cluster is None
    assert r.reason == "nowhere: no start predicted (a unknown, b unknown)"
    assert choose([], pol, now=NOW).cluster is None
    nan = choose([P("a", float("nan")), P("b", float("inf"))], pol, now=NOW)
    assert (nan.cluster, nan.reason) == ("b", "burst: b starts never, home (a) unknown (margin 5m)")


def test_the_current_cluster_needs_the_margin_to_be_left() -> None:
    pol = RoutePolicy("a", margin_s=300)
    # home 1 minute later than b: a new job goes home, the job already on b stays there
    assert choose([at("a", 11), at("b", 10)], pol, now=NOW).cluster == "a"
    stay = choose([at("a", 11), at("b", 10)], pol, now=NOW, current="b")
    assert stay.cluster == "b"
    assert stay.reason == "stay: b (current) starts in 10m; a in 11m (margin 5m)"
    # the favour of home and the hysteresis do not add up: home sooner at all brings it back
    assert choose([at("a", 9), at("b", 10)], pol, now=NOW, current="b").cluster == "a"
    # a third cluster must beat b by the margin too
    assert choose([at("a", 60), at("b", 10), at("c", 6)], pol, now=NOW, current="b").cluster == "b"
    assert choose([at("a", 60), at("b", 10), at("c", 4)], pol, now=NOW, current="b").cluster == "c"


def test_past_predictions_count_as_now_and_ties_go_by_order() -> None:
    pol = RoutePolicy("x", margin_s=0)
    assert choose([at("b", -30), at("c", 0)], pol, now=NOW).cluster == "b"
    assert choose([at("c", 0), at("b", -30)], pol, now=NOW).cluster == "c"


def test_bad_policy_values_are_refused() -> None:
    with pytest.raises(ValueError, match="margin must be a finite number >= 0"):
        RoutePolicy("a", margin_s=-1)
    with pytest.raises(ValueError, match="weight of cluster 'b' must be finite"):
        RoutePolicy("a", weights={"b": float("nan")})


NAMES = ("a", "b", "c", "d")
starts = st.one_of(st.none(), st.integers(-600, 7200).map(lambda s: NOW + s))
preds_st = st.lists(st.tuples(st.sampled_from(NAMES), starts), min_size=1, max_size=4).map(
    lambda xs: [P(c, s) for c, s in dict(xs).items()]
)
policy_st = st.builds(
    RoutePolicy,
    st.sampled_from(NAMES),
    st.integers(0, 3600).map(float),
    st.dictionaries(st.sampled_from(NAMES), st.integers(-900, 900).map(float), max_size=2),
)
burst_st = st.sampled_from(list(Burst))
current_st = st.one_of(st.none(), st.sampled_from(NAMES))


@settings(max_examples=300, deadline=None)
@given(preds_st, policy_st, burst_st, current_st)
def test_never_an_unknown_over_a_known(
    preds: list[Prediction], pol: RoutePolicy, burst: Burst, current: str | None
) -> None:
    r = choose(preds, pol, burst, now=NOW, current=current)
    if burst is not Burst.NEVER and any(p.start is not None for p in preds):
        assert r.cluster is not None
        assert dict((p.cluster, p.start) for p in preds)[r.cluster] is not None
    assert r.cluster is None or r.cluster in {p.cluster for p in preds}


@settings(max_examples=300, deadline=None)
@given(preds_st, policy_st, current_st)
def test_never_stays_on_the_anchor(
    preds: list[Prediction], pol: RoutePolicy, current: str | None
) -> None:
    names = [p.cluster for p in preds]
    anchor = pol.home if pol.home in names else names[0]
    assert choose(preds, pol, Burst.NEVER, now=NOW, current=current).cluster == anchor


@settings(max_examples=300, deadline=None)
@given(preds_st, policy_st, st.integers(0, 3600))
def test_monotone_in_margin(preds: list[Prediction], pol: RoutePolicy, more: int) -> None:
    """Home chosen at one margin stays chosen at any larger margin (ALLOWED), and a cluster
    other than home chosen under PREFER stays chosen too."""
    wider = RoutePolicy(pol.home, pol.margin_s + more, pol.weights)
    if choose(preds, pol, now=NOW).cluster == pol.home:
        assert choose(preds, wider, now=NOW).cluster == pol.home
    away = choose(preds, pol, Burst.PREFER, now=NOW).cluster
    if away is not None and away != pol.home:
        assert choose(preds, wider, Burst.PREFER, now=NOW).cluster != pol.home


@settings(max_examples=300, deadline=None)
@given(preds_st, policy_st, burst_st)
def test_a_decision_is_stable_once_taken(
    preds: list[Prediction], pol: RoutePolicy, burst: Burst
) -> None:
    """Routing again with the job on the chosen cluster and nothing changed keeps it there
    (no flapping), and the chosen start is within the margin of the best known start."""
    first = choose(preds, pol, burst, now=NOW)
    assert choose(preds, pol, burst, now=NOW, current=first.cluster).cluster == first.cluster
    known = {p.cluster: p.start for p in preds if p.start is not None}
    if burst is not Burst.NEVER and known and first.cluster is not None:
        eff = {c: max(s, NOW) + pol.weights.get(c, 0.0) for c, s in known.items()}
        assert eff[first.cluster] <= min(eff.values()) + pol.margin_s


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(starts, min_size=3, max_size=3),
            burst_st,
            st.integers(0, 1200),
            st.one_of(st.none(), st.integers(0, 1200)),
            st.one_of(st.none(), st.integers(0, 2)),
        ),
        max_size=20,
    ),
    policy_st,
)
def test_the_batch_path_decides_as_choose(
    jobs: list[tuple[list[float | None], Burst, int, int | None, int | None]], pol: RoutePolicy
) -> None:
    clusters = ["a", "b", "c"]
    got = choose_batch(
        clusters,
        [j[0] for j in jobs],
        pol,
        [j[1] for j in jobs],
        [float(j[2]) for j in jobs],
        [None if j[3] is None else float(j[3]) for j in jobs],
        NOW,
        [j[4] for j in jobs],
    )
    want = []
    for row, burst, waited, after, cur in jobs:
        preds = [P(c, s) for c, s in zip(clusters, row, strict=True)]
        r = choose(
            preds,
            pol,
            burst,
            float(waited),
            None if after is None else float(after),
            NOW,
            None if cur is None else clusters[cur],
        )
        want.append(None if r.cluster is None else clusters.index(r.cluster))
    assert got == want


def test_the_batch_path_refuses_a_ragged_row() -> None:
    with pytest.raises(ValueError, match="job 1: 2 predictions for 3 clusters"):
        choose_batch(["a", "b", "c"], [[1.0, 2.0, 3.0], [1.0, 2.0]], RoutePolicy("a"))
