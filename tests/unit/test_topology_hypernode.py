"""Volcano HyperNode objects written from a topology (the newest Volcano API served:
volcano.sh/apis v1.13.0 topology/v1alpha1)."""

from __future__ import annotations

from gateway.model.topology import Block, Switch, Topology
from gateway.topology.hypernode import hypernode_name, to_hypernodes, validate_hypernode
from gateway.topology.slurm_conf import read_topology_conf
from tests.support.shared_data import MICRO_TOPOLOGY

MICRO = MICRO_TOPOLOGY


def test_tree_becomes_tier1_node_members_and_tier2_hypernode_members() -> None:
    topo = Topology.tree(
        [
            Switch("leaf-0", ("kwok-node-01", "kwok-node-02")),
            Switch("leaf-1", ("kwok-node-03",)),
            Switch("spine-0", (), ("leaf-0", "leaf-1")),
        ]
    )
    objs = to_hypernodes(topo, labels={"caldera.io/cluster": "k"})
    assert [(o["metadata"]["name"], o["spec"]["tier"]) for o in objs] == [
        ("leaf-0", 1),
        ("leaf-1", 1),
        ("spine-0", 2),
    ]
    assert objs[0]["spec"]["members"] == [
        {"type": "Node", "selector": {"exactMatch": {"name": "kwok-node-01"}}},
        {"type": "Node", "selector": {"exactMatch": {"name": "kwok-node-02"}}},
    ]
    assert objs[2]["spec"]["members"][1] == {
        "type": "HyperNode",
        "selector": {"exactMatch": {"name": "leaf-1"}},
    }
    assert objs[0]["apiVersion"] == "topology.volcano.sh/v1alpha1"
    assert objs[0]["metadata"]["labels"]["caldera.io/cluster"] == "k"
    assert all(validate_hypernode(o) == [] for o in objs)


def test_slurm_switch_names_become_valid_distinct_names() -> None:
    objs = to_hypernodes(read_topology_conf(MICRO))
    names = [o["metadata"]["name"] for o in objs]
    assert len(set(names)) == 4
    assert all(n.islower() for n in names)
    assert hypernode_name("IBN") != hypernode_name("ibn") == "ibn"
    assert [o["metadata"]["annotations"]["topology.caldera.io/switch"] for o in objs] == [
        "IBG",
        "IBM",
        "IBN",
        "TOP",
    ]
    assert all(validate_hypernode(o) == [] for o in objs)


def test_node_names_kubernetes_cannot_hold_use_an_anchored_regex() -> None:
    objs = to_hypernodes(Topology.tree([Switch("l", ("Node_A",))]))
    assert objs[0]["spec"]["members"][0]["selector"] == {"regexMatch": {"pattern": "^Node_A$"}}


def test_multi_parent_leaves_go_under_their_first_parent_and_empty_switches_are_left_out() -> None:
    topo = Topology.tree(
        [
            Switch("l1", ("a",)),
            Switch("l2", ("b",)),
            Switch("s1", (), ("l1", "l2")),
            Switch("s2", (), ("l1", "l2")),
        ]
    )
    objs = to_hypernodes(topo)
    assert [o["metadata"]["name"] for o in objs] == ["l1", "l2", "s1"]


def test_blocks_become_tier1_and_aggregates_tier2() -> None:
    topo = Topology.block([Block("b1", ("a", "b")), Block("b2", ("c", "d"))], (2, 4))
    objs = to_hypernodes(topo)
    assert [o["spec"]["tier"] for o in objs] == [1, 1, 2]
    assert all(validate_hypernode(o) == [] for o in objs)


def test_validation_reports_what_the_crd_rejects() -> None:
    bad = {
        "apiVersion": "topology.volcano.sh/v1alpha1",
        "kind": "HyperNode",
        "metadata": {"name": "Bad_Name"},
        "spec": {
            "tier": -1,
            "members": [
                {"type": "Rack", "selector": {}},
                {"type": "HyperNode", "selector": {"labelMatch": {}}},
            ],
        },
    }
    errors = validate_hypernode(bad)
    assert len(errors) == 5
    assert validate_hypernode({**bad, "spec": {"tier": 1, "members": []}})[-1].endswith(
        "non-empty list"
    )
