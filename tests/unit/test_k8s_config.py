"""The [kubernetes] table of caldera.toml (k8s_bridge/config.py): values and clear errors."""

from __future__ import annotations

import tomllib

import pytest

from k8s_bridge.config import KubeConfigError, parse_kubernetes_config
from k8s_bridge.options import GangMode, Toleration


def _parse(text: str, **kw: int):  # type: ignore[no-untyped-def]
    return parse_kubernetes_config(tomllib.loads(text)["kubernetes"], "[kubernetes]", **kw)


def test_a_full_table() -> None:
    (c,) = _parse(
        """
[kubernetes]
[[kubernetes.cluster]]
name = "gpu-east"
kubeconfig = "/etc/caldera/east.kubeconfig"
context = "east"
volcano = "auto"
namespace = "hpc"
mode = "volcano-job"
max_pending_pods = 32
dns_policy = "ClusterFirst"
qps = 20
gpu_share = true
pod_labels = { team = "cfd" }
worker_command = ["/bin/sleep", "infinity"]
[[kubernetes.cluster.toleration]]
key = "dedicated"
operator = "Equal"
value = "hpc"
effect = "NoSchedule"
""",
        def_mem_per_cpu_mb=2048,
        kill_wait_s=10,
    )
    assert (c.name, c.kubeconfig, c.context, c.volcano) == (
        "gpu-east",
        "/etc/caldera/east.kubeconfig",
        "east",
        None,
    )
    o = c.options
    assert (o.namespace, o.mode, o.max_pending_pods, o.qps, o.gpu_share) == (
        "hpc",
        GangMode.VOLCANO_JOB,
        32,
        20.0,
        True,
    )
    assert (o.def_mem_per_cpu_mb, o.kill_wait_s) == (2048, 10)  # the gateway's, by default
    assert o.dns_policy == "ClusterFirst"
    assert dict(o.pod_labels) == {"team": "cfd"}
    assert o.worker_command == ("/bin/sleep", "infinity")
    assert o.tolerations == (Toleration("dedicated", "Equal", "hpc", "NoSchedule"),)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('name = "a"\nnamspace = "x"', "[kubernetes].cluster[0]: unknown setting 'namspace'"),
        ('name = ""', "[kubernetes].cluster[0]: name must be a non-empty string"),
        ('name = "a"\nmode = "slurm"', "mode must be one of caldera, volcano, volcano-job"),
        ('name = "a"\nmax_pending_pods = -1', "max_pending_pods must be a whole number >= 0"),
        ('name = "a"\nqps = "fast"', "qps must be a number > 0"),
        ('name = "a"\ndns_policy = "Host"', "dns_policy must be one of ClusterFirst, "),
        ('name = "a"\nvolcano = "yes"', 'volcano must be "auto", true or false'),
        ('name = "a"\nserver = "https://k:6443"', "server needs token_file"),
        ('name = "a"\nrun_as_user = 1', "run_as_user must be true or false"),
        (
            'name = "a"\n[[kubernetes.cluster.filesystem]]\nprefix = "home"',
            "filesystem[0]: prefix and host_path must be absolute paths",
        ),
        (
            'name = "a"\n[[kubernetes.cluster.filesystem]]\nprefix = "/home"\n'
            '[[kubernetes.cluster.filesystem]]\nprefix = "/home/alice/"',
            "filesystem[1]: /home/alice overlaps /home",
        ),
        (
            'name = "a"\n[[kubernetes.cluster.filesystem]]\nprefix = "/h"\nhostpath = "/x"',
            "filesystem[0]: unknown setting 'hostpath'",
        ),
    ],
)
def test_mistakes_are_named(body: str, message: str) -> None:
    with pytest.raises(KubeConfigError) as err:
        _parse(f"[kubernetes]\n[[kubernetes.cluster]]\n{body}\n")
    assert message in str(err.value)


def test_names_are_unique_and_a_cluster_is_needed() -> None:
    with pytest.raises(KubeConfigError, match="cluster name 'a' is used twice"):
        _parse(
            '[kubernetes]\n[[kubernetes.cluster]]\nname = "a"\n[[kubernetes.cluster]]\nname = "a"\n'
        )
    with pytest.raises(KubeConfigError, match="needs at least one"):
        _parse("[kubernetes]\n")
    with pytest.raises(KubeConfigError, match="unknown setting 'clusters'"):
        _parse("[kubernetes]\nclusters = 1\n")


def test_the_filesystem_map_is_read_normalised() -> None:
    (cluster,) = _parse(
        '[kubernetes]\n[[kubernetes.cluster]]\nname = "a"\ntime_scale = 0.5\n'
        '[[kubernetes.cluster.filesystem]]\nprefix = "/home/"\nhost_path = "/export/home"\n'
        '[[kubernetes.cluster.filesystem]]\nprefix = "/scratch"\n'
    )
    fs = cluster.options.filesystem
    assert [(d.prefix, d.source) for d in fs] == [
        ("/home", "/export/home"),
        ("/scratch", "/scratch"),
    ]
    assert cluster.options.time_scale == 0.5
