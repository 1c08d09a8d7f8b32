"""sprio's formats as src/sprio builds them (22.05): default (only weighted factors), -l,
-n (normalised), -w (weights), -j/-u filters, -S sort; and its refusal under
priority/basic, word for word as the real sprio of testenv/slurm prints it."""

from __future__ import annotations

import pytest

from gateway.policy.priority import Factors, PriorityConfig
from gateway.policy.sprio import SprioError, SprioRow, parse_sprio, render_sprio
from tests.support.policy_env import DATA

CFG = PriorityConfig(
    type="priority/multifactor", weight_age=10, weight_fairshare=100, weight_qos=1000
)


def _row(job_id: int, prio: int, age: float, fs: float, qos: float, user: str) -> SprioRow:
    f = Factors(job_id, prio, 0, age, 0.0, fs, 0.0, 0.0, qos, 0, {})
    return SprioRow(f, "debug", user, 1000)


ROWS = [_row(12, 1105, 5, 100, 1000, "alice"), _row(7, 105, 5, 100, 0, "bob")]


def _line(*cells: tuple[str, int, bool]) -> str:
    return " ".join(c.rjust(w) if right else c.ljust(w)[:w] for c, w, right in cells) + "\n"


def test_default_format_shows_the_weighted_factors_that_have_a_weight() -> None:
    """ "%.15i %9r %.10Y %.10S" then %.10A/%.10F/%.10Q for the weights that are set;
    sorted by job id (sprio's DEFAULT_SORT "i")."""
    out = render_sprio(ROWS, parse_sprio([]), CFG)
    head = _line(("JOBID", 15, True), ("PARTITION", 9, False), ("PRIORITY", 10, True),
                 ("SITE", 10, True), ("AGE", 10, True), ("FAIRSHARE", 10, True),
                 ("QOS", 10, True))  # fmt: skip
    row7 = _line(("7", 15, True), ("debug", 9, False), ("105", 10, True), ("0", 10, True),
                 ("5", 10, True), ("100", 10, True), ("0", 10, True))  # fmt: skip
    row12 = _line(("12", 15, True), ("debug", 9, False), ("1105", 10, True), ("0", 10, True),
                  ("5", 10, True), ("100", 10, True), ("1000", 10, True))  # fmt: skip
    assert out == head + row7 + row12


def test_weights_line() -> None:
    out = render_sprio(ROWS, parse_sprio(["-w"]), CFG)
    assert out.splitlines()[1] == _line(
        ("Weights", 15, True), ("", 9, False), ("", 10, True), ("1", 10, True),
        ("10", 10, True), ("100", 10, True), ("1000", 10, True),
    ).rstrip("\n")  # fmt: skip


def test_long_format_has_every_factor() -> None:
    out = render_sprio(ROWS[:1], parse_sprio(["-l"]), CFG).splitlines()
    assert out[0].split() == [
        "JOBID", "PARTITION", "USER", "PRIORITY", "SITE", "AGE", "ASSOC", "FAIRSHARE",
        "JOBSIZE", "PARTITION", "QOS", "NICE", "TRES",
    ]  # fmt: skip
    assert out[1].split() == ["12", "debug", "alice", "1105", "0", "5", "0", "100", "0", "0",
                              "1000", "0"]  # fmt: skip


def test_normalized_factors_are_divided_by_their_weight() -> None:
    """-n: "%.15i %9r %10y %10a %10f %10q", factors as %.7lf, priority / (2^32-1) as
    %16.14f cut to the column."""
    out = render_sprio(ROWS[:1], parse_sprio(["-n"]), CFG).splitlines()
    assert out[1] == ("             12 debug     0.00000025 0.5000000  1.0000000  1.0000000 ")


def test_filters_sort_and_missing_jobs() -> None:
    assert render_sprio(ROWS, parse_sprio(["-j", "99"]), CFG) == (
        "Unable to find jobs matching user/id(s) specified\n"
    )
    only = render_sprio(ROWS, parse_sprio(["-h", "-u", "bob"]), CFG)
    assert [line.split()[0] for line in only.splitlines()] == ["7"]
    by_prio = render_sprio(ROWS, parse_sprio(["-h", "-S", "-y"]), CFG)
    assert [line.split()[0] for line in by_prio.splitlines()] == ["12", "7"]


def test_bad_options_are_refused() -> None:
    for argv, message in (
        (["-x"], "invalid option -- 'x'"),
        (["-j", "abc"], "Invalid job id: abc"),
        (["-S", "z"], "Invalid sort specification: z"),
        (["-o", "%Z"], None),
    ):
        if message is None:
            with pytest.raises(SprioError, match="Invalid job format specification: Z"):
                render_sprio(ROWS, parse_sprio(argv), CFG)
            continue
        with pytest.raises(SprioError, match=message):
            parse_sprio(argv)


def test_priority_basic_refusal_is_the_real_one() -> None:
    """The real sprio on the priority/basic test cluster (tests/data/slurm_policy)."""
    from gateway.policy.service import PolicyService

    recorded = (DATA / "sprio_basic.txt").read_text().split("\n", 1)[1].rsplit("[rc=", 1)[0]
    svc = PolicyService.__new__(PolicyService)
    svc.cfg = PriorityConfig()
    answer = svc.sprio([])
    assert (answer.stderr, answer.rc) == (recorded, 1)
