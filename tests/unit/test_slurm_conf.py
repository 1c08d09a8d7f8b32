"""slurm.conf's site lines read as slurmctld reads them, and caldera.toml's site tables.

Facts about Slurm used here were checked on the project's test cluster (testenv/slurm):
`CPUs=2` alone gives Sockets=2 CoresPerSocket=1 ThreadsPerCore=1 (`scontrol show node
node01`), `Sockets=2 CoresPerSocket=128` gives CPUTot=256 (big001).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.control.config import ConfigError, load_config
from gateway.control.site import local_cluster
from gateway.control.slurm_conf import (
    SlurmConfError,
    parse_gres,
    parse_licenses,
    parse_slurm_conf,
)
from gateway.model.cluster import NodeState
from tests.support.shared_data import REPO_ROOT

TEMPLATE = REPO_ROOT / "testenv" / "slurm" / "etc" / "slurm.conf.in"


def test_the_test_clusters_own_slurm_conf_is_read_whole() -> None:
    conf = parse_slurm_conf(TEMPLATE.read_text(), str(TEMPLATE))
    names = [n.name for n in conf.nodes]
    assert names[:4] == ["node01", "node02", "node03", "node04"]
    assert len(names) == 104
    assert names[-1] == "big100"
    node04 = conf.nodes[3]
    assert node04.gres == (("gpu", "a100", 4),)
    assert node04.features == ("real", "a100")
    big = conf.nodes[4]
    assert (big.cpus, big.sockets, big.cores_per_socket, big.weight) == (256, 2, 128, 100)
    assert big.state == "DOWN"
    assert big.reason == "virtual node (no slurmd)"
    assert conf.licenses == (("cscratch1", 1000), ("SCRATCH", 1000), ("cfs", 1000), ("matlab", 8))
    assert conf.gres_types == ("gpu", "craynetwork", "qpu")
    assert conf.def_mem_per_cpu_mb == 100
    debug = conf.partitions[0]
    assert debug.default
    assert len(debug.nodes) == 104
    assert debug.max_time is None
    cpu = next(p for p in conf.partitions if p.name == "cpu")
    assert cpu.nodes[:2] == ("node01", "node02")
    assert len(cpu.nodes) == 34


def test_cpus_alone_give_one_core_per_socket() -> None:
    conf = parse_slurm_conf("NodeName=n1 CPUs=2 RealMemory=10\n")
    node = conf.nodes[0]
    assert (node.cpus, node.sockets, node.cores_per_socket, node.threads_per_core) == (2, 2, 1, 1)


def test_topology_alone_gives_the_cpus() -> None:
    conf = parse_slurm_conf("NodeName=n1 Sockets=2 CoresPerSocket=4 ThreadsPerCore=2\n")
    assert conf.nodes[0].cpus == 16


def test_default_lines_apply_to_the_lines_after_them() -> None:
    text = (
        "NodeName=DEFAULT CPUs=4 RealMemory=100 Features=a\n"
        "NodeName=n[1-2]\n"
        "NodeName=DEFAULT Features=b\n"
        "NodeName=n3 RealMemory=5\n"
        "PartitionName=DEFAULT MaxTime=30 MaxNodes=2\n"
        "PartitionName=p Nodes=n[1-3] Default=YES\n"
        "PartitionName=q Nodes=ALL MaxNodes=UNLIMITED OverSubscribe=exclusive DefMemPerCPU=7\n"
    )
    conf = parse_slurm_conf(text)
    assert [(n.name, n.cpus, n.memory_mb, n.features) for n in conf.nodes] == [
        ("n1", 4, 100, ("a",)),
        ("n2", 4, 100, ("a",)),
        ("n3", 4, 5, ("b",)),
    ]
    p, q = conf.partitions
    assert (p.max_time, p.max_nodes, p.default) == (30, 2, True)
    assert (q.max_nodes, q.oversubscribe, q.def_mem_per_cpu_mb) == (None, "EXCLUSIVE", 7)
    assert q.nodes == ("n1", "n2", "n3")


def test_comments_quotes_continuations_and_case_are_read_as_slurmctld_does() -> None:
    text = (
        "# a comment\n"
        'nodename=n1 cpus=2 \\\n  realmemory=9 reason="two words" # trailing\n'
        "partitionname=p nodes=n1 state=down\n"
        "enforcepartlimits=yes\n"
    )
    conf = parse_slurm_conf(text)
    assert conf.nodes[0].memory_mb == 9
    assert conf.nodes[0].reason == "two words"
    assert conf.partitions[0].state == "DOWN"
    assert conf.enforce_part_limits == "ANY"


@pytest.mark.parametrize(
    ("text", "where", "what"),
    [
        ("NodeName=n1 CPUs=x\n", ":1:", "CPUs"),
        ("\n\nNodeName=n1 Bogus=1\n", ":3:", "unknown NodeName key 'bogus'"),
        ("NodeName=n[3-1]\n", ":1:", "invalid hostlist"),
        ("NodeName=n1\nPartitionName=p Nodes=n2\n", ":2:", "node n2 is not declared"),
        ("NodeName=n1 Gres=gpu:a:b:c:1\n", ":1:", "Gres"),
        ("Licenses=a:x\n", ":1:", "Licenses"),
        ("NodeName=n1\nNodeName=n1\n", ":2:", "declared twice"),
        ("PartitionName=p OverSubscribe=maybe\n", ":1:", "OverSubscribe"),
        ("PartitionName=p MaxTime=soon\n", ":1:", "MaxTime"),
        ("Include /etc/slurm/other.conf\n", ":1:", "Include"),
        ("NodeName=n1 junk\n", ":1:", "cannot read 'junk'"),
        ("PartitionName=a Default=YES\nPartitionName=b Default=YES\n", ":2:", "Default=YES"),
        ("EnforcePartLimits=SOMETIMES\n", ":1:", "EnforcePartLimits"),
        ("\nKillWait=-5\n", ":2:", "KillWait"),
    ],
)
def test_what_cannot_be_read_is_named_with_file_and_line(text: str, where: str, what: str) -> None:
    with pytest.raises(SlurmConfError) as err:
        parse_slurm_conf(text, "site.conf")
    assert str(err.value).startswith("site.conf" + where)
    assert what in str(err.value)


def test_gres_and_licence_lists() -> None:
    assert parse_gres("gpu:a100:4,craynetwork:4,gpu") == (
        ("gpu", "a100", 4),
        ("craynetwork", None, 4),
        ("gpu", None, 1),
    )
    assert parse_gres("gpu:2K") == (("gpu", None, 2048),)
    assert parse_gres("gpu::2") is None
    assert parse_licenses("a:2;b*3,c") == (("a", 2), ("b", 3), ("c", 1))
    assert parse_licenses("a:") is None


_LINE_PARTS = st.sampled_from(
    [
        "NodeName=",
        "PartitionName=",
        "Licenses=",
        "DEFAULT",
        "ALL",
        "n[1-3]",
        "n[",
        "CPUs=",
        "Sockets=0",
        "Gres=gpu:",
        "Nodes=",
        "MaxTime=",
        "State=DOWN",
        "Weight=-1",
        '"',
        "#",
        "\\",
        "=",
        " ",
        "\n",
        "1",
        "x",
        ":",
        ",",
        "Include",
    ]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_LINE_PARTS, max_size=30).map("".join) | st.text(max_size=200))
def test_any_text_is_read_or_refused_with_a_located_error_never_a_traceback(text: str) -> None:
    try:
        conf = parse_slurm_conf(text, "f.conf")
    except SlurmConfError as exc:
        message = str(exc)
    else:
        names = {n.name for n in conf.nodes}
        assert all(set(part.nodes) <= names for part in conf.partitions)
        return
    assert message.startswith("f.conf:"), message


def _home(tmp_path: Path, toml: str) -> Path:
    (tmp_path / "caldera.toml").write_text(toml)
    return tmp_path


def test_local_slurm_conf_describes_the_local_site(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text(TEMPLATE.read_text())
    (tmp_path / "topology.conf").write_text((TEMPLATE.parent / "topology.conf.in").read_text())
    cfg = load_config(_home(tmp_path, '[local]\nslurm_conf = "slurm.conf"\n'))
    site = local_cluster(cfg)
    assert site.nodes[0].switch == "leaf1"  # TopologyPlugin=topology/tree: its topology.conf
    assert cfg.def_mem_per_cpu_mb == 100
    node04 = next(n for n in site.nodes if n.name == "node04")
    assert node04.gres == (("gpu", "a100", 4),)
    assert node04.gpu_count("a100") == 4
    big = next(n for n in site.nodes if n.name == "big001")
    assert big.state is NodeState.DOWN
    assert big.weight == 100
    assert site.licenses == cfg.licenses
    assert dict(site.licenses)["matlab"] == 8
    assert site.default_partition is not None
    assert site.default_partition.name == "debug"
    assert (cfg.kill_wait_s, cfg.min_job_age_s) == (5, 300)  # the test cluster's, not 30
    toml = 'kill_wait_s = 9\n[local]\nslurm_conf = "slurm.conf"\n'
    assert load_config(_home(tmp_path, toml)).kill_wait_s == 9  # caldera.toml's wins


def test_a_broken_slurm_conf_is_a_config_error_naming_its_line(tmp_path: Path) -> None:
    (tmp_path / "slurm.conf").write_text("NodeName=n1 CPUs=2\nPartitionName=p Nodes=zz\n")
    with pytest.raises(ConfigError, match=r"slurm\.conf:2: partition p: node zz"):
        load_config(_home(tmp_path, '[local]\nslurm_conf = "slurm.conf"\n'))
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(_home(tmp_path, '[local]\nslurm_conf = "missing.conf"\n'))


def test_slurm_conf_and_toml_tables_do_not_both_describe_nodes(tmp_path: Path) -> None:
    (tmp_path / "slurm.conf").write_text("NodeName=n1 CPUs=2\n")
    toml = '[local]\nslurm_conf = "slurm.conf"\n[[nodes]]\nname = "a"\ncpus = 1\nmemory_mb = 1\n'
    with pytest.raises(ConfigError, match="keep one"):
        load_config(_home(tmp_path, toml))


def test_toml_tables_declare_what_slurm_conf_declares(tmp_path: Path) -> None:
    toml = (
        'licenses = "matlab:8,cfs"\nenforce_part_limits = "all"\n'
        '[[nodes]]\nname = "node[01-02]"\ncpus = 4\nmemory_mb = 1000\nsockets = 2\n'
        'gres = "gpu:a100:2"\nfeatures = "x,y"\nweight = 5\n'
        '[[partitions]]\nname = "p"\nmax_nodes = 1\noversubscribe = "exclusive"\n'
        'nodes = "node[01-02]"\n'
        "def_mem_per_cpu_mb = 300\n"
    )
    cfg = load_config(_home(tmp_path, toml))
    site = local_cluster(cfg)
    assert [n.name for n in site.nodes] == ["node01", "node02"]
    n = site.nodes[0]
    assert (n.sockets, n.cores_per_socket, n.weight, n.features) == (2, 2, 5, ("x", "y"))
    assert n.gpu_count("a100") == 2
    assert len(n.gpus) == 2
    part = site.partitions[0]
    assert part.nodes == ("node01", "node02")
    assert (part.max_nodes, part.oversubscribe, part.def_mem_per_cpu_mb) == (1, "EXCLUSIVE", 300)
    assert site.licenses == (("matlab", 8), ("cfs", 1))
    assert site.enforce_part_limits == "ALL"


def test_the_older_node_tables_still_work(tmp_path: Path) -> None:
    toml = '[[nodes]]\nname = "a"\ncpus = 2\nmemory_mb = 100\ngpus = 2\nfeatures = ["f"]\n'
    site = local_cluster(load_config(_home(tmp_path, toml)))
    node = site.nodes[0]
    assert node.gres == (("gpu", None, 2),)
    assert (node.sockets, node.cores_per_socket) == (2, 1)


@pytest.mark.parametrize(
    ("toml", "what"),
    [
        ('[[nodes]]\nname = "a"\ncpus = 1\n', "memory_mb is required"),
        ('[[nodes]]\nname = "a"\ncpus = "two"\nmemory_mb = 1\n', "cpus must be an integer"),
        ('[[nodes]]\nname = "a"\nmemory_mb = 1\ngres = "gpu:"\n', "cannot read gres"),
        ('[[partitions]]\nname = "p"\noversubscribe = "often"\n', "oversubscribe"),
        ('[[partitions]]\nname = "p"\nmax_time = "soon"\n', "invalid time"),
        ('licenses = "a:b"\n', "licenses"),
        ('enforce_part_limits = "maybe"\n', "enforce_part_limits"),
        ("[local]\nslurm_conf = 3\n", "slurm_conf must be a path"),
    ],
)
def test_bad_site_tables_are_config_errors(tmp_path: Path, toml: str, what: str) -> None:
    with pytest.raises(ConfigError, match=what):
        load_config(_home(tmp_path, toml))


def test_a_local_cluster_table_takes_the_site_tables_and_a_top_level_slurm_conf(
    tmp_path: Path,
) -> None:
    (tmp_path / "slurm.conf").write_text("NodeName=n[1-3] CPUs=2\nLicenses=cfs:5\n")
    toml = '[local]\nslurm_conf = "slurm.conf"\n[[cluster]]\nname = "here"\nkind = "local"\n'
    cfg = load_config(_home(tmp_path, toml))
    assert [n.name for n in cfg.nodes] == ["n1", "n2", "n3"]
    assert cfg.licenses == (("cfs", 5),)
    toml = '[[cluster]]\nname = "here"\nkind = "local"\nlicenses = "cfs:2"\n'
    assert load_config(_home(tmp_path, toml)).licenses == (("cfs", 2),)


def test_tmp_disk_reaches_the_sites_nodes_from_either_description(tmp_path: Path) -> None:
    (tmp_path / "slurm.conf").write_text(
        "NodeName=n1 CPUs=2 TmpDisk=500\nPartitionName=p Nodes=n1\n"
    )
    site = local_cluster(load_config(_home(tmp_path, '[local]\nslurm_conf = "slurm.conf"\n')))
    assert site.nodes[0].tmp_disk_mb == 500
    toml = '[[nodes]]\nname = "a"\ncpus = 1\nmemory_mb = 1\ntmp_disk_mb = 70\n'
    assert local_cluster(load_config(_home(tmp_path, toml))).nodes[0].tmp_disk_mb == 70
