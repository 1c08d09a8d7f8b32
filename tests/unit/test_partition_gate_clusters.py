"""The partition gate on a site of several clusters that share a partition name.

A partition that two clusters have (home's `debug` and a burst cluster's `debug`) admits
a job when one of them could hold it: home's single node is not the limit of a 2-node job
the router may send to the bigger cluster. Once routed, the chosen cluster's partition is
the one judged (found by the Kubernetes federation e2e test: a 2-node job waited with
PartitionNodeLimit for home's 1-node partition while the burst cluster was idle).
"""

from __future__ import annotations

import time
from dataclasses import replace

from gateway.model.state import Reason
from gateway.scheduler.builtin import PartitionGate
from gateway.scheduler.snapshot import Snapshot
from tests.support.builders import make_cluster, make_job


def _snap(*jobs: object) -> Snapshot:
    return Snapshot(
        now=time.time(),
        pending=tuple(jobs),  # type: ignore[arg-type]
        running=(),
        clusters={
            "home": make_cluster(nodes=1, name="home"),
            "burst": make_cluster(nodes=4, name="burst"),
        },
        free={},
        dep_targets={},
        running_tasks={},
    )


def test_a_partition_of_two_clusters_admits_what_one_of_them_can_hold() -> None:
    job = make_job(1).nodes(2).build()
    assert PartitionGate().check(job, _snap(job)).ok


def test_the_routed_clusters_partition_is_the_one_judged() -> None:
    job = replace(make_job(1).nodes(2).build(), routed_to="home")
    assert PartitionGate().check(job, _snap(job)).reason is Reason.PARTITION_NODE_LIMIT
    to_burst = replace(job, routed_to="burst")
    assert PartitionGate().check(to_burst, _snap(to_burst)).ok


def test_a_job_no_cluster_can_hold_gets_the_first_clusters_reason() -> None:
    job = make_job(1).nodes(5).build()
    assert PartitionGate().check(job, _snap(job)).reason is Reason.PARTITION_NODE_LIMIT
