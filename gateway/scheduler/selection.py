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

__all__ = ["ClusterSelector", "NamedPartitions", "Routed", "Target", "default_target", "targets_on"]


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

    def __init__(self) -> None:
        # per snapshot (its clusters are fixed), the targets per (clusters, partitions)
        # asked: a cycle asks for every job it tests, and most jobs ask alike
        self._memo: tuple[Snapshot | None, dict[tuple[tuple[str, ...], ...], Sequence[Target]]]
        self._memo = (None, {})

    def targets(self, job: Job, snap: Snapshot) -> Sequence[Target]:
        """Every (cluster, partition) the job may use, in the order it named them (with
        `-M`: on the clusters it names, in that order)."""
        held, memo = self._memo
        if held is not snap:
            memo = {}
            self._memo = (snap, memo)
        key = (job.spec.clusters, job.spec.partitions)
        found = memo.get(key)
        if found is None:
            found = memo[key] = self._targets(job, snap)
        return found

    def _targets(self, job: Job, snap: Snapshot) -> Sequence[Target]:
        by_fold = {name.casefold(): name for name in snap.clusters}  # as Slurm compares them
        named = [by_fold[c.casefold()] for c in job.spec.clusters if c.casefold() in by_fold]
        if [c.casefold() for c in job.spec.clusters] == ["all"]:
            named = []
        if named:
            return tuple(t for c in named for t in targets_on(job, snap.clusters[c], c))
        if not job.spec.partitions:
            home = default_target(snap.clusters)
            return () if home is None else (home,)
        out: list[Target] = []
        for part in job.spec.partitions:
            for name, cluster in snap.clusters.items():
                if cluster.partition(part) is not None:
                    out.append(Target(name, part))
        return tuple(out)


def targets_on(job: Job, cluster: ClusterState, name: str) -> tuple[Target, ...]:
    """The partitions of one cluster a job may use there: those it named that the cluster
    has, else (it named none there) the cluster's default partition."""
    named = tuple(Target(name, p) for p in job.spec.partitions if cluster.partition(p))
    if named:
        return named
    default = cluster.default_partition
    return () if default is None else (Target(name, default.name),)


class Routed:
    """With multi-cluster routing: only the cluster the router chose for the job
    (gateway/control/routing.py); a job not routed yet goes nowhere this cycle."""

    name = "routed"

    def targets(self, job: Job, snap: Snapshot) -> Sequence[Target]:
        """The routed cluster's partitions for the job, or nothing while it is not routed."""
        cluster = None if job.routed_to is None else snap.clusters.get(job.routed_to)
        if cluster is None or job.routed_to is None:
            return ()
        return targets_on(job, cluster, job.routed_to)
