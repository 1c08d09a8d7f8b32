"""The dashboard's decision log, routing history, fair-share tree and topology map: the
decisions are the router's own (a gateway over the cluster doubles of test_router.py),
the tree is sshare's, and the page's script only ever writes text."""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from gateway.control.submit import Caller
from gateway.dashboard.decisions import decision_log
from gateway.dashboard.detail import job_detail
from gateway.dashboard.maps import NO_SWITCH, share_tree, topology_map
from gateway.dashboard.views import NodeUse
from gateway.model.cluster import Node, NodeState
from gateway.model.topology import Switch, Topology
from gateway.policy.service import policy_of
from gateway.policy.shares import compute_shares
from tests.support.builders import make_cluster
from tests.unit.test_router import Placed, Queues, _blocker, _cycles, _gateway, _pending

STATIC = Path(__file__).resolve().parents[2] / "gateway" / "dashboard" / "static"


def _caller(uid: int, operator: bool = False) -> Caller:
    return Caller(uid, uid, f"user{uid}", "g", operator)


def test_the_decision_log_shows_the_routers_decisions_to_whom_it_may(tmp_path: Path) -> None:
    home, far = Placed("home"), Queues("far", predicted=time.time())

    async def main() -> tuple[dict[str, Any], ...]:
        gw = _gateway(tmp_path, {"home": home, "far": far}, {"home": "home", "margin": 60})
        mine = replace(_pending(1), uid=1000)
        theirs = replace(_pending(2), uid=2000)
        await gw.commit([_blocker(9, "home", 60), mine, theirs], "submit")
        await _cycles(gw)
        op = await decision_log(gw, _caller(0, operator=True))
        own = await decision_log(gw, _caller(1000))
        other = await decision_log(gw, _caller(3000))
        detail = await job_detail(gw, _caller(1000), gw.jobs[1])
        gw.committer.close()
        return op, own, other, detail

    op, own, other, detail = asyncio.run(main())
    assert {d["job_id"] for d in op["decisions"]} == {1, 2}
    assert {d["job_id"] for d in own["decisions"]} == {1}
    assert other["decisions"] == []
    first = own["decisions"][0]
    assert first["kind"] == "route"
    assert first["to"] == "far"
    assert {c["cluster"] for c in first["compared"]} == {"home", "far"}
    assert first["why"].startswith("burst: far")
    times = [d["time"] for d in op["decisions"]]
    assert times == sorted(times, reverse=True)
    # the job page's routing history is the same decision
    assert [(d["kind"], d["to"], d["why"]) for d in detail["routing"]] == [
        (first["kind"], first["to"], first["why"])
    ]
    assert detail["job"]["routed_to"] == "far"


def test_the_fair_share_tree_is_sshares(tmp_path: Path) -> None:
    async def main() -> tuple[list[dict[str, Any]], str]:
        gw = _gateway(tmp_path, {"home": Placed("home")}, {"home": "home"})
        svc = policy_of(gw)
        for argv in (
            ["add", "account", "phys", "fairshare=3"],
            ["add", "account", "chem", "parent=phys"],
            ["add", "user", "alice", "account=chem"],
            ["add", "user", "bob", "account=phys", "fairshare=5"],
        ):
            assert (await svc.sacctmgr(argv, True, True)).rc == 0
        _, rows = compute_shares(svc.state, svc.usage, svc.cfg)
        tree = share_tree(rows, svc.cfg, svc.state.cluster)
        text = svc.sshare(["-a", "-P", "-n"], "root").stdout
        gw.committer.close()
        return tree, text

    tree, text = asyncio.run(main())
    lines = text.splitlines()
    assert len(tree) == len(lines) == 6
    for row, line in zip(tree, lines, strict=True):
        account, user, raw, norm, usage, eff, fs = line.split("|")
        assert account.strip() == (row["parent"] if row["user"] else row["account"])
        assert (user or None) == row["user"]
        assert [raw, norm, usage, eff, fs] == [
            row["shares"],
            row["norm_shares"],
            row["raw_usage"],
            row["effectv_usage"],
            row["fairshare"],
        ]
    # every association sits one level below the account it belongs to
    depth = {r["account"]: r["depth"] for r in tree if r["user"] is None}
    for r in tree:
        if r["parent"]:
            assert r["depth"] == depth[r["parent"]] + 1
    assert {r["user"] for r in tree if r["account"] == "chem"} == {None, "alice"}


def test_the_topology_map_groups_nodes_by_leaf_under_their_spine() -> None:
    base = make_cluster(nodes=4, cpus=8, gpus=2, name="east")
    nodes = tuple(
        replace(n, switch=("leaf1" if i < 2 else "leaf2" if i < 3 else None))
        for i, n in enumerate(base.nodes)
    )
    cluster = replace(base, nodes=nodes)
    fabric = Topology.tree(
        [
            Switch("leaf1", nodes=("n01", "n02")),
            Switch("leaf2", nodes=("n03",)),
            Switch("spine", switches=("leaf1", "leaf2")),
        ]
    )
    use = {"n01": NodeUse(NodeState.MIXED, 4, 0, 1, 1), "n03": NodeUse(NodeState.DOWN, 0, 0, 0, 0)}
    view = topology_map([cluster], use, fabric)
    switches = {s["name"]: s for s in view[0]["switches"]}
    assert set(switches) == {"leaf1", "leaf2", NO_SWITCH}
    assert switches["leaf1"]["above"] == ["spine"]
    assert switches[NO_SWITCH]["above"] == []
    placed = [n["name"] for s in view[0]["switches"] for n in s["nodes"]]
    assert sorted(placed) == [n.name for n in nodes]
    n01 = switches["leaf1"]["nodes"][0]
    assert n01["state"] == "MIXED"
    assert n01["share"] == round((4 + 1) / (8 + 2), 4)
    assert switches["leaf2"]["nodes"][0]["state"] == "DOWN"
    total = sum(n.cpus + n.gpu_count() for n in nodes[:2])
    assert switches["leaf1"]["share"] == round(5 / total, 4)


def test_a_node_without_agents_topology_keeps_its_switch_alone() -> None:
    cluster = make_cluster(nodes=1, name="solo")
    alone = replace(cluster, nodes=(Node(name="x", cpus=1, memory_mb=1, switch="s9"),))
    view = topology_map([alone], {}, None)
    assert view[0]["switches"] == [
        {
            "name": "s9",
            "above": [],
            "share": 0.0,
            "nodes": [
                {
                    "name": "x",
                    "state": "IDLE",
                    "cpus": 1,
                    "alloc_cpus": 0,
                    "gpus": 0,
                    "alloc_gpus": 0,
                    "nics": 0,
                    "jobs": 0,
                    "share": 0.0,
                }
            ],
        }
    ]


def test_the_page_script_writes_text_only() -> None:
    """Every value reaches the page through textContent, Option() or setAttribute on
    attributes that are not event handlers: a job named `<img onerror=...>` stays text."""
    script = re.sub(r"^\s*//.*$", "", (STATIC / "app.js").read_text(), flags=re.M)
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in script, sink
    assert not re.search(r"setAttribute\(\s*[\"']on", script)
    html = (STATIC / "index.html").read_text()
    assert "<script>" not in html  # the CSP allows only the script file
