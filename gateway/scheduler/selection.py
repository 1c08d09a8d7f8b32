"""Cluster selection: which (cluster, partition) a pending job may run on, in order.

The cluster a job runs on is a decision of the scheduling cycle, not a by-product of the
node it lands on: the cycle asks the registry's `ClusterSelector` for the targets of a job,
then places the job within one target's nodes only. This is the extension point for routing
and bursting (predicted start per cluster, sibling jobs): a selector returns more targets,
or orders them differently; the cycle does not change.

The default, `NamedPartitions`, keeps Slurm's meaning: a job runs in one of the partitions it
named (on every cluster that has one of that name, in configuration order), and a job that
named none runs in the site's default partition, on that partition's cluster only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from gateway.model.cluster import ClusterState
from gateway.model.job import Job
from gateway.scheduler.snapshot import Snapshot

__all__ = ["ClusterSelector", "NamedPartitions", "Target", "default_target"]


@dataclass(frozen=True, slots=True)
class Target:
    """One place a job may start: a partition of one cluster."""

    cluster: str
    partition: str


@runtime_checkable
class ClusterSelector(Protocol):
    """Decides where a job may start, best first (empty: nowhere for now)."""

    def targets(self, job: Job, snap: Snapshot) -> Sequence[Target]: ...


def default_target(clusters: Mapping[str, ClusterState]) -> Target | None:
    """Where a job that names no partition goes: the default partition of the first cluster
    (configuration order) that has partitions. The one rule both submission (which records
    the partition) and the cycle (which picks the cluster) use."""
    for name, cluster in clusters.items():
        default = cluster.default_partition
        if default is not None:
            return Target(name, default.name)
    return None


class NamedPartitions:
    """The partitions the job named, on each cluster that has them; without -p, only the
    default partition's cluster."""

    name = "named-partitions"

    def targets(self, job: Job, snap: Snapshot) -> Sequence[Target]:
        """Every (cluster, partition) the job may use, in the order it named them."""
        if not job.spec.partitions:
            home = default_target(snap.clusters)
            return () if home is None else (home,)
        out: list[Target] = []
        for part in job.spec.partitions:
            for name, cluster in snap.clusters.items():
                if cluster.partition(part) is not None:
                    out.append(Target(name, part))
        return tuple(out)
