"""The structures that keep a cycle cheap must not change what it decides: the shared
release timeline, the per-spec request memo, and the short path for the jobs behind a
blocked one once bf_max_job_test is spent."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from gateway.model.job import Job, RankPlacement
from gateway.model.state import JobState, Reason
from gateway.scheduler.bf_params import BackfillParams
from gateway.scheduler.bf_timeline import Releases, Use, give_back
from gateway.scheduler.builtin import DEFAULT_PLUGINS, FACTORIES
from gateway.scheduler.cycle import run_cycle
from gateway.scheduler.plugins import Registry
from gateway.scheduler.request import node_request, on_partitions, spec_request
from gateway.scheduler.snapshot import NodeFree, Snapshot
from tests.support.builders import make_cluster, make_job

NOW = 1_800_000_000.0  # a multiple of 60 s
MIN = 60.0


def _use(end: float, cpus: int = 1) -> Use:
    return Use(NOW - MIN, end, cpus, 0, frozenset(), False)


def test_releases_step_through_ends_on_the_resolution_grid_and_stop_at_the_horizon() -> None:
    cluster = make_cluster(nodes=2, cpus=4)
    a, b = (n.name for n in cluster.nodes)
    now_free = {n.name: NodeFree(n, 0, n.memory_mb, frozenset(), 0, 2) for n in cluster.nodes}
    ends = [
        (NOW + 30, 0, a, _use(NOW + 30, 2)),  # rounds up to NOW + 60
        (NOW + 60, 1, a, _use(NOW + 60, 2)),  # same step: a is whole again
        (NOW + 200, 2, b, _use(NOW + 200, 2)),  # NOW + 240
        (NOW + 9000, 3, b, _use(NOW + 9000, 2)),  # past the horizon
    ]
    rel = Releases(
        ends, [], NOW, 60, NOW + 3600, now_free.__getitem__, lambda n, t0, t1: now_free[n]
    )
    first, second = rel.step(0), rel.step(1)
    assert first is not None
    assert second is not None
    assert first[0] == NOW + 60
    assert [n for n, _ in first[1]] == [a, a]
    assert first[1][0][1].cpus == 2
    assert first[1][1][1].cpus == 4
    assert first[1][1][1] == give_back(give_back(now_free[a], ends[0][3]), ends[1][3])
    assert second[0] == NOW + 240
    assert [n for n, _ in second[1]] == [b]
    assert rel.step(2) is None
    assert rel.step(5) is None
    assert rel.step(0) is first  # kept for the next search


def test_spec_request_is_node_request_with_its_own_nodelist_and_is_kept_per_spec() -> None:
    job = make_job(1).nodes(2).cpus(3).spec(nodelist="n[01-02]").build()
    req = spec_request(job.spec)
    assert req == node_request(job.spec, ("n01", "n02"))
    assert spec_request(job.spec) is req
    other = replace(job.spec, cpus_per_task=5)
    assert spec_request(other).cpus == 5 * spec_request(other).tasks_per_node[0]
    one = on_partitions(req, ("debug",))
    assert one.partitions == ("debug",)
    assert replace(one, partitions=req.partitions) == req
    assert on_partitions(req, ("debug",)) is one


def _running(job_id: int, nodes: tuple[str, ...], minutes_left: int) -> Job:
    b = make_job(job_id).nodes(len(nodes)).exclusive().time(minutes_left + 5)
    placement = tuple(RankPlacement(n, 1, 1, 0) for n in nodes)
    return b.state(
        JobState.RUNNING,
        start_time=NOW - 5 * MIN,
        nodes=nodes,
        num_cpus=len(nodes),
        placement=placement,
    ).build()


def _snapshot(running: list[Job], pending: list[Job], nodes: int, **kw: object) -> Snapshot:
    cluster = make_cluster(nodes=nodes, cpus=1)
    free = {n.name: NodeFree(n, n.cpus, n.memory_mb, frozenset()) for n in cluster.nodes}
    for job in running:
        for p in job.placement:
            free[p.node] = replace(free[p.node], cpus=0, memory_mb=0, exclusive_jobs=1, jobs=1)
    return Snapshot(
        now=NOW,
        pending=tuple(pending),
        running=tuple(running),
        clusters={"local": cluster},
        free=free,
        **kw,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("seed", range(12))
def test_the_top_jobs_reservation_is_the_first_end_that_frees_enough_nodes(seed: int) -> None:
    """Against counting: single-cpu nodes held whole, so the top job can start at the
    first running job's end (on the bf_resolution grid) by which enough nodes are idle."""
    rng = random.Random(seed)
    size = 16
    names = [f"n{i:02d}" for i in range(1, size + 1)]
    running, at = [], 0
    while at < size - rng.randint(0, 3):
        width = min(rng.randint(1, 4), size - at)
        running.append(_running(100 + at, tuple(names[at : at + width]), rng.randint(1, 90)))
        at += width
    idle = size - at
    width = rng.randint(idle + 1, size)
    top = make_job(1).nodes(width).time(30).build()
    snap = _snapshot(running, [top], size)
    reg = Registry.build(DEFAULT_PLUGINS, FACTORIES)
    reg.backfill = BackfillParams(resolution_s=60)
    result = run_cycle(snap, reg)
    free_by, expected = idle, None
    for job in sorted(running, key=lambda j: j.time_limit):
        free_by += len(job.nodes)
        if free_by >= width:
            expected = NOW + (job.time_limit - 5) * MIN
            break
    assert result.starts == []
    assert result.planned[1].start == expected
    assert len(result.planned[1].nodes) == width


def test_jobs_behind_the_test_budget_wait_for_priority_or_their_array_throttle() -> None:
    """Slurm: a job past bf_max_job_test is not looked at (Priority), but an array whose
    throttle is reached says so (JobArrayTaskLimit)."""
    running = [_running(100, ("n01", "n02"), 60)]
    wide = make_job(1).nodes(4).time(30).build()
    tested = make_job(2).nodes(3).time(30).build()
    throttled = make_job(3).array("0-3%1").time(10).build()
    plain = make_job(4).time(10).build()
    snap = _snapshot(running, [wide, tested, throttled, plain], 4, running_tasks={3: 1})
    reg = Registry.build(DEFAULT_PLUGINS, FACTORIES)
    reg.backfill = BackfillParams(max_job_test=1)
    result = run_cycle(snap, reg)
    assert result.starts == []
    assert result.reasons[1] is Reason.RESOURCES
    assert result.reasons[2] is Reason.PRIORITY  # tested: blocked behind the top job
    assert result.reasons[3] is Reason.JOB_ARRAY_TASK_LIMIT
    assert result.reasons[4] is Reason.PRIORITY  # never tested, though it would fit
