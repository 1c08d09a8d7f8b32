"""`scontrol show topology` lines from a topology.conf tree, as the test cluster printed
them (Slurm 22.05, testenv/slurm's topology.conf) for each kind of argument."""

from __future__ import annotations

import pytest

from gateway.compat.show_topo import show_topology, topology_records
from gateway.topology.slurm_conf import parse_topology_conf
from tests.unit.test_job_env import TOPOLOGY

RECORDS = topology_records(TOPOLOGY)
LEAF1 = "SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=node[01-02]\n"
SPINE1 = "SwitchName=spine1 Level=1 LinkSpeed=1 Nodes=node[01-04] Switches=leaf[1-2]\n"
CORE = "SwitchName=core Level=2 LinkSpeed=1 Nodes=big[001-100],node[01-04] Switches=spine[1-2]\n"


def test_every_switch_in_declaration_order_uppers_with_every_node_below() -> None:
    out, err = show_topology(RECORDS, None)
    assert err == ""
    lines = out.splitlines(keepends=True)
    assert [ln.split()[0] for ln in lines] == [
        *(f"SwitchName=leaf{i}" for i in range(1, 6)),
        "SwitchName=spine1",
        "SwitchName=spine2",
        "SwitchName=core",
    ]
    assert (lines[0], lines[5], lines[7]) == (LEAF1, SPINE1, CORE)


@pytest.mark.parametrize(
    ("name", "out"),
    [
        ("leaf1", LEAF1),  # a switch by name
        ("core", CORE),
        ("node02", LEAF1 + SPINE1 + CORE),  # every switch above the node
        ("node0[1-3]", SPINE1 + CORE),  # above all of them
        ("node01,big001", CORE),
    ],
)
def test_a_name_is_a_switch_or_the_nodes_below(name: str, out: str) -> None:
    assert show_topology(RECORDS, name) == (out, "")


@pytest.mark.parametrize("name", ["nosuch", "node[01-", "node01,nodeX"])
def test_no_match_is_an_error_on_stderr(name: str) -> None:
    assert show_topology(RECORDS, name) == (
        "",
        f"scontrol: error: Topology information contains no switch or node named {name}\n",
    )


def test_no_tree_is_no_topology_information() -> None:
    assert show_topology(topology_records(None), "x") == (
        "",
        "scontrol: error: No topology information available\n",
    )


def test_a_link_speed_is_printed_as_given() -> None:
    topo = parse_topology_conf("SwitchName=s1 Nodes=a[1-2] LinkSpeed=40\n")
    assert show_topology(topology_records(topo), None)[0] == (
        "SwitchName=s1 Level=0 LinkSpeed=40 Nodes=a[1-2]\n"
    )
