"""`caldera why`: the shortfall behind a pending job's reason, computed with the
scheduler's own fit test on the gateway's free-resource accounting."""

from __future__ import annotations

from dataclasses import replace

from gateway.compat.dependency import parse_dependency
from gateway.control.jobtable import JobTable
from gateway.control.snapshots import free_resources
from gateway.model.cluster import ClusterState, Gpu, Node, Partition
from gateway.model.job import Job, RankPlacement
from gateway.model.state import JobState, Reason
from gateway.scheduler.explain import WhyInput, explain
from gateway.scheduler.snapshot import DepTarget
from tests.support.builders import make_job

GIB = 2**30
NOW = 1_800_000_000.0


def _site() -> ClusterState:
    big = tuple(Gpu(index=i, memory_total=80 * GIB) for i in range(8))
    small = tuple(Gpu(index=i, memory_total=24 * GIB) for i in range(8))
    nodes = (
        Node(
            name="n01",
            cpus=64,
            memory_mb=512_000,
            partitions=("gpu",),
            gres=(("gpu", None, 8),),
            gpus=big,
        ),
        Node(
            name="n02",
            cpus=64,
            memory_mb=512_000,
            partitions=("gpu",),
            gres=(("gpu", None, 8),),
            gpus=small,
        ),
    )
    return ClusterState(
        name="alpha",
        nodes=nodes,
        partitions=(Partition(name="gpu", nodes=("n01", "n02"), default=True),),
    )


def _input(running: list[Job], targets: dict[int, tuple[DepTarget, ...]] | None = None) -> WhyInput:
    clusters = {"alpha": _site()}
    table = JobTable()
    for job in running:
        table[job.job_id] = job
    return WhyInput(
        now=NOW,
        clusters=clusters,
        free=free_resources(table, clusters, frozenset()),
        running=tuple(table.active.values()),
        pending=(),
        dep_targets=targets or {},
        same_user_name=(),
        self_placing=frozenset(),
    )


def _runner(job_id: int, node: str, gpus: tuple[int, ...], minutes: int) -> Job:
    job = make_job(job_id).time(minutes).build()
    return replace(
        job,
        state=JobState.RUNNING,
        partition="gpu",
        cluster="alpha",
        start_time=NOW - 600,
        nodes=(node,),
        placement=(RankPlacement(node, 1, 4, 1000, gpus),),
    )


def _pending(job: Job) -> Job:
    return replace(job, partition="gpu", cluster="alpha", reason=Reason.RESOURCES, time_limit=60)


def test_a_gpu_shortfall_names_the_resource_the_amount_and_when_room_comes() -> None:
    running = [_runner(10, "n01", (0, 1, 2, 3, 4, 5), minutes=30), _runner(11, "n01", (6,), 120)]
    job = _pending(make_job(20).gpus(4).spec(gpu_memory_mb=40 * 1024).build())
    lines = explain(job, _input(running))
    text = "\n".join(lines)
    assert lines[0] == "Job 20 (job20) PENDING Reason=Resources"
    assert "each with 1 cpus, 4 GPUs with >= 40 GiB each" in text
    # n02's GPUs are too small: it never counts; n01 has 1 free GPU of the 4 needed
    assert "alpha/gpu: 0 of 1 nodes have room now, 1 needed" in text
    assert "best node n01: 1 GPUs free (3 short)" in text
    # job 10 ends 20 minutes from now (600 s run of a 30 min limit) and frees 6 GPUs
    assert "when job 10 ends (its time limit)" in text
    assert "(in 20 min)" in text


def test_the_backfill_plan_s_expected_start_is_shown() -> None:
    job = replace(_pending(make_job(24).gpus(2).build()), sched_start=NOW + 3600, sched_nodes="n01")
    text = "\n".join(explain(job, _input([])))
    assert "backfill plan: expected to start at " in text
    assert "(in 60 min) on n01" in text


def test_a_gang_larger_than_the_capable_nodes_says_so_and_why() -> None:
    job = _pending(make_job(21).nodes(2).gpus(2).spec(gpu_memory_mb=40 * 1024).build())
    text = "\n".join(explain(job, _input([])))
    assert "only 1 of 2 nodes could ever take a share, 2 needed" in text
    assert "1 node(s) has 0 such GPUs" in text


def test_a_job_that_fits_now_is_said_to_start_at_the_next_cycle() -> None:
    job = _pending(make_job(22).gpus(2).build())
    text = "\n".join(explain(job, _input([])))
    assert (
        "2 of 2 nodes have room now, 1 needed (it can start at the next scheduling cycle)" in text
    )


def test_dependencies_show_each_target_and_whether_it_can_still_be_met() -> None:
    dep = parse_dependency("afterok:7,afterany:8")
    job = replace(_pending(make_job(23).build()), reason=Reason.DEPENDENCY)
    job = replace(job, spec=replace(job.spec, dependency=dep))
    targets = {
        7: (DepTarget(7, JobState.FAILED, 256, NOW - 50, 1000, "a"),),
        8: (DepTarget(8, JobState.RUNNING, 0, NOW - 50, 1000, "b"),),
    }
    text = "\n".join(explain(job, _input([], targets)))
    assert "afterok:7: can never be met (job 7: FAILED)" in text
    assert "afterany:8: waiting (job 8: RUNNING)" in text
    assert "(all must hold)" in text


def test_a_running_job_is_not_explained_as_waiting() -> None:
    job = _runner(30, "n01", (0,), 10)
    assert explain(job, _input([job])) == [
        "Job 30 (job30) RUNNING Reason=None",
        "  runs on n01 in alpha/gpu",
    ]
