"""Caldera's sacctmgr against transcripts of the real sacctmgr 22.05.8 (testenv/slurm,
recorded in tests/data/slurm_policy, see its README): the same invocations on the same
association tree print the same bytes and exit with the same status; the two deliberate
differences (nonsense values that sacctmgr half-applies) are refused instead."""

from __future__ import annotations

import pytest

from gateway.policy.model import initial_state
from tests.support.policy_env import run, seeded, transcript

# sacctmgr accepts MaxJobsPerUser=-5 as NONE and adds a QOS whose UsageFactor=abc it could
# not read; Caldera refuses both (nothing half-applied). The withassoc listing is in
# slurmdbd's SQL row order, which Caldera does not reproduce (it lists the tree's order).
_REFUSED = {
    ("-i", "add", "qos", "zpol_bad", "MaxJobsPerUser=-5"): (
        "sacctmgr: error: Invalid value for MaxJobsPerUser (-5): only -1 (clear) may be negative\n"
    ),
    ("-i", "add", "qos", "zpol_t2", "UsageFactor=abc"): (
        "sacctmgr: error: Invalid value for UsageFactor (abc)\n"
    ),
}
_BUSY = " Database is busy or waiting for lock from other user.\n"  # slurmdbd's, not ours
_NOT_COMPARED = {("show", "user", "root", "withassoc", "format=user,account,share")}


@pytest.mark.parametrize("name", ["sacctmgr_changes.txt", "sacctmgr_errors.txt"])
def test_transcript_matches_real_sacctmgr(name: str) -> None:
    state = seeded()
    for block in transcript(name):
        key = tuple(block.argv)
        state, text, rc = run(state, block.argv)
        if key in _NOT_COMPARED:
            continue
        if key in _REFUSED:
            assert (text, rc) == (_REFUSED[key], 1), block.argv
            continue
        expected = block.text.replace(
            " Database is busy or waiting for lock from other user.\n", ""
        )
        assert text == expected, block.argv
        assert rc == block.rc, block.argv


def test_listings_match_real_sacctmgr() -> None:
    state = seeded()
    for block in transcript("sacctmgr_show.txt"):
        assert run(state, block.argv) == (state, block.text, 0), block.argv


def test_non_operators_are_refused_and_nothing_changes() -> None:
    """As slurmdbd answers a user without AdminLevel (the messages of the real sacctmgr
    run as tester)."""
    state = initial_state("caldera")
    after, text, rc = run(state, ["-i", "add", "account", "x"], operator=False)
    assert rc == 1
    assert after is state
    assert text == (
        " Problem adding accounts: Access/permission denied\n Adding Account(s)\n  x\n"
        " Settings\n  Description     = Account Name\n  Organization    = Parent/Account Name\n"
        " Associations\n  A = x          C = caldera   \n"
    )
    after, text, rc = run(state, ["-i", "modify", "qos", "normal", "set", "priority=1"], False)
    assert (rc, after) == (1, state)
    assert text == (
        "sacctmgr: error: Your user doesn't have privilege to perform this action\n"
        " Error with request: Access/permission denied\n"
    )
    # listing is for everyone
    assert run(state, ["-nP", "show", "qos", "format=name"], operator=False)[1] == "normal\n"


def test_bad_input_names_the_setting_and_changes_nothing() -> None:
    state = seeded()
    cases = {
        ("-i", "add", "qos", "q1", "GrpTRES=cpu=x"): "Invalid value for TRES cpu (x)",
        ("-i", "add", "qos", "q1", "Priority=10", "MaxWall=soon"): "Bad MaxWall time format",
        ("-i", "add", "qos", "q1", "Preempt=q1"): "bad qos 'q1'",
        ("-i", "add", "account", "a1", "Fairshare=-3"): "only -1 (clear) may be negative",
        ("-i", "add", "user", "u1", "Account=nope"): "This account 'nope' doesn't exist",
        ("-i", "modify", "account", "caldera", "set", "parent=nope"): "Parent Account nope",
        ("-i", "modify", "qos", "normal", "set", "Flags=Bogus"): "Unknown QOS flag 'Bogus'",
        ("-i", "modify", "qos", "normal", "set", "PreemptMode=maybe"): "Unknown preempt mode",
        ("show", "qos", "format=name,nonsense"): "Unknown field 'nonsense'",
        ("-x", "show", "qos"): "invalid option -- 'x'",
        ("frobnicate",): "invalid keyword: frobnicate",
    }
    for argv, message in cases.items():
        after, text, rc = run(state, list(argv))
        assert rc == 1, argv
        assert message in text, (argv, text)
        assert after is state, argv


def test_a_qos_cannot_preempt_itself_and_a_deleted_qos_leaves_every_list() -> None:
    state = seeded()
    state, text, rc = run(state, ["-i", "add", "qos", "low"])
    state, text, rc = run(state, ["-i", "add", "qos", "top", "Preempt=low"])
    assert rc == 0
    after, text, rc = run(state, ["-i", "modify", "qos", "top", "set", "Preempt+=top"])
    assert (rc, after) == (1, state)
    assert "QOS top can not preempt itself" in text
    state, _, rc = run(state, ["-i", "modify", "user", "tester", "set", "QOS+=low"])
    assert rc == 0
    state, text, rc = run(state, ["-i", "delete", "qos", "low"])
    assert text == " Deleting QOS(s)...\n  low\n"
    assert state.qos["top"].preempt == ()
    assert all(a.qos is None or "low" not in a.qos for a in state.assocs)


def test_max_limits_are_inherited_down_the_tree_grp_limits_are_not() -> None:
    """As slurmdbd stores them: `modify account set MaxJobs=3 GrpTRES=cpu=4` lists the
    account and its users as modified; the users show MaxJobs 3 and no GrpTRES."""
    state = seeded()
    state, text, _ = run(state, ["-i", "add", "account", "lab", "parent=caldera"])
    state, text, _ = run(state, ["-i", "add", "user", "tester", "account=lab"])
    state, text, _ = run(
        state, ["-i", "modify", "account", "lab", "set", "MaxJobs=3", "GrpTRES=cpu=4"]
    )
    assert text == (
        " Modified account associations...\n"
        "  C = caldera    A = lab of caldera\n"
        "  C = caldera    A = lab                  U = tester   \n"
    )
    listing = run(state, ["-nP", "show", "assoc", "where", "account=lab",
                          "format=user,maxjobs,grptres"])[1]  # fmt: skip
    assert listing == "|3|cpu=4\ntester|3|\n"
