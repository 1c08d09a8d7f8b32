"""Fair share against the worked examples of Slurm 22.05's own documentation.

Vectors: doc/html/classic_fair_share.shtml ("Example", Figure 3: accounts A 40 / D 60 shares,
B 30 and C 10 under A, E 25 and F 35 under D; user 1 in B, users 2 and 3 (1 share each) in
C, user 4 in E, user 5 in F; actual usage user 1 0.2, user 2 0.25, user 4 0.25), and
doc/html/fair_tree.shtml (Level FS = S/U, users ranked by a depth-first walk of siblings
sorted by Level FS, FairShare = rank / user associations, 1.0 for the top user, Level FS
infinite without usage; the Acct1/Acct12/Acct16 example of "Overview for End Users").
"""

from __future__ import annotations

import math

import pytest

from gateway.policy.fairshare import (
    ShareNode,
    classic,
    decay_factor,
    decayed,
    fair_tree,
    fs_factor,
)


def _figure3() -> tuple[ShareNode, dict[str, ShareNode]]:
    """classic_fair_share.shtml, Figure 3 (usage in units of the machine's total)."""
    u = {
        "user1": ShareNode("B", "user1", 1, 0.2),
        "user2": ShareNode("C", "user2", 1, 0.25),
        "user3": ShareNode("C", "user3", 1, 0.0),
        "user4": ShareNode("E", "user4", 1, 0.25),
        "user5": ShareNode("F", "user5", 1, 0.0),
    }
    b = ShareNode("B", None, 30, children=[u["user1"]])
    c = ShareNode("C", None, 10, children=[u["user2"], u["user3"]])
    e = ShareNode("E", None, 25, children=[u["user4"]])
    f = ShareNode("F", None, 35, children=[u["user5"]])
    a = ShareNode("A", None, 40, children=[b, c])
    d = ShareNode("D", None, 60, children=[e, f])
    # The figure's usages are fractions of the machine and sum to 0.7: the other 0.3 is
    # charged at root (usage_norm divides by root's usage, which is the machine's total)
    root = ShareNode("root", None, 1, 0.3, children=[a, d])
    return root, {**u, "A": a, "B": b, "C": c, "D": d, "E": e, "F": f}


def test_classic_normalized_shares_match_the_documented_example() -> None:
    """classic_fair_share.shtml: "User 1 normalized share: 0.3 ... User 2: 0.05, User 3:
    0.05, User 4: 0.25, User 5: 0.35"."""
    root, n = _figure3()
    classic(root)
    expected = {"user1": 0.3, "user2": 0.05, "user3": 0.05, "user4": 0.25, "user5": 0.35}
    for name, value in expected.items():
        assert n[name].shares_norm == pytest.approx(value, abs=1e-12)


def test_classic_effective_usage_matches_the_documented_example() -> None:
    """classic_fair_share.shtml: "Account A's effective usage is therefore equal to .45 ...
    Account B effective usage: 0.3875, C 0.3, E 0.25, F 0.1458; User 1 0.3875, User 2
    0.275, User 3 0.15, User 4 0.25, User 5 0.1458"."""
    root, n = _figure3()
    classic(root)
    expected = {
        "A": 0.45, "D": 0.25, "B": 0.3875, "C": 0.3, "E": 0.25, "F": 0.145833,
        "user1": 0.3875, "user2": 0.275, "user3": 0.15, "user4": 0.25, "user5": 0.145833,
    }  # fmt: skip
    for name, value in expected.items():
        assert n[name].usage_efctv == pytest.approx(value, abs=1e-6), name


def test_classic_fair_share_factors_match_the_documented_example() -> None:
    """classic_fair_share.shtml: "User 1 fair-share factor: 2**(-.3875 / .3) = 0.408479,
    User 2 0.022097, User 3 0.125000, User 4 0.500000, User 5 0.749154"."""
    root, n = _figure3()
    classic(root)
    expected = {
        "user1": 0.408479, "user2": 0.022097, "user3": 0.125, "user4": 0.5, "user5": 0.749154,
    }  # fmt: skip
    for name, value in expected.items():
        assert f"{n[name].fs_factor:.6f}" == f"{value:.6f}", name


def test_dampening_divides_the_exponent() -> None:
    """slurm.conf FairShareDampeningFactor: F = 2**(-U/S/d); a user exactly at its share
    (U = S) gets 0.5, and with d = 2 gets 2**-0.5."""
    assert fs_factor(0.25, 0.25) == 0.5
    assert fs_factor(0.25, 0.25, dampening=2) == pytest.approx(2**-0.5)
    assert fs_factor(0.1, 0.0) == 0.0


def test_fair_tree_ranks_users_by_level_fs_of_their_ancestors() -> None:
    """fair_tree.shtml on the Figure 3 tree: at root D (S .6 / U .25 = 2.4) beats A
    (.4/.45); under D, F (no usage: infinite) beats E; under A, B (.75/.444) beats C
    (.25/.556); in C user 3 (no usage) beats user 2. Ranks 5..1 over 5 user associations."""
    root, n = _figure3()
    fair_tree(root)
    assert n["D"].level_fs == pytest.approx(2.4)
    assert n["A"].level_fs == pytest.approx(0.4 / 0.45)
    assert math.isinf(n["F"].level_fs)
    assert n["B"].level_fs == pytest.approx(0.75 / (0.2 / 0.45))
    factors = {k: n[k].fs_factor for k in ("user1", "user2", "user3", "user4", "user5")}
    assert factors == {"user5": 1.0, "user4": 0.8, "user1": 0.6, "user3": 0.4, "user2": 0.2}


def test_fair_tree_first_common_ancestor_decides() -> None:
    """fair_tree.shtml, "Overview for End Users": root => Acct1 => Acct12 => UserA and
    root => Acct1 => Acct16 => UserB; if Acct16 has the higher Level FS, UserB gets the
    higher FairShare whatever the users' own usage."""
    user_a = ShareNode("Acct12", "UserA", 1, 0.0)  # no usage of its own
    user_c = ShareNode("Acct12", "UserC", 1, 100.0)
    user_b = ShareNode("Acct16", "UserB", 1, 30.0)
    a12 = ShareNode("Acct12", None, 1, children=[user_a, user_c])
    a16 = ShareNode("Acct16", None, 1, children=[user_b])
    root = ShareNode("root", None, 1, children=[ShareNode("Acct1", None, 1, children=[a12, a16])])
    fair_tree(root)
    assert a16.level_fs == pytest.approx(0.5 / (30 / 130))
    assert a12.level_fs == pytest.approx(0.5 / (100 / 130))
    assert math.isinf(user_a.level_fs)
    assert (user_b.fs_factor, user_a.fs_factor, user_c.fs_factor) == (1.0, 2 / 3, 1 / 3)


def test_fair_tree_ties_share_a_rank() -> None:
    """fair_tree.shtml "Ties": sibling users with the same Level FS receive the same rank."""
    users = [ShareNode("acct", f"u{i}", 1, 0.0) for i in range(3)]
    root = ShareNode("root", None, 1, children=[ShareNode("acct", None, 1, children=users)])
    fair_tree(root)
    assert [u.fs_factor for u in users] == [1.0, 1.0, 1.0]


def test_fair_tree_user_without_shares_ranks_last() -> None:
    """fair_tree.c `_calc_assoc_fs`: S = 0 gives the lowest Level FS (0)."""
    zero = ShareNode("acct", "zero", 0, 0.0)
    busy = ShareNode("acct", "busy", 1, 1000.0)
    root = ShareNode("root", None, 1, children=[ShareNode("acct", None, 1, children=[zero, busy])])
    fair_tree(root)
    assert zero.level_fs == 0.0
    assert busy.fs_factor == 1.0
    assert zero.fs_factor == 0.5


def test_decay_halves_usage_after_one_half_life() -> None:
    """classic_fair_share.shtml: "a user's UH usage will decay to half its original value
    after a time period of PriorityDecayHalfLife seconds" (Slurm's factor 1 - 0.693/hl,
    applied per second: within 0.01 % of one half for a 7-day half-life)."""
    hl = 7 * 86400
    assert decay_factor(hl) == 1 - 0.693 / hl
    assert decayed(1000.0, hl, hl) == 1000.0 * (1 - 0.693 / hl) ** hl
    assert decayed(1000.0, hl, hl) == pytest.approx(500.0, rel=2e-4)  # e^-0.693 = 0.50007
    assert decayed(1000.0, 2 * hl, hl) == pytest.approx(250.0, rel=3e-4)
    assert decayed(1000.0, 0, hl) == 1000.0
    assert decayed(1000.0, hl, 0) == 1000.0  # PriorityDecayHalfLife=0: no decay
