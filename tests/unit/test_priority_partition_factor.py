"""priority/multifactor's partition factor: each partition's PriorityJobFactor over the
highest of the site's (`part_ptr->norm_priority`, read_config.c), times
PriorityWeightPartition, the raw factor under PriorityFlags=NO_NORMAL_PART; read from
slurm.conf's PartitionName lines and caldera.toml's [[partitions]] priority_job_factor."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gateway.control.site_tables import site_value
from gateway.control.slurm_conf import parse_slurm_conf
from gateway.model.cluster import ClusterState
from gateway.policy.model import PolicyState
from gateway.policy.priority import PriorityConfig
from gateway.policy.refresh import compute_priorities
from tests.support.builders import make_cluster, make_job

CFG = PriorityConfig(type="priority/multifactor", weight_partition=2000)
EMPTY = PolicyState("c", {}, {}, {}, (), 1, 1)


def _site() -> dict[str, ClusterState]:
    base = make_cluster(nodes=2)
    low = replace(base.partitions[0], name="low", priority_job_factor=10)
    high = replace(base.partitions[0], name="high", default=False, priority_job_factor=30)
    return {"c": replace(base, partitions=(low, high))}


@pytest.mark.parametrize(("cfg", "low", "high"), [
    (CFG, 666.666, 2000.0),  # 10/30 and 30/30 of the weight
    (replace(CFG, no_normal_part=True), 20000.0, 60000.0),
])  # fmt: skip
def test_the_partition_factor_is_normalised_to_the_highest(
    cfg: PriorityConfig, low: float, high: float
) -> None:
    jobs = [replace(make_job(1).build(), partition="low"),
            replace(make_job(2).build(), partition="high")]  # fmt: skip
    got = compute_priorities(jobs, EMPTY, {}, _site(), cfg, now=0.0)
    assert got[1].partition == pytest.approx(low, abs=0.001)
    assert got[2].partition == pytest.approx(high)
    assert (got[1].priority, got[2].priority) == (int(low), int(high))


def test_priority_job_factor_is_read_from_slurm_conf_and_caldera_toml() -> None:
    conf = parse_slurm_conf(
        "NodeName=n[1-2] CPUs=2\nPartitionName=a Nodes=n1 PriorityJobFactor=7 Default=YES\n"
        "PartitionName=b Nodes=n2\n"
    )
    assert [p.priority_job_factor for p in conf.partitions] == [7, 1]  # 1: Slurm's default
    parts = site_value("partitions", [{"name": "a", "priority_job_factor": 5}, {"name": "b"}])
    assert [p.priority_job_factor for p in parts] == [5, 1]
    with pytest.raises(ValueError, match="priority_job_factor"):
        site_value("partitions", [{"name": "a", "priority_job_factor": -1}])
