"""The local site's switch tree from slurm.conf's TopologyPlugin=topology/tree: read from
topology.conf beside slurm.conf, each node's SLURM_TOPOLOGY_ADDR as slurmd builds it
(topology/tree's topo_get_node_addr, checked on the test cluster: `core.spine1.leaf1.node01`,
`switch.switch.switch.node`), and the switch path placement reads (the cluster gives a
`-N2` job node[03-04] when node01 is busy, not node[02-03])."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from containers.srun_layout import TOPOLOGY_VAR, node_env, topology_addresses
from gateway.control.config import ConfigError, load_config
from gateway.control.site import local_cluster
from gateway.control.site_topology import node_addresses, read_site_topology, switch_paths
from gateway.model.cluster import Node
from gateway.model.codec import node_from_dict, node_to_dict
from gateway.scheduler.request import node_request
from gateway.scheduler.snapshot import NodeFree
from gateway.scheduler.topology_plugin import TopologyPlacement
from gateway.topology.slurm_conf import parse_topology_conf
from tests.support.builders import make_job
from tests.unit.test_topology_placement import snapshot

TREE = (
    "SwitchName=leaf1 Nodes=node[01-02]\nSwitchName=leaf2 Nodes=node[03-04]\n"
    "SwitchName=spine1 Switches=leaf[1-2]\nSwitchName=core Switches=spine1\n"
)
SLURM_CONF = (
    "ClusterName=t\nTopologyPlugin=topology/tree\n"
    "NodeName=node[01-04] CPUs=2 RealMemory=1000\nPartitionName=real Nodes=ALL Default=YES\n"
)


def test_addresses_name_each_level_from_the_top_then_the_node() -> None:
    topo = parse_topology_conf(TREE)
    addrs = node_addresses(topo, ["node01", "node04"])
    assert addrs == {
        "node01": ("core.spine1.leaf1.node01", "switch.switch.switch.node"),
        "node04": ("core.spine1.leaf2.node04", "switch.switch.switch.node"),
    }


def test_a_node_no_switch_reaches_has_an_empty_field_per_level() -> None:
    # topo_get_node_addr appends "." for every level, whether a switch was found or not
    addrs = node_addresses(parse_topology_conf(TREE), ["node09"])
    assert addrs["node09"] == ("...node09", "switch.switch.switch.node")


def test_without_a_tree_the_address_is_the_node_name() -> None:
    assert node_addresses(None, ["a"]) == {"a": ("a", "node")}
    assert switch_paths(None) == {}


def test_switch_paths_run_from_the_leaf_up() -> None:
    assert switch_paths(parse_topology_conf(TREE))["node03"] == ("leaf2", "spine1", "core")


def test_only_topology_tree_reads_topology_conf(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    assert read_site_topology(conf, None) is None
    assert read_site_topology(conf, "topology/none") is None
    with pytest.raises(ConfigError, match=r"topology\.conf: cannot read it"):
        read_site_topology(conf, "topology/tree")
    (tmp_path / "topology.conf").write_text("SwitchName=s1 Bogus=1\n")
    with pytest.raises(ConfigError, match=r"topology\.conf: .*unknown parameter"):
        read_site_topology(conf, "topology/tree")
    (tmp_path / "topology.conf").write_text(TREE)
    topo = read_site_topology(conf, "Topology/Tree")
    assert topo is not None
    assert topo.group_of("node02") == "leaf1"


def _home(tmp_path: Path, topology: str | None) -> Path:
    (tmp_path / "slurm.conf").write_text(SLURM_CONF)
    if topology is not None:
        (tmp_path / "topology.conf").write_text(topology)
    (tmp_path / "caldera.toml").write_text(f'[local]\nslurm_conf = "{tmp_path / "slurm.conf"}"\n')
    return tmp_path


def test_a_site_without_topology_conf_is_refused_as_slurmctld_would(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"topology\.conf"):
        load_config(_home(tmp_path, None))


def test_the_site_tree_places_a_gang_on_one_leaf(tmp_path: Path) -> None:
    site = local_cluster(load_config(_home(tmp_path, TREE)))
    assert (site.nodes[0].switch, site.nodes[0].uplinks) == ("leaf1", ("spine1", "core"))
    # node01 busy: node02 is free beside it, but a 2-node job takes leaf2's two nodes
    free = [NodeFree(n, n.cpus, n.memory_mb, frozenset()) for n in site.nodes[1:]]
    req = node_request(make_job(1).nodes(2).build().spec)
    chosen = TopologyPlacement().choose(req, free, snapshot(free))
    assert chosen is not None
    assert [f.node.name for f in chosen] == ["node03", "node04"]


def test_srun_tasks_take_their_own_nodes_address() -> None:
    env = {
        "SLURM_JOB_NODELIST": "node[01-02]",
        TOPOLOGY_VAR: "core.spine1.leaf1.node01 core.spine1.leaf1.node02",
    }
    assert node_env(topology_addresses(env), "node02") == {
        "SLURMD_NODENAME": "node02",
        "SLURM_TOPOLOGY_ADDR": "core.spine1.leaf1.node02",
    }
    # no tree (the variable is unset): the node's name, not the batch host's address
    bare = topology_addresses({"SLURM_JOB_NODELIST": "node[01-02]"})
    assert node_env(bare, "node02")["SLURM_TOPOLOGY_ADDR"] == "node02"


def test_a_nodes_switch_path_survives_the_api_document() -> None:
    node = Node(name="n1", cpus=1, memory_mb=1, switch="leaf1", uplinks=("spine1", "core"))
    assert node_from_dict(json.loads(json.dumps(node_to_dict(node)))) == node
