"""The composition root: which backends a gateway runs with (the local one by default).

This is the only module under gateway/ that imports adapters (containers.backend,
slurm_plugin, k8s_bridge); each is imported only when a cluster of its kind is configured.
Every cluster's settings are parsed (by the adapter's own parser) before any backend is
built, so that a mistake anywhere leaves nothing half-started.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gateway.control.config import ClusterKind, GatewayConfig
from gateway.control.site import local_cluster
from gateway.model.backend import Backend
from gateway.model.cluster import ClusterState, Gpu

if TYPE_CHECKING:
    from k8s_bridge.config import KubeClusterConfig
    from slurm_plugin.config import SlurmClusterConfig

__all__ = ["ClusterPlans", "cluster_plans", "make_backends"]


@dataclass(frozen=True, slots=True)
class ClusterPlans:
    """The typed settings of every Slurm and Kubernetes cluster, from either form
    (`[[cluster]]` or the `[slurm]`/`[kubernetes]` tables), in file order."""

    slurm: tuple[SlurmClusterConfig, ...] = ()
    kubernetes: tuple[KubeClusterConfig, ...] = ()


def cluster_plans(config: GatewayConfig) -> ClusterPlans:
    """Parse every non-local cluster's settings; raises ValueError naming the place."""
    slurm: list[SlurmClusterConfig] = []
    kube: list[KubeClusterConfig] = []
    sizing: dict[str, Any] = {
        "def_mem_per_cpu_mb": config.def_mem_per_cpu_mb,
        "kill_wait_s": config.kill_wait_s,
    }
    if config.slurm:
        from slurm_plugin.config import parse_slurm_config

        slurm.extend(parse_slurm_config(config.slurm, "[slurm]").clusters)
    if config.kubernetes:
        from k8s_bridge.config import parse_kubernetes_config

        kube.extend(parse_kubernetes_config(config.kubernetes, **sizing))
    for entry in config.clusters:
        if entry.kind is ClusterKind.SLURM:
            from slurm_plugin.config import parse_slurm_cluster

            slurm.append(parse_slurm_cluster(entry.name, entry.settings, entry.where))
        elif entry.kind is ClusterKind.KUBERNETES:
            from k8s_bridge.config import parse_kubernetes_cluster

            kube.append(parse_kubernetes_cluster(entry.settings, entry.where, **sizing))
    return ClusterPlans(tuple(slurm), tuple(kube))


def make_backends(config: GatewayConfig) -> tuple[dict[str, Backend], dict[str, ClusterState]]:
    """The configured backends by cluster name, and the sites whose nodes and partitions
    come from the configuration rather than from the backend (the local machine)."""
    plans = cluster_plans(config)
    names = [config.cluster_name, *(c.name for c in plans.slurm)]
    names += [c.name for c in plans.kubernetes]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise ValueError(f"cluster name {dup!r} is configured twice")
    from containers.backend import LocalBackend
    from gateway.control.site_topology import node_addresses

    site = local_cluster(config)
    node = config.nodes[0]
    default = site.default_partition
    local = LocalBackend(
        config.spool_dir,
        node_name=node.name,
        cpus=node.cpus,
        memory_mb=node.memory_mb,
        gpus=tuple(Gpu(index=i) for i in range(node.gpus)),
        partition=default.name if default else "debug",
        cluster=config.cluster_name,
        kill_wait=config.kill_wait_s,
        time_scale=config.time_scale,
        docker_host=config.docker_host,
        def_mem_per_cpu_mb=config.def_mem_per_cpu_mb or None,
        min_job_age=config.min_job_age_s,
        proctrack=config.proctrack,
        topology=node_addresses(config.topology, (n.name for n in config.nodes))
        if config.topology
        else None,
    )
    backends: dict[str, Backend] = {config.cluster_name: local}
    if plans.slurm:
        from slurm_plugin import SlurmSiteConfig, make_slurm_backends

        backends.update(make_slurm_backends(SlurmSiteConfig(plans.slurm)))
    if plans.kubernetes:
        from k8s_bridge.config import make_kubernetes_backends

        backends.update(make_kubernetes_backends(list(plans.kubernetes)))
    return backends, {config.cluster_name: site}
