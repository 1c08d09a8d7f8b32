"""The topology model and its readers/writers: topology.conf (tree and block forms),
`scontrol show topology`, Kubernetes labels, ibnetdiscover captures, agent discovery."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from gateway.inventory.messages import Inventory
from gateway.model.topology import Block, Switch, Topology, TopologyError, TopologyKind
from gateway.topology.discovery import links_for_node, topology_from_inventories
from gateway.topology.ibnetdiscover import read_ibnetdiscover, topology_from_fabric
from gateway.topology.k8s_labels import LABEL_PRESETS, topology_from_labels, topology_to_labels
from gateway.topology.slurm_conf import (
    parse_scontrol_topology,
    parse_topology_conf,
    read_topology_conf,
    render_topology_conf,
)
from tests.support.shared_data import SHARED_DATA

SHARED = SHARED_DATA
MICRO = SHARED / "slurm-sim-micro" / "topology.conf"
FABRIC = Path(__file__).resolve().parents[1] / "data" / "ibnetdiscover" / "fabric.txt"


def fat_tree() -> Topology:
    return parse_topology_conf(
        """
        # two pods
        SwitchName=l1 Nodes=n[01-04] LinkSpeed=200
        SwitchName=l2 Nodes=n[05-08]
        SwitchName=l3 Nodes=n[09-12]
        SwitchName=l4 Nodes=n[13-16]
        SwitchName=s1 Switches=l[1-2]
        SwitchName=s2 Switches=l[3-4]
        SwitchName=core Switches=s[1-2]
        """
    )


def test_micro_cluster_topology_conf_reads_as_a_two_level_tree() -> None:
    topo = read_topology_conf(MICRO)
    assert topo.kind is TopologyKind.TREE
    assert topo.groups == ("IBN", "IBM", "IBG")
    assert topo.uppers() == ("TOP",)
    assert topo.nodes_in("IBG") == ("g1", "b1")
    assert topo.group_of("m3") == "IBM"
    assert topo.level("TOP") == 1
    assert topo.problems() == []


def test_levels_paths_spans_and_distances_follow_the_tree() -> None:
    topo = fat_tree()
    assert topo.level("l1") == 0
    assert topo.level("s2") == 1
    assert topo.level("core") == 2
    assert topo.path("n06") == ("l2", "s1", "core")
    assert topo.leaves_under("s2") == ("l3", "l4")
    assert topo.span(["n01", "n02", "n05", "unknown"]) == 3
    assert topo.distance("n01", "n02") == 0
    assert topo.distance("n01", "n05") == 2
    assert topo.distance("n01", "n16") == 4
    assert topo.switches[0].link_speed == 200


def test_render_then_parse_gives_the_same_topology() -> None:
    for topo in (fat_tree(), read_topology_conf(MICRO)):
        text = render_topology_conf(topo, header="written by Caldera")
        assert text.startswith("# written by Caldera\n")
        assert parse_topology_conf(text) == topo


def test_rendered_tree_lists_leaves_first_with_hostlist_ranges() -> None:
    text = render_topology_conf(fat_tree())
    assert text.splitlines()[0] == "SwitchName=l1 Nodes=n[01-04] LinkSpeed=200"
    assert "SwitchName=core Switches=s[1-2]" in text


def test_block_form_reads_aggregates_and_round_trips() -> None:
    text = (
        "BlockName=b1 Nodes=n[1-4]\nBlockName=b2 Nodes=n[5-8]\n"
        "BlockName=b3 Nodes=n[9-12]\nBlockSizes=4,8\n"
    )
    topo = parse_topology_conf(text)
    assert topo.kind is TopologyKind.BLOCK
    assert topo.groups == ("b1", "b2", "b3")
    assert topo.block_sizes == (4, 8)
    aggregates = topo.uppers()
    assert [topo.leaves_under(a) for a in aggregates] == [("b3",), ("b1", "b2")]
    assert topo.distance("n1", "n5") == 2
    assert parse_topology_conf(render_topology_conf(topo)) == topo


def test_continuation_lines_comments_and_case_are_accepted() -> None:
    topo = parse_topology_conf("switchname=a nodes=x[1-2] \\\n  # c\n\nSWITCHNAME=b SWITCHES=a\n")
    assert topo.group_of("x2") == "a"
    assert topo.parents("a") == ("b",)


@pytest.mark.parametrize(
    "text",
    [
        "SwitchName=a Nodes=n1 Bogus=1",
        "Frobnicate=1",
        "SwitchName=a Nodes=n1\nBlockName=b Nodes=n2",
        "SwitchName=a Switches=b\nSwitchName=b Switches=a",
    ],
)
def test_bad_topology_conf_is_refused(text: str) -> None:
    with pytest.raises(TopologyError):
        parse_topology_conf(text)


def test_problems_name_nodes_on_two_leaves_and_unknown_switches() -> None:
    topo = Topology.tree([Switch("a", ("n1",)), Switch("b", ("n1",)), Switch("c", (), ("zz",))])
    problems = topo.problems()
    assert any("n1" in p for p in problems)
    assert any("zz" in p for p in problems)


def test_scontrol_show_topology_output_parses_to_the_tree() -> None:
    out = (
        "SwitchName=l1 Level=0 LinkSpeed=1 Nodes=n[01-04]\n"
        "SwitchName=l2 Level=0 LinkSpeed=1 Nodes=n[05-08]\n"
        "SwitchName=s1 Level=1 LinkSpeed=1 Nodes=n[01-08] Switches=l[1-2]\n"
    )
    topo = parse_scontrol_topology(out)
    assert topo.groups == ("l1", "l2")
    assert topo.nodes_in("s1") == tuple(f"n{i:02d}" for i in range(1, 9))
    assert topo.switches[2].nodes == ()


def test_node_labels_give_a_tree_and_back() -> None:
    labels = {
        f"kwok-node-{i:02d}": {
            "topology.caldera.io/leaf": f"leaf-{(i - 1) // 2}",
            "topology.caldera.io/spine": f"spine-{(i - 1) // 4}",
        }
        for i in range(1, 9)
    }
    topo = topology_from_labels(labels)
    assert topo.groups == ("leaf-0", "leaf-1", "leaf-2", "leaf-3")
    assert topo.leaves_under("spine-1") == ("leaf-2", "leaf-3")
    assert topology_to_labels(topo) == labels


def test_block_labels_and_presets() -> None:
    topo = topology_from_labels({"a": {"topology.caldera.io/block": "b1"}, "b": {}})
    assert topo.kind is TopologyKind.BLOCK
    assert topo.groups == ("b1",)
    aws = topology_from_labels(
        {
            "i-1": {
                "topology.k8s.aws/network-node-layer-3": "nn-3",
                "topology.k8s.aws/network-node-layer-2": "nn-2",
            }
        },
        LABEL_PRESETS["aws"],
    )
    assert aws.path("i-1") == ("nn-3", "nn-2")


def test_ibnetdiscover_capture_parses_switches_adapters_and_links() -> None:
    fabric = read_ibnetdiscover(FABRIC)
    assert len(fabric.switches) == 6
    assert len(fabric.adapters) == 4 * 8 + 8 + 1
    leaf = fabric.nodes["b8599f0300e10100"]
    assert leaf.desc == "MF0;leaf01:MQM9700/U1"
    assert leaf.lid == 2
    assert leaf.ports == 64
    first = leaf.links[0]
    assert (first.port, first.remote_guid, first.remote_kind) == (1, "b8599f0300010000", "H")
    assert first.remote_desc == "gpu01 mlx5_0"
    assert first.speed == "4xNDR"
    ca = fabric.nodes["b8599f0300090000"]
    assert ca.kind == "Ca"
    assert ca.links[0].remote_guid == "b8599f0300e10400"


def test_fabric_becomes_leaves_under_two_spines() -> None:
    topo = topology_from_fabric(read_ibnetdiscover(FABRIC))
    assert set(topo.groups) == {"leaf01", "leaf02", "leaf03", "ibsw-b8599f0300e10400"}
    assert topo.nodes_in("leaf01") == ("gpu01", "gpu02")
    assert topo.nodes_in("ibsw-b8599f0300e10400") == ("cn05", "cn06", "cn07", "cn08", "ib09")
    assert set(topo.uppers()) == {"spine01", "spine02"}
    assert topo.parents("leaf03") == ("spine01", "spine02")
    assert topo.problems() == []
    assert parse_topology_conf(render_topology_conf(topo)) == topo


def _inventory(node: str, guids: dict[str, str], fabric_reporter: bool) -> Inventory:
    fabric = read_ibnetdiscover(FABRIC)
    links, switch_links, names = links_for_node(fabric, guids, guids)
    return Inventory(
        node=node,
        cpus=1,
        memory_bytes=1,
        links=links,
        switch_links=switch_links if fabric_reporter else (),
        switch_names=names,
    )


def test_agent_discovery_gives_the_same_tree_as_the_capture() -> None:
    spec = importlib.util.spec_from_file_location("make_fabric", FABRIC.parent / "make_fabric.py")
    assert spec is not None
    assert spec.loader is not None
    make_fabric = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_fabric)
    guid, hosts = make_fabric.guid, make_fabric.hosts
    invs = [
        _inventory(name, {guid(num, k): f"mlx5_{k}" for k in range(hcas)}, name == "gpu01")
        for name, num, hcas, _, _ in hosts()
    ]
    found = topology_from_inventories(invs)
    expected = topology_from_fabric(read_ibnetdiscover(FABRIC))
    assert {g: found.nodes_in(g) for g in found.groups} == {
        g: expected.nodes_in(g) for g in expected.groups
    }
    assert set(found.uppers()) == set(expected.uppers())


def test_block_constructor_and_tree_from_paths() -> None:
    topo = Topology.block([Block("b1", ("a", "b"))])
    assert topo.group_of("b") == "b1"
    assert topo.uppers() == ()
    tree = Topology.from_paths({"a": ["l1", "s1"], "b": ["l2", "s1"], "c": ["l3"]})
    assert tree.roots() == ("s1", "l3")
    assert any("no switch can reach" in p for p in tree.problems())
