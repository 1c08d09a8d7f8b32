"""The site document: what clients need to print records as slurmctld would (its
defaults, each partition's default time, widest and largest node, the TRES it accounts),
sent with job listings."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

from gateway.control.gateway import Gateway
from gateway.model.cluster import ClusterState
from gateway.policy.service import policy_of
from gateway.scheduler.licenses import license_usage

__all__ = ["site_document"]

_Largest = tuple[dict[str, int], dict[str, int]]
_widest: list[tuple[tuple[ClusterState, ...], _Largest]] = []


def _partition_largest(clusters: Sequence[ClusterState]) -> _Largest:
    """Each partition's widest node (CPUs) and largest memory (MiB): slurmctld's node-count
    estimate for a pending `-n` job divides by the first, and a `--mem=0` job's ReqTRES
    counts the second per node. Computed again only when a cluster's description changes."""
    key = tuple(clusters)
    if _widest and len(_widest[0][0]) == len(key) and all(map(operator.is_, _widest[0][0], key)):
        return _widest[0][1]
    out: _Largest = ({}, {})
    for cluster in key:
        cpus = {n.name: n.cpus for n in cluster.nodes}
        mem = {n.name: n.memory_mb for n in cluster.nodes}
        for p in cluster.partitions:
            out[0][p.name] = max((cpus.get(name, 0) for name in p.nodes), default=0)
            out[1][p.name] = max((mem.get(name, 0) for name in p.nodes), default=0)
    _widest[:] = [(key, out)]
    return out


def site_document(gw: Gateway) -> dict[str, Any]:
    """What clients need to print records as slurmctld would (its defaults)."""
    clusters = list(gw.clusters.values())
    default = next((c.default_partition.name for c in clusters if c.default_partition), "debug")
    times = {
        p.name: p.default_time if p.default_time is not None else p.max_time
        for c in clusters
        for p in c.partitions
    }
    cpus, mem = _partition_largest(clusters)
    tres = gw.config.accounting_storage_tres
    return {
        "default_partition": default,
        "partition_time": times,
        "partition_cpus": cpus,
        "partition_mem": mem,
        "tres_names": None if tres is None else list(tres),
        "gres_types": list(gw.gres_types()),
        "def_mem_per_cpu_mb": gw.config.def_mem_per_cpu_mb or None,
        "job_requeue": gw.config.job_requeue,
        "max_array_size": gw.config.max_array_size,
        "cluster": gw.config.cluster_name,
        "clusters": sorted(gw.clusters),  # every cluster's name, for -M/--clusters
        "licenses": [
            [u.name, u.total, u.used] for u in license_usage(clusters, gw.jobs.active.values())
        ],
        **_preempt(gw),
    }


def _preempt(gw: Gateway) -> dict[str, Any]:
    """PreemptExemptTime, the site's and each QOS's own, while preemption is on."""
    policy = policy_of(gw)
    cfg = policy.preempter.cfg
    if not cfg.enabled:
        return {}
    qos = {q.name: q.preempt_exempt_s for q in policy.state.qos.values()}
    return {
        "preempt_exempt_s": cfg.exempt_s,
        "qos_preempt_exempt": {k: v for k, v in qos.items() if v is not None},
    }
