"""`[[cluster]]` tables of caldera.toml: each kind reads the same keys as the old
`[slurm]`/`[kubernetes]` tables, and every mistake names the file and the table."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.control.backends import ClusterPlans, cluster_plans
from gateway.control.config import ClusterKind, ConfigError, GatewayConfig, load_config
from k8s_bridge.config import KubeConfigError
from k8s_bridge.options import GangMode
from slurm_plugin.config import SlurmConfigError, SubmitAs, Transport

# the real test cluster's settings, as tests/e2e/test_gateway_slurm.py writes them
SLURM_CONF = "/tmp/caldera-slurm/etc/slurm.conf"
HPC_KEYS = (
    f'transport = "cli"\nslurm_conf = "{SLURM_CONF}"\ninstance = "unit"\n'
    'submit_as = "user"\npoll_interval_s = 0.5\n'
)


def _load(tmp_path: Path, text: str) -> GatewayConfig:
    (tmp_path / "caldera.toml").write_text(text)
    return load_config(tmp_path)


def _plans(tmp_path: Path, text: str) -> ClusterPlans:
    return cluster_plans(_load(tmp_path, text))


def test_a_slurm_cluster_reads_the_same_in_both_forms(tmp_path: Path) -> None:
    old = _plans(
        tmp_path,
        f'[slurm]\n[[slurm.cluster]]\nname = "hpc"\n{HPC_KEYS}'
        '[[slurm.cluster.partition]]\nslurm = "real"\nname = "hpc-real"\n',
    )
    new = _plans(
        tmp_path,
        f'[[cluster]]\nname = "hpc"\nkind = "slurm"\n{HPC_KEYS}'
        '[[cluster.partition]]\nslurm = "real"\nname = "hpc-real"\n',
    )
    assert new == old
    (hpc,) = new.slurm
    assert (hpc.name, hpc.transport, hpc.slurm_conf, hpc.instance) == (
        "hpc",
        Transport.CLI,
        SLURM_CONF,
        "unit",
    )
    assert (hpc.submit_as, hpc.poll_interval_s) == (SubmitAs.USER, 0.5)
    assert hpc.slurm_partition("hpc-real") == "real"
    assert hpc.offered("debug") is None


def test_a_kubernetes_cluster_reads_the_same_in_both_forms(tmp_path: Path) -> None:
    keys = 'kubeconfig = "/etc/k.conf"\nvolcano = false\nmode = "volcano-job"\nqps = 7\n'
    sizing = "def_mem_per_cpu_mb = 512\nkill_wait_s = 4\n"
    old = _plans(tmp_path, f'{sizing}[kubernetes]\n[[kubernetes.cluster]]\nname = "k"\n{keys}')
    new = _plans(tmp_path, f'{sizing}[[cluster]]\nname = "k"\nkind = "kubernetes"\n{keys}')
    assert new == old
    (k,) = new.kubernetes
    assert (k.kubeconfig, k.volcano, k.options.mode, k.options.qps) == (
        "/etc/k.conf",
        False,
        GangMode.VOLCANO_JOB,
        7,
    )
    assert (k.options.def_mem_per_cpu_mb, k.options.kill_wait_s) == (512, 4)


def test_clusters_keep_their_order_and_the_old_tables_mix_with_new_names(tmp_path: Path) -> None:
    config = _load(
        tmp_path,
        '[[cluster]]\nname = "b"\nkind = "slurm"\n'
        '[[cluster]]\nname = "k"\nkind = "kubernetes"\nserver = "https://x"\n'
        'token_file = "/t"\n'
        '[[cluster]]\nname = "a"\nkind = "slurm"\n'
        '[slurm]\n[[slurm.cluster]]\nname = "old"\n',
    )
    assert [(e.name, e.kind) for e in config.clusters] == [
        ("b", ClusterKind.SLURM),
        ("k", ClusterKind.KUBERNETES),
        ("a", ClusterKind.SLURM),
    ]
    plans = cluster_plans(config)
    assert [c.name for c in plans.slurm] == ["old", "b", "a"]
    assert [c.server for c in plans.kubernetes] == ["https://x"]


def test_the_local_cluster_may_be_a_cluster_table(tmp_path: Path) -> None:
    config = _load(
        tmp_path,
        '[[cluster]]\nname = "here"\nkind = "local"\n'
        '[[cluster.nodes]]\nname = "n1"\ncpus = 2\nmemory_mb = 1000\n'
        '[[cluster.partitions]]\nname = "p"\ndefault = true\n',
    )
    assert config.cluster_name == "here"
    assert [n.name for n in config.nodes] == ["n1"]
    assert [(p.name, p.default) for p in config.partitions] == [("p", True)]
    assert config.clusters == ()
    assert _load(tmp_path, "").clusters == ()  # the embedded default needs no table


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[[cluster]]\nname = "a"\nkind = "slurm"\n[[cluster]]\nname = "b"\nkind = "slurmm"\n',
            "caldera.toml: [[cluster]] #2 (b): unknown kind 'slurmm' "
            "(one of local, slurm, kubernetes)",
        ),
        (
            '[[cluster]]\nname = "a"\n',
            "caldera.toml: [[cluster]] #1 (a): kind is required (one of local, slurm, kubernetes)",
        ),
        (
            '[[cluster]]\nkind = "slurm"\n',
            "caldera.toml: [[cluster]] #1: name (the cluster's name in Caldera) is required",
        ),
        (
            '[[cluster]]\nname = "a"\nkind = "slurm"\n'
            '[[cluster]]\nname = "a"\nkind = "kubernetes"\n',
            "caldera.toml: [[cluster]] #2 (a): cluster name 'a' is also configured by "
            "[[cluster]] #1",
        ),
        (
            '[[cluster]]\nname = "hpc"\nkind = "slurm"\n[slurm]\n[[slurm.cluster]]\nname = "hpc"\n',
            "caldera.toml: [[cluster]] #1 (hpc): cluster name 'hpc' is also configured by "
            "[slurm].cluster[0]",
        ),
        (
            '[[cluster]]\nname = "caldera"\nkind = "slurm"\n',
            "caldera.toml: [[cluster]] #1 (caldera): cluster name 'caldera' is the local "
            "cluster's (cluster_name)",
        ),
        (
            'cluster_name = "x"\n[[cluster]]\nname = "y"\nkind = "local"\n',
            "caldera.toml: [[cluster]] #1 (y): the local cluster is named 'y' here and 'x' by "
            "cluster_name; keep one",
        ),
        (
            '[[cluster]]\nname = "y"\nkind = "local"\n[[cluster]]\nname = "z"\nkind = "local"\n',
            "caldera.toml: [[cluster]] #2 (z): only one cluster may be of kind 'local'",
        ),
        (
            '[[cluster]]\nname = "y"\nkind = "local"\nslurm_conf = "/x"\n',
            "caldera.toml: [[cluster]] #1 (y): unknown setting(s) 'slurm_conf' for kind 'local'",
        ),
        ("cluster = 3\n", "caldera.toml: cluster must be an array of tables ([[cluster]])"),
        ("clusters = []\n", "caldera.toml: unknown setting 'clusters'"),
    ],
)
def test_structural_mistakes_name_the_file_and_the_table(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, text)
    assert str(info.value) == f"{tmp_path}/{message}"


def test_a_kind_s_own_mistakes_come_from_its_parser_with_the_place(tmp_path: Path) -> None:
    text = f'[[cluster]]\nname = "hpc"\nkind = "slurm"\n{HPC_KEYS}transprt = "rest"\n'
    with pytest.raises(SlurmConfigError) as info:
        _plans(tmp_path, text)
    assert str(info.value) == (
        f"{tmp_path}/caldera.toml: [[cluster]] #1 (hpc): unknown setting(s) 'transprt'"
    )
    with pytest.raises(KubeConfigError) as kube:
        _plans(tmp_path, '[[cluster]]\nname = "k"\nkind = "kubernetes"\nnamspace = "x"\n')
    assert (
        str(kube.value)
        == f"{tmp_path}/caldera.toml: [[cluster]] #1 (k): unknown setting 'namspace'"
    )


def test_the_documented_example_loads(tmp_path: Path) -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "operating.md").read_text()
    section = doc.split("## Clusters: `[[cluster]]`", 1)[1]
    example = section.split("```toml\n", 1)[1].split("```", 1)[0]
    config = _load(tmp_path, example)
    plans = cluster_plans(config)
    assert (config.cluster_name, [p.name for p in config.partitions]) == ("caldera", ["debug"])
    assert [(c.name, c.slurm_partition("hpc-batch")) for c in plans.slurm] == [("hpc", "batch")]
    assert [(c.name, c.volcano) for c in plans.kubernetes] == [("k8s-east", None)]
