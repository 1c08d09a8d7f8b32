"""Licences as slurmctld schedules them. The request syntax facts were checked with real
`sbatch --hold -L ...` on the test cluster (Licenses=cscratch1:1000,SCRATCH:1000,cfs:1000,
matlab:8): `matlab:2;cfs`, `matlab:`, `matlab:0` and `matlab,matlab` are accepted;
`matlab:9`, `matlab:1,matlab:8`, `MATLAB`, `:2`, `matlab*2` and `matlab|cfs` are "Invalid
license specification". The end-to-end behaviour is compared with real Slurm in
tests/differential/test_site_vs_slurm.py.
"""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.compat.show_lic import show_licenses
from gateway.model.cluster import ClusterState
from gateway.model.job import Job, RankPlacement
from gateway.model.state import JobState, Reason
from gateway.scheduler.builtin import DEFAULT_PLUGINS, FACTORIES
from gateway.scheduler.cycle import run_cycle
from gateway.scheduler.licenses import (
    license_request,
    license_usage,
    valid_request,
)
from gateway.scheduler.plugins import Registry
from gateway.scheduler.snapshot import NodeFree, Snapshot
from tests.support.builders import make_cluster, make_job

SITE = replace(
    make_cluster(nodes=2, cpus=4),
    licenses=(("cscratch1", 1000), ("SCRATCH", 1000), ("cfs", 1000), ("matlab", 8)),
)


@pytest.mark.parametrize("text", ["matlab:2;cfs", "matlab:", "matlab:0", "matlab,matlab", "cfs"])
def test_requests_slurm_accepts(text: str) -> None:
    assert valid_request(text, [SITE])


@pytest.mark.parametrize(
    "text", ["matlab:9", "matlab:1,matlab:8", "MATLAB", ":2", "matlab*2", "matlab|cfs", "a b"]
)
def test_requests_slurm_refuses(text: str) -> None:
    assert not valid_request(text, [SITE])


def test_a_site_without_licences_refuses_any_but_a_self_counting_cluster_judges_itself() -> None:
    bare = replace(SITE, licenses=())
    assert not valid_request("cfs", [bare])
    assert valid_request("cfs", [bare, replace(SITE, licenses=None)])


def test_the_same_name_twice_adds_up() -> None:
    assert license_request("matlab:2,cfs,matlab") == {"matlab": 3, "cfs": 1}


@given(st.text(max_size=40))
def test_any_request_text_is_read_or_refused_without_a_traceback(text: str) -> None:
    req = license_request(text)
    assert req is None or all(count >= 0 for count in req.values())
    valid_request(text, [SITE])


def _snap(jobs: list[Job], cluster: ClusterState = SITE) -> Snapshot:
    free = {n.name: NodeFree(n, n.cpus, n.memory_mb, frozenset()) for n in cluster.nodes}
    running = tuple(j for j in jobs if j.state.is_active)
    for j in running:
        for p in j.placement:
            f = free[p.node]
            free[p.node] = replace(f, cpus=f.cpus - p.cpus, jobs=f.jobs + 1)
    return Snapshot(
        now=time.time(),
        pending=tuple(j for j in jobs if j.state is JobState.PENDING),
        running=running,
        clusters={"local": cluster},
        free=free,
    )


def _running(job_id: int, licenses: str) -> Job:
    return (
        make_job(job_id)
        .spec(licenses=licenses)
        .state(
            JobState.RUNNING,
            start_time=time.time(),
            placement=(RankPlacement(node="n01", tasks=1, cpus=1, memory_mb=0),),
        )
        .build()
    )


REG = Registry.build(DEFAULT_PLUGINS, FACTORIES)


def test_a_job_waits_with_reason_licenses_while_they_are_held() -> None:
    jobs = [_running(1, "matlab:8"), make_job(2).spec(licenses="matlab:1,cfs:3").build()]
    result = run_cycle(_snap(jobs), REG)
    assert result.reasons[2] is Reason.LICENSES
    assert not result.starts


def test_licences_are_free_again_once_their_job_ends() -> None:
    ended = replace(_running(1, "matlab:8"), state=JobState.COMPLETED)
    jobs = [ended, make_job(2).spec(licenses="matlab:1,cfs:3").build()]
    result = run_cycle(_snap(jobs), REG)
    assert [d.job.job_id for d in result.starts] == [2]


def test_two_jobs_never_start_on_the_same_licences_in_one_cycle() -> None:
    jobs = [make_job(i).spec(licenses="matlab:5").build() for i in (1, 2)]
    result = run_cycle(_snap(jobs), REG)
    assert [d.job.job_id for d in result.starts] == [1]
    assert result.reasons[2] is Reason.LICENSES


def test_the_tasks_of_an_array_each_take_their_licences() -> None:
    """The gates run once per job but an array starts several tasks in one cycle: each
    further task takes its licences again (8 matlab, 5 per task: one task runs)."""
    jobs = [make_job(1).array("0-3").spec(licenses="matlab:5").build()]
    result = run_cycle(_snap(jobs), REG)
    assert [d.task for d in result.starts] == [0]
    assert result.reasons[1] is Reason.LICENSES


def test_jobs_without_licences_are_not_held_back() -> None:
    jobs = [_running(1, "matlab:8"), make_job(2).build()]
    assert [d.job.job_id for d in run_cycle(_snap(jobs), REG).starts] == [2]


def test_usage_counts_running_jobs_in_slurmctlds_name_order() -> None:
    uses = license_usage([SITE], [_running(1, "matlab:3,cfs"), _running(2, "matlab:2")])
    assert [u.name for u in uses] == ["SCRATCH", "cfs", "cscratch1", "matlab"]
    assert {u.name: u.used for u in uses} == {"SCRATCH": 0, "cfs": 1, "cscratch1": 0, "matlab": 5}


def test_show_licenses_picks_one_name_or_says_none_is_configured() -> None:
    uses = license_usage([SITE], [])
    one = show_licenses(uses, "matlab", one_liner=True)
    assert one.count("\n") == 1
    assert one.startswith("LicenseName=matlab Total=8 Used=0 Free=8")
    assert show_licenses(uses, "nosuch", one_liner=False) == ""
    assert show_licenses([], None, one_liner=False) == "No licenses configured in Slurm.\n"
