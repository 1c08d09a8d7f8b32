"""The cluster a job runs on is a decision of the cycle (cluster selection), not of the node
it lands on: a job without -p runs only on the default partition's cluster, however free
another cluster is; a job naming a partition runs on the cluster that has it."""

from __future__ import annotations

import time
from dataclasses import replace

from gateway.model.cluster import ClusterState, Node, Partition
from gateway.model.job import Job
from gateway.model.state import Reason
from gateway.scheduler.builtin import DEFAULT_PLUGINS, FACTORIES
from gateway.scheduler.cycle import run_cycle
from gateway.scheduler.plugins import Registry
from gateway.scheduler.selection import NamedPartitions, Target, default_target
from gateway.scheduler.snapshot import NodeFree, Snapshot
from tests.support.builders import make_cluster, make_job

REG = Registry.build(DEFAULT_PLUGINS, FACTORIES)


def _slurm(partition: str = "batch", default: bool = True) -> ClusterState:
    """A Slurm-like cluster of two big nodes (one partition, its default)."""
    names = ("node01", "node02")
    return ClusterState(
        name="hpc",
        nodes=tuple(
            Node(name=n, cpus=64, memory_mb=256000, partitions=(partition,)) for n in names
        ),
        partitions=(Partition(name=partition, nodes=names, default=default),),
    )


def _snap(
    jobs: list[Job], clusters: dict[str, ClusterState], busy: tuple[str, ...] = ()
) -> Snapshot:
    free = {
        n.name: NodeFree(n, 0 if n.name in busy else n.cpus, n.memory_mb, frozenset())
        for c in clusters.values()
        for n in c.nodes
    }
    return Snapshot(now=time.time(), pending=tuple(jobs), running=(), clusters=clusters, free=free)


def test_job_without_partition_waits_for_its_home_cluster_though_another_is_free() -> None:
    clusters = {"local": make_cluster(cpus=4), "hpc": _slurm(partition="debug")}
    job = make_job(1).cpus(2).build()  # no -p: the partition recorded at submit is "debug"
    assert not job.spec.partitions
    result = run_cycle(_snap([job], clusters, busy=("n01",)), REG)
    assert result.starts == []
    assert result.reasons[1] is Reason.RESOURCES
    result = run_cycle(_snap([job], clusters), REG)
    [decision] = result.starts
    assert (decision.cluster, decision.partition) == ("local", "debug")
    assert [p.node for p in decision.placement] == ["n01"]


def test_job_too_big_for_home_cluster_never_lands_on_another_cluster() -> None:
    clusters = {"local": make_cluster(cpus=4), "hpc": _slurm()}
    job = make_job(1).cpus(32).build()
    result = run_cycle(_snap([job], clusters), REG)
    assert result.starts == []
    assert 1 in result.reasons


def test_named_partition_selects_its_cluster() -> None:
    clusters = {"local": make_cluster(cpus=4), "hpc": _slurm()}
    job = make_job(1).cpus(32).spec(partitions=("batch",)).build()
    job = replace(job, partition="batch")
    [decision] = run_cycle(_snap([job], clusters), REG).starts
    assert (decision.cluster, decision.partition) == ("hpc", "batch")
    assert decision.placement[0].node == "node01"


def test_partition_list_tries_targets_in_named_order() -> None:
    clusters = {"local": make_cluster(cpus=4), "hpc": _slurm()}
    job = make_job(1).cpus(2).spec(partitions=("batch", "debug")).build()
    job = replace(job, partition="batch,debug")
    snap = _snap([job], clusters)
    assert list(NamedPartitions().targets(job, snap)) == [
        Target("hpc", "batch"),
        Target("local", "debug"),
    ]
    [decision] = run_cycle(snap, REG).starts
    assert decision.cluster == "hpc"
    busy = _snap([job], clusters, busy=("node01", "node02"))
    [decision] = run_cycle(busy, REG).starts
    assert (decision.cluster, decision.partition) == ("local", "debug")


def test_minus_M_pins_a_job_to_the_clusters_it_names() -> None:
    """Without a routing table, `-M hpc` runs only on hpc (its default partition when the
    job names none there), as Slurm sends the job to that cluster's controller."""
    clusters = {"local": make_cluster(cpus=4), "hpc": _slurm()}
    job = make_job(1).cpus(2).spec(clusters=("HPC",)).build()  # names compare without case
    snap = _snap([job], clusters)
    assert list(NamedPartitions().targets(job, snap)) == [Target("hpc", "batch")]
    busy = _snap([job], clusters, busy=("node01", "node02"))
    assert run_cycle(busy, REG).starts == []  # waits for hpc though local is free
    every = replace(job, spec=replace(job.spec, clusters=("all",)))
    assert list(NamedPartitions().targets(every, snap)) == [Target("local", "debug")]


def test_default_target_is_first_cluster_with_a_partition() -> None:
    assert default_target({"local": make_cluster(), "hpc": _slurm()}) == Target("local", "debug")
    assert default_target({"hpc": _slurm(), "local": make_cluster()}) == Target("hpc", "batch")
    assert default_target({}) is None
