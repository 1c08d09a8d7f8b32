"""gateway.compat.clusters against what real Slurm 22.05 printed for its `-M/--clusters`
forms (tests/data/multicluster/slurm-22.05.json, recorded from two real clusters by
tests/differential/multicluster_record.py)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

import pytest

from gateway.compat.clusters import (
    ClusterSelectError,
    blocks,
    choose_clusters,
    cluster_of,
    on_clusters,
    split_state,
    submitted_on,
)
from gateway.model.cluster import ClusterState, Node, Partition
from gateway.model.state import JobState
from tests.differential.multicluster_record import DATA
from tests.support.builders import make_job

pytestmark = pytest.mark.federation

KNOWN = ("caldera", "burst")  # the recording's clusters, as the site lists them
RECORDED: dict[str, dict[str, Any]] = json.loads(DATA.read_text())["users"]


def _cases(pred: Any) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (user, name, case)
        for user, cases in RECORDED.items()
        for name, case in cases.items()
        if not name.startswith("_") and pred(case)
    ]


def _m_value(argv: list[str]) -> str:
    for i, arg in enumerate(argv):
        if arg == "-M":
            return argv[i + 1]
        if arg.startswith(("--clusters=", "--cluster=")):
            return arg.split("=", 1)[1]
    raise AssertionError(f"no -M in {argv}")


REFUSED = _cases(lambda c: c["rc"] == 1 and "known by database" in c["stderr"])
WARNED = _cases(lambda c: c["rc"] == 0 and "known by database" in c["stderr"])


@pytest.mark.parametrize(("user", "name", "case"), REFUSED, ids=lambda v: str(v)[:40])
def test_no_known_cluster_is_refused_in_slurms_words(
    user: str, name: str, case: dict[str, Any]
) -> None:
    with pytest.raises(ClusterSelectError) as err:
        choose_clusters(case["argv"][0], _m_value(case["argv"]), KNOWN)
    assert err.value.stderr == case["stderr"]
    assert err.value.exit_code == case["rc"]


@pytest.mark.parametrize(("user", "name", "case"), WARNED, ids=lambda v: str(v)[:40])
def test_unknown_names_beside_known_ones_are_warnings(
    user: str, name: str, case: dict[str, Any]
) -> None:
    choice = choose_clusters(case["argv"][0], _m_value(case["argv"]), KNOWN)
    warnings = "".join(line for line in case["stderr"].splitlines(True) if "known by" in line)
    assert choice.stderr == warnings
    assert choice.names == ("burst",)


def test_all_and_case_and_order_as_the_database_answers() -> None:
    assert choose_clusters("squeue", "all", KNOWN).names == ("burst", "caldera")
    assert choose_clusters("squeue", "ALL", KNOWN).names == ("burst", "caldera")
    assert choose_clusters("squeue", "caldera,burst", KNOWN).names == ("burst", "caldera")
    assert choose_clusters("squeue", "BURST,burst", KNOWN) == choose_clusters(
        "squeue", "burst", KNOWN
    )
    rec = RECORDED["root"]["sinfo_M_upper"]
    assert rec["stdout"].startswith("CLUSTER: burst\n")  # real Slurm: BURST is burst


@pytest.mark.parametrize("user", sorted(RECORDED))
@pytest.mark.parametrize(
    "name",
    [
        "sbatch_M_burst",
        "sbatch_M_burst_parsable",
        "sbatch_M_two_parsable",
        "sbatch_M_all",
        "sbatch_M_home_burst",
    ],
)
def test_sbatch_answer_names_the_cluster(user: str, name: str) -> None:
    stdout = RECORDED[user][name]["stdout"]
    m = re.fullmatch(r"(?:Submitted batch job (\d+) on cluster (\S+)|(\d+);(\S+))\n", stdout)
    assert m is not None
    job, cluster = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
    plain = f"Submitted batch job {job}\n" if m.group(1) else f"{job}\n"
    assert submitted_on(plain, int(job), cluster) == stdout
    assert submitted_on("", int(job), cluster) == ""  # --quiet


def _split_blocks(text: str) -> list[tuple[str, str]]:
    out = []
    for chunk in text.split("\n\nCLUSTER: "):
        head, _, body = chunk.removeprefix("CLUSTER: ").partition("\n")
        out.append((head, body if body.endswith("\n") or not body else body + "\n"))
    return out


@pytest.mark.parametrize("user", sorted(RECORDED))
@pytest.mark.parametrize(
    "name", ["squeue_M_all", "squeue_M_all_o", "squeue_M_two_reversed", "sinfo_M_all_real"]
)
def test_cluster_blocks_are_laid_out_as_slurm_does(user: str, name: str) -> None:
    text = RECORDED[user][name]["stdout"]
    parts = _split_blocks(text)
    assert [p[0] for p in parts] == ["burst", "caldera"]
    assert blocks(parts, noheader=False) == text
    assert blocks(parts, noheader=True) == "".join(body for _, body in parts)


def _node(name: str) -> Node:
    return Node(name=name, cpus=2, memory_mb=2000)


def test_split_state_gives_each_cluster_its_nodes_and_partitions() -> None:
    site = ClusterState(
        name="x",
        nodes=tuple(_node(n) for n in ("node01", "node02", "bnode01", "bnode02")),
        partitions=(
            Partition(name="real", nodes=("node01", "node02")),
            Partition(name="real", nodes=("bnode01", "bnode02")),
            Partition(name="gpu", nodes=("bnode02",)),
            Partition(name="empty", nodes=()),
        ),
    )
    owner = {"node01": "caldera", "node02": "caldera", "bnode01": "burst", "bnode02": "burst"}
    views = split_state(site, owner, ("burst", "caldera"))
    for cluster, view in views.items():
        mine = {n for n, c in owner.items() if c == cluster}
        assert {n.name for n in view.nodes} == mine
        assert all(set(p.nodes) <= mine and p.nodes for p in view.partitions)
        assert view.name == cluster
    assert [p.name for p in views["burst"].partitions] == ["real", "gpu"]
    assert [p.name for p in views["caldera"].partitions] == ["real"]


def test_a_waiting_job_is_listed_where_it_is_pinned_or_routed() -> None:
    base = make_job(7).spec(clusters=("burst",)).held().build()
    base = replace(base, cluster="site")
    assert cluster_of(base) == "burst"
    assert cluster_of(replace(base, routed_to="caldera")) == "caldera"
    running = replace(base, state=JobState.RUNNING, cluster="caldera")
    assert cluster_of(running) == "caldera"  # where it runs, whatever it asked
    every = replace(base, spec=replace(base.spec, clusters=("all",)))
    assert cluster_of(every) == "site"
    assert on_clusters([base, running], ["BURST"]) == [base]
