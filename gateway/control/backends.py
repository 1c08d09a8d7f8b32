"""Which backends a gateway runs with (the local one by default)."""

from __future__ import annotations

from collections.abc import Mapping

from gateway.control.config import GatewayConfig
from gateway.control.site import local_cluster
from gateway.model.backend import Backend
from gateway.model.cluster import ClusterState, Gpu

__all__ = ["make_backends"]


def make_backends(config: GatewayConfig) -> tuple[dict[str, Backend], dict[str, ClusterState]]:
    """The configured backends by cluster name, and the sites whose nodes and partitions
    come from the configuration rather than from the backend (the local machine)."""
    from containers.backend import LocalBackend

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
    )
    backends: dict[str, Backend] = {config.cluster_name: local}
    if config.slurm:
        from slurm_plugin import make_slurm_backends, parse_slurm_config

        _add(backends, make_slurm_backends(parse_slurm_config(config.slurm, "[slurm]")))
    if config.kubernetes:
        from k8s_bridge.config import make_kubernetes_backends, parse_kubernetes_config

        clusters = parse_kubernetes_config(
            config.kubernetes,
            def_mem_per_cpu_mb=config.def_mem_per_cpu_mb,
            kill_wait_s=config.kill_wait_s,
        )
        _add(backends, make_kubernetes_backends(clusters))
    return backends, {config.cluster_name: site}


def _add(backends: dict[str, Backend], more: Mapping[str, Backend]) -> None:
    for name, backend in more.items():
        if name in backends:
            raise ValueError(f"cluster name {name!r} is configured twice")
        backends[name] = backend
