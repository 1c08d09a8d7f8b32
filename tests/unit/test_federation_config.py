"""The `[routing]` table of caldera.toml: parsed from real TOML text into a frozen value, or
refused with a message naming the file and the place; never half-applied, never a traceback."""

from __future__ import annotations

import dataclasses
import posixpath
import tomllib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.control.config import ConfigError
from gateway.federation.config import RoutingConfig, parse_duration, parse_routing
from gateway.federation.routing import Burst, Prediction, choose
from gateway.model.jobspec import JobSpec

KNOWN = ("a", "burst", "k8s")
SOURCE = "/etc/caldera/caldera.toml"

FULL = """
[routing]
home = "a"
margin = "5m"
burst_after = "0"
outage_timeout = "2m"

[[routing.rule]]
partition = "cpu"
clusters = ["a", "burst", "k8s"]

[[routing.rule]]
qos = ["high", "urgent"]
clusters = ["a"]

[[routing.rule]]
partition = ["gpu", "gpu-big"]
qos = "normal"
clusters = ["burst", "a"]

[routing.cluster.burst]
burst = true
weight = "60s"
max_jobs = 100
images = ["localhost/*"]

[[routing.cluster.burst.fs]]
submit = "/home"
path = "/shared/home"

[[routing.cluster.burst.fs]]
submit = "/scratch/"
path = ""

[routing.cluster.k8s]
burst = false
weight = -30
fs = []
"""


def parse(text: str, known: tuple[str, ...] = KNOWN) -> RoutingConfig:
    return parse_routing(tomllib.loads(text), known, SOURCE)


def parse_or_message(data: dict[str, Any]) -> RoutingConfig | str:
    """The parsed table, or the ConfigError's message (never another exception)."""
    try:
        return parse_routing(data, KNOWN, SOURCE)
    except ConfigError as exc:
        return str(exc)


def refusal(text: str, known: tuple[str, ...] = KNOWN) -> str:
    with pytest.raises(ConfigError) as info:
        parse(text, known)
    message = str(info.value)
    assert message.startswith(f"{SOURCE}: "), message
    assert "\n" not in message
    return message


def test_a_full_table_is_read_with_durations_in_seconds() -> None:
    cfg = parse(FULL)
    assert cfg.home == "a"
    assert cfg.clusters == KNOWN
    assert (cfg.margin_s, cfg.burst_after_s, cfg.outage_timeout_s) == (300.0, 0.0, 120.0)
    burst = cfg.cluster("burst")
    assert (burst.burst, burst.weight_s, burst.max_jobs) == (True, 60.0, 100)
    assert burst.images == ("localhost/*",)
    assert cfg.cluster("k8s").weight_s == -30.0
    assert cfg.cluster("k8s").burst is False
    assert cfg.cluster("a").fs is None  # not mentioned: the submit hosts' files, as is


def test_no_routing_table_gives_every_cluster_home_first() -> None:
    cfg = parse_routing({}, ("local", "hpc"), SOURCE)
    assert cfg.home == "local"
    assert cfg.clusters_for(None, None) == ("local", "hpc")
    assert cfg.clusters_for("anything", "normal") == ("local", "hpc")
    assert cfg.translate_dir("/home/u/x", "hpc") == "/home/u/x"
    moved = parse('[routing]\nhome = "k8s"\n')
    assert moved.clusters == ("k8s", "a", "burst")


@pytest.mark.parametrize(
    ("partition", "qos", "expected"),
    [
        ("cpu", "normal", ("a", "burst", "k8s")),
        ("cpu", "high", ("a", "burst", "k8s")),  # first match wins: the partition rule
        ("debug", "high", ("a",)),
        ("debug", "urgent", ("a",)),
        ("gpu", "normal", ("burst", "a")),
        ("gpu-big", "normal", ("burst", "a")),
        ("gpu", "low", ("a", "burst")),  # no rule: home and the burst targets (k8s is not)
        (None, None, ("a", "burst")),
    ],
)
def test_rules_route_partitions_and_qos_first_match_wins(
    partition: str | None, qos: str | None, expected: tuple[str, ...]
) -> None:
    cfg = parse(FULL)
    assert cfg.clusters_for(partition, qos) == expected
    assert cfg.clusters_for(partition, qos) == expected  # answered again from the memo


@pytest.mark.parametrize(
    ("path", "cluster", "expected"),
    [
        ("/home/u/run", "burst", "/shared/home/u/run"),
        ("/home", "burst", "/shared/home"),
        ("/home/", "burst", "/shared/home"),
        ("/homework/u", "burst", None),  # whole components only
        ("/scratch/u", "burst", "/scratch/u"),  # path "": shared as is
        ("/home/u/../../etc", "burst", None),  # resolved before matching
        ("/scratch//u", "burst", "/scratch/u"),
        ("/tmp/x", "burst", None),
        ("relative/dir", "burst", None),
        ("/home/u", "k8s", None),  # fs = []: nothing reachable
        ("/anything", "a", "/anything"),  # no fs table: shared as is
    ],
)
def test_translate_dir_follows_the_fs_map(path: str, cluster: str, expected: str | None) -> None:
    assert parse(FULL).translate_dir(path, cluster) == expected


def test_root_prefix_maps_everything_under_the_target() -> None:
    cfg = parse('[[routing.cluster.k8s.fs]]\nsubmit = "/"\npath = "/mnt/host"\n')
    assert cfg.translate_dir("/home/u", "k8s") == "/mnt/host/home/u"
    assert cfg.translate_dir("/", "k8s") == "/mnt/host"


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (0, 0.0),
        (90, 90.0),
        (2.5, 2.5),
        ("0", 0.0),
        ("90s", 90.0),
        ("5m", 300.0),
        ("2h", 7200.0),
        ("1d", 86400.0),
        ("1.5m", 90.0),
        ("1:30", 90.0),  # Slurm's minutes:seconds
        ("1:00:00", 3600.0),
        ("1-00:00:00", 86400.0),
        ("2-3", 2 * 86400.0 + 3 * 3600.0),
    ],
)
def test_durations_are_seconds_or_slurm_times(value: Any, seconds: float) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize(
    "value", ["60", "5x", "", "m", "-5m", -1, True, "INFINITE", "1:2:3:4", float("nan"), [5]]
)
def test_bad_durations_are_refused(value: Any) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(value)


def test_a_negative_weight_is_a_preference() -> None:
    assert parse_duration("-2m", signed=True) == -120.0


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("routing = 3\n", ["[routing]", "must be a table"]),
        ('[routing]\nhome = "zz"\n', ["[routing] home", "No cluster 'zz' known", "a, burst"]),
        ('[routing]\nmargin = "60"\n', ["[routing]", "margin", "'60'"]),
        ('[routing]\noutage_timeout = "soon"\n', ["outage_timeout", "'soon'"]),
        ("[routing]\nburst_after = -5\n", ["burst_after", "negative"]),
        ('[routing]\noutage_timeout = "0"\n', ["[routing]", "outage_timeout", "more than 0"]),
        ('[routing]\nmargins = "5m"\n', ["[routing]", "unknown setting", "'margins'"]),
        (
            '[[routing.rule]]\npartition = "cpu"\nclusters = ["a", "nosuch"]\n',
            ["[[routing.rule]] #1", "No cluster 'nosuch' known"],
        ),
        ('[[routing.rule]]\npartition = "cpu"\n', ["[[routing.rule]] #1", "clusters is required"]),
        ('[[routing.rule]]\nclusters = ["a", "a"]\n', ["listed twice"]),
        ('[[routing.rule]]\npartiton = "cpu"\nclusters = ["a"]\n', ["unknown", "'partiton'"]),
        ('[[routing.rule]]\npartition = []\nclusters = ["a"]\n', ["partition", "non-empty"]),
        (
            '[[routing.rule]]\nclusters = ["a"]\n[[routing.rule]]\nqos = "x"\nclusters = ["a"]\n',
            ["[[routing.rule]] #2", "never used", "[[routing.rule]] #1"],
        ),
        ("[routing.cluster.nosuch]\nburst = true\n", ["[routing.cluster.nosuch]", "nosuch"]),
        ('[routing.cluster.burst]\nburst = "yes"\n', ["[routing.cluster.burst]", "true or false"]),
        ("[routing.cluster.a]\nburst = false\n", ["[routing.cluster.a]", "home cluster"]),
        ("[routing.cluster.burst]\nmax_jobs = 0\n", ["max_jobs"]),
        ('[routing.cluster.burst]\nimages = "x"\n', ["images"]),
        ('[routing.cluster.burst]\nweight = "1 hour"\n', ["weight", "'1 hour'"]),
        ("[routing.cluster.burst]\ncolor = 1\n", ["unknown setting", "'color'"]),
        (
            '[[routing.cluster.burst.fs]]\nsubmit = "/home"\n'
            '[[routing.cluster.burst.fs]]\nsubmit = "/home/u"\npath = "/x"\n',
            ["[routing.cluster.burst] fs #2", "overlaps /home (fs #1)"],
        ),
        (
            '[[routing.cluster.burst.fs]]\nsubmit = "/data/"\n'
            '[[routing.cluster.burst.fs]]\nsubmit = "/data"\n',
            ["fs #2", "overlaps /data"],
        ),
        ('[[routing.cluster.burst.fs]]\nsubmit = "home"\n', ["fs #1", "absolute"]),
        ('[[routing.cluster.burst.fs]]\nsubmit = "/a/../b"\n', ["fs #1", ".."]),
        ('[[routing.cluster.burst.fs]]\npath = "/x"\n', ["fs #1", "submit"]),
        ('[[routing.cluster.burst.fs]]\nsubmit = "/a"\npath = "x"\n', ["fs #1", "path"]),
        ('[routing.cluster.burst]\nfs = {submit = "/a"}\n', ["fs must be an array"]),
    ],
)
def test_bad_tables_are_refused_naming_the_place(text: str, fragments: list[str]) -> None:
    message = refusal(text)
    for fragment in fragments:
        assert fragment in message, (fragment, message)


def test_disjoint_prefixes_on_one_cluster_and_the_same_prefix_on_two_are_fine() -> None:
    cfg = parse(
        '[[routing.cluster.burst.fs]]\nsubmit = "/home"\n'
        '[[routing.cluster.burst.fs]]\nsubmit = "/home2"\n'
        '[[routing.cluster.k8s.fs]]\nsubmit = "/home"\npath = "/mnt/home"\n'
    )
    assert cfg.translate_dir("/home2/x", "burst") == "/home2/x"
    assert cfg.translate_dir("/home/x", "k8s") == "/mnt/home/x"


def test_the_value_is_frozen() -> None:
    cfg = parse(FULL)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.home = "burst"  # type: ignore[misc]
    with pytest.raises(TypeError):
        cfg.per_cluster["a"] = cfg.cluster("burst")  # type: ignore[index]


def test_burst_after_comes_from_the_job_else_the_table() -> None:
    cfg = parse('[routing]\nburst_after = "10m"\n')
    assert cfg.burst_after_for(JobSpec(name="j", workdir="/w")) == 600.0
    assert cfg.burst_after_for(JobSpec(name="j", workdir="/w", burst_after_min=3)) == 180.0
    assert cfg.burst_after_for(JobSpec(name="j", workdir="/w", burst_after_min=0)) == 0.0


def test_policy_carries_home_margin_and_weights_into_routing() -> None:
    cfg = parse(FULL)
    policy = cfg.policy()
    assert (policy.home, policy.margin_s) == ("a", 300.0)
    assert dict(policy.weights) == {"burst": 60.0, "k8s": -30.0}
    # burst starts 250 s sooner than home: within the 300 s margin, home keeps it
    stay = choose([Prediction("a", 1000.0), Prediction("burst", 750.0)], policy, Burst.ALLOWED)
    assert stay.cluster == "a"
    # 400 s sooner, less its 60 s weight, is beyond the margin: it bursts
    go = choose([Prediction("a", 1000.0), Prediction("burst", 600.0)], policy, Burst.ALLOWED)
    assert go.cluster == "burst"


def test_pack_is_off_unless_the_table_sets_it() -> None:
    assert parse("[routing]\n").policy().pack_s == 0.0
    packed = parse('[routing]\npack = "1h"\n').policy()
    assert packed.pack_s == 3600.0
    # the small cluster (8 CPUs) starts a 10-minute job 250 s later than home (64): the
    # favour (capped at the job's 600 s) outweighs that and home's 300 s margin; without
    # `pack` home keeps it
    preds = [Prediction("a", 1000.0, size=64), Prediction("burst", 1250.0, size=8)]
    assert choose(preds, packed, Burst.ALLOWED, length_s=600.0).cluster == "burst"
    plain = parse("[routing]\n").policy()
    assert choose(preds, plain, Burst.ALLOWED, length_s=600.0).cluster == "a"
    with pytest.raises(ConfigError, match="pack"):
        parse('[routing]\npack = "-5m"\n')


# --- fuzzing: any TOML-like mapping gives a RoutingConfig or a ConfigError ------------

_words = st.sampled_from(
    [
        "home",
        "margin",
        "burst_after",
        "outage_timeout",
        "rule",
        "cluster",
        "partition",
        "qos",
        "clusters",
        "burst",
        "weight",
        "max_jobs",
        "images",
        "fs",
        "submit",
        "path",
        *KNOWN,
        "x",
    ]
)
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["a", "burst", "5m", "60", "0", "1:00", "/home", "/", "", "/a/../b", "-1"]),
    st.text(max_size=8),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(_words, st.text(max_size=4)), inner, max_size=5),
    ),
    max_leaves=25,
)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(_words, _values, max_size=6))
def test_random_routing_tables_never_crash(table: dict[str, Any]) -> None:
    cfg = parse_or_message({"routing": table})
    if isinstance(cfg, str):
        assert cfg.startswith(f"{SOURCE}: ")
        return
    assert cfg.home in KNOWN
    assert cfg.clusters[0] == cfg.home
    assert set(cfg.clusters) == set(KNOWN)
    for rule in cfg.rules:
        assert rule.clusters
        assert set(rule.clusters) <= set(KNOWN)
    for partition in (None, "cpu", "a"):
        assert set(cfg.clusters_for(partition, "normal")) <= set(KNOWN)


_dirs = st.lists(st.sampled_from(["home", "u", "data", "x", ".", "a b"]), max_size=4).map(
    lambda parts: "/" + "/".join(parts)
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(_dirs, st.one_of(st.just(""), _dirs)), max_size=4),
    _dirs,
)
def test_fs_maps_accepted_have_one_place_per_directory(
    entries: list[tuple[str, str]], path: str
) -> None:
    fs = [{"submit": s, "path": p} for s, p in entries]
    cfg = parse_or_message({"routing": {"cluster": {"k8s": {"fs": fs}}}})
    if isinstance(cfg, str):
        assert "fs #" in cfg
        return

    def norm(d: str) -> str:
        return posixpath.normpath(d).replace("//", "/")

    where = norm(path)
    covering = [
        (norm(s), norm(p) if p else "")
        for s, p in entries
        if norm(s) in ("/", where) or where.startswith(norm(s) + "/")
    ]
    got = cfg.translate_dir(path, "k8s")
    assert len(covering) <= 1
    if not covering:
        assert got is None
    else:
        submit, target = covering[0]
        assert got is not None
        assert got.startswith(target or submit)
