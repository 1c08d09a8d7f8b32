"""sshare against the real sshare 22.05.8 of testenv/slurm (priority/basic there; recorded
in tests/data/slurm_policy): same association tree, same bytes; and sshare's fair-share
columns under priority/multifactor on the classic_fair_share.shtml example."""

from __future__ import annotations

import shlex

import pytest

from gateway.policy.priority import PriorityConfig
from gateway.policy.shares import SshareError, compute_shares, parse_sshare, render_sshare
from tests.support.policy_env import DATA, seeded

_TRES = [
    "cpu",
    "mem",
    "energy",
    "node",
    "billing",
    "fs/disk",
    "vmem",
    "pages",
    "gres/gpu",
    "gres/gpu:a100",
    "gres/gpu:v100",
    "license/cscratch1",
    "license/scratch",
]  # fmt: skip  (the test cluster's AccountingStorageTRES)


@pytest.mark.parametrize(
    ("name", "user"), [("sshare_root.txt", "root"), ("sshare_tester.txt", "tester")]
)
def test_sshare_matches_real_sshare_under_priority_basic(name: str, user: str) -> None:
    text = (DATA / name).read_text()
    state = seeded()
    _, rows = compute_shares(state, {}, PriorityConfig())
    chunks = text.split("$ sshare")[1:]
    assert chunks
    for chunk in chunks:
        head, _, rest = chunk.partition("\n")
        body = rest.rsplit("[rc=", 1)[0]
        opts = parse_sshare(shlex.split(head))
        assert render_sshare(rows, opts, PriorityConfig(), "caldera", user, _TRES) == body, head


def test_sshare_rejects_what_sshare_rejects() -> None:
    with pytest.raises(SshareError, match="invalid option -- 'x'"):
        parse_sshare(["-x"])
    with pytest.raises(SshareError, match='Invalid field requested: "Bogus"'):
        parse_sshare(["-o", "Account,Bogus"])
