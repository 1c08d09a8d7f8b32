"""Submission against a site described as slurm.conf describes it: EnforcePartLimits,
partition DefMemPerCPU and OverSubscribe=EXCLUSIVE.

EnforcePartLimits follows slurmctld 22.05's `_part_access_check` and `_valid_job_part`
(src/slurmctld/job_mgr.c): CPUs beyond the partition's are "More processors requested than
permitted", nodes beyond its size or its MaxNodes (compared with the job's maximum)
"Node count specification invalid", a time beyond MaxTime "Requested time limit is
invalid"; ALL refuses at the first partition that fails, ANY only when every one fails
(with the last one's error). With NO the job is accepted and waits (compared with the real
cluster in tests/differential/test_submit_limits_vs_slurm.py and test_site_vs_slurm.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from gateway.compat.slurm_errors import SlurmErrno
from gateway.compat.verify import SubmitError
from gateway.control.site import check_request, partition_defaults
from gateway.model.cluster import ClusterState, Partition
from gateway.model.jobspec import JobSpec, Sharing
from tests.support.builders import make_cluster

BASE = make_cluster(nodes=4, cpus=2, memory_mb=2000)
NAMES = tuple(n.name for n in BASE.nodes)


def _site(enforce: str) -> dict[str, ClusterState]:
    parts = (
        Partition(name="small", nodes=NAMES[:2], max_nodes=1, max_time=10, default=True),
        Partition(name="wide", nodes=NAMES),
        Partition(name="mem", nodes=NAMES, def_mem_per_cpu_mb=300, oversubscribe="EXCLUSIVE"),
        Partition(name="short", nodes=NAMES, max_time=5),
    )
    return {"local": replace(BASE, partitions=parts, enforce_part_limits=enforce)}


def _errno(spec: JobSpec, parts: tuple[str, ...], enforce: str) -> SlurmErrno | None:
    try:
        check_request(spec, parts, _site(enforce), 0, fit=not spec.hold)
    except SubmitError as exc:
        return exc.errno
    return None


SPEC = JobSpec(name="x", workdir="/tmp")


@pytest.mark.parametrize(
    ("fields", "errno"),
    [
        ({"nodes_min": 2}, SlurmErrno.INVALID_NODE_COUNT),
        ({"nodes_min": 1, "nodes_max": 2}, SlurmErrno.INVALID_NODE_COUNT),
        ({"nodes_min": 3}, SlurmErrno.INVALID_NODE_COUNT),
        ({"time_limit": 11}, SlurmErrno.INVALID_TIME_LIMIT),
        ({"ntasks": 5}, SlurmErrno.TOO_MANY_REQUESTED_CPUS),
        ({"nodes_min": 1, "time_limit": 10}, None),
    ],
)
def test_enforce_all_refuses_what_the_partition_would_not_admit(
    fields: dict[str, Any], errno: SlurmErrno | None
) -> None:
    spec = replace(SPEC, hold=True, **fields)
    assert _errno(spec, ("small",), "ALL") == errno
    assert _errno(spec, ("small",), "ANY") == errno
    assert _errno(spec, ("small",), "NO") is None


def test_any_accepts_when_one_partition_admits_and_all_does_not() -> None:
    spec = replace(SPEC, nodes_min=2, hold=True)
    assert _errno(spec, ("small", "wide"), "ANY") is None
    assert _errno(spec, ("small", "wide"), "ALL") is SlurmErrno.INVALID_NODE_COUNT


def test_any_refuses_with_the_last_partitions_error_when_none_admits() -> None:
    spec = replace(SPEC, nodes_min=3, time_limit=11, hold=True)
    assert _errno(spec, ("small", "short"), "ANY") is SlurmErrno.INVALID_TIME_LIMIT
    assert _errno(spec, ("short", "small"), "ANY") is SlurmErrno.INVALID_NODE_COUNT
    assert _errno(spec, ("small", "short"), "ALL") is SlurmErrno.INVALID_NODE_COUNT
    assert _errno(spec, ("small", "wide"), "ANY") is None


def test_an_unknown_node_name_is_reported_before_partition_limits() -> None:
    spec = replace(SPEC, nodes_min=2, nodelist="nosuch")
    assert _errno(spec, ("small",), "ALL") is SlurmErrno.INVALID_NODE_NAME


def test_a_partitions_defaults_are_stored_in_the_job() -> None:
    site = _site("NO")
    spec = partition_defaults(SPEC, ("mem",), site)
    assert spec.mem_per_cpu_mb == 300
    assert spec.sharing is Sharing.EXCLUSIVE
    asked = partition_defaults(replace(SPEC, mem_per_node_mb=50), ("mem",), site)
    assert (asked.mem_per_cpu_mb, asked.mem_per_node_mb) == (None, 50)
    assert partition_defaults(SPEC, ("wide",), site) == SPEC


def test_a_drained_or_inactive_partition_takes_no_job_unless_another_named_does() -> None:
    site = _site("NO")
    for state in ("DRAIN", "INACTIVE"):
        parts = (replace(site["local"].partitions[0], state=state), *site["local"].partitions[1:])
        drained = {"local": replace(site["local"], partitions=parts)}
        spec = replace(SPEC, hold=True)
        with pytest.raises(SubmitError) as err:
            check_request(spec, ("small",), drained, 0, fit=False)
        assert err.value.errno is SlurmErrno.PARTITION_NOT_AVAIL
        check_request(spec, ("small", "wide"), drained, 0, fit=False)


def test_excluded_nodes_are_names_of_the_site_and_leave_room_for_the_request() -> None:
    """-x as slurmctld checks it at submission (the test cluster, four 2-CPU nodes)."""
    spec = replace(SPEC, exclude="n01")
    assert _errno(spec, ("wide",), "NO") is None
    assert _errno(replace(spec, nodes_min=4), ("wide",), "NO") is (
        SlurmErrno.REQUESTED_NODE_CONFIG_UNAVAILABLE
    )
    assert _errno(replace(spec, ntasks=7), ("wide",), "NO") is (
        SlurmErrno.REQUESTED_NODE_CONFIG_UNAVAILABLE
    )
    assert _errno(replace(spec, nodelist="n01"), ("wide",), "NO") is SlurmErrno.INVALID_NODE_NAME
    assert _errno(replace(SPEC, exclude="nosuch"), ("wide",), "NO") is SlurmErrno.INVALID_NODE_NAME


def test_tmp_asks_each_node_for_its_tmp_disk_and_says_why_it_cannot() -> None:
    site = _site("NO")
    disk = {
        "local": replace(
            site["local"], nodes=tuple(replace(n, tmp_disk_mb=500) for n in site["local"].nodes)
        )
    }
    check_request(replace(SPEC, tmp_mb=500), ("wide",), disk, 0)
    with pytest.raises(SubmitError) as refused:
        check_request(replace(SPEC, tmp_mb=501), ("wide",), disk, 0)
    assert refused.value.errno is SlurmErrno.REQUESTED_NODE_CONFIG_UNAVAILABLE
    assert "Temporary disk specification can not be satisfied" in str(refused.value)
