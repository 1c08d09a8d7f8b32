"""The scheduling cycle: gates and reasons, gang fit, arrays, backfill."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import replace

from gateway.model.job import Job, RankPlacement
from gateway.model.state import JobState, Reason
from gateway.model.values import GresItem
from gateway.scheduler.builtin import DEFAULT_PLUGINS, FACTORIES
from gateway.scheduler.cycle import run_cycle
from gateway.scheduler.plugins import Registry
from gateway.scheduler.snapshot import DepTarget, NodeFree, Snapshot
from tests.support.builders import make_cluster, make_job

REG = Registry.build(DEFAULT_PLUGINS, FACTORIES)


def snap(
    jobs: Iterable[Job],
    nodes: int = 1,
    cpus: int = 4,
    gpus: int = 0,
    targets: dict[int, tuple[DepTarget, ...]] | None = None,
    now: float | None = None,
    running_tasks: dict[int, int] | None = None,
) -> Snapshot:
    cluster = make_cluster(nodes=nodes, cpus=cpus, gpus=gpus)
    jobs = list(jobs)
    free = {
        n.name: NodeFree(n, n.cpus, n.memory_mb, frozenset(g.index for g in n.gpus))
        for n in cluster.nodes
    }
    running = tuple(j for j in jobs if j.state.is_active)
    for j in running:
        for p in j.placement:
            f = free[p.node]
            free[p.node] = replace(
                f,
                cpus=f.cpus - p.cpus,
                memory_mb=f.memory_mb - p.memory_mb,
                gpus=f.gpus - set(p.gpus),
                jobs=f.jobs + 1,
            )
    return Snapshot(
        now=now or time.time(),
        pending=tuple(j for j in jobs if j.state is JobState.PENDING),
        running=running,
        clusters={"local": cluster},
        free=free,
        dep_targets=targets or {},
        running_tasks=running_tasks or {},
    )


def target(job_id: int, state: JobState, exit_code: int = 0) -> DepTarget:
    return DepTarget(job_id, state, exit_code, time.time() - 10, 1000, "x")


def test_a_job_that_fits_starts_on_the_node():
    result = run_cycle(snap([make_job(1).tasks(2).build()]), REG)
    assert [d.job.job_id for d in result.starts] == [1]
    assert result.starts[0].placement[0].cpus == 2


def test_the_first_job_that_does_not_fit_waits_for_resources_and_later_ones_for_priority():
    jobs = [
        make_job(1).tasks(3).build(),
        make_job(2).tasks(3).build(),
        make_job(3).tasks(3).build(),
    ]
    result = run_cycle(snap(jobs, cpus=4), REG)
    assert [d.job.job_id for d in result.starts] == [1]
    assert result.reasons == {2: Reason.RESOURCES, 3: Reason.PRIORITY}


def test_a_gang_is_placed_whole_or_not_at_all():
    # 3 nodes needed, 2 of the 3 free: nothing may be allocated
    busy = (
        make_job(9)
        .state(
            JobState.RUNNING,
            start_time=time.time(),
            nodes=("n03",),
            num_cpus=4,
            placement=(RankPlacement("n03", 4, 4, 0),),
        )
        .build()
    )
    result = run_cycle(snap([busy, make_job(1).nodes(3).build()], nodes=3), REG)
    assert result.starts == []
    assert result.reasons[1] is Reason.RESOURCES
    result = run_cycle(snap([make_job(1).nodes(2).tasks(4).build()], nodes=2), REG)
    assert [p.node for p in result.starts[0].placement] == ["n01", "n02"]
    assert [p.tasks for p in result.starts[0].placement] == [2, 2]


def test_jobs_beyond_the_partitions_size_wait_with_slurms_partition_reasons():
    # EnforcePartLimits=NO: more nodes, or more CPUs, than the partition has
    jobs = [make_job(1).nodes(3).build(), make_job(2).tasks(9).build(), make_job(3).build()]
    result = run_cycle(snap(jobs, nodes=2), REG)
    assert result.reasons[1] is Reason.PARTITION_NODE_LIMIT
    assert result.reasons[2] is Reason.PARTITION_CONFIG
    assert [d.job.job_id for d in result.starts] == [3]  # they block no one


def test_a_job_submitted_held_that_can_never_fit_waits_with_bad_constraints_once_released():
    released = make_job(1).cpus(5).spec(hold=True).build()  # released: no Job.hold
    result = run_cycle(snap([released]), REG)
    assert result.reasons[1] is Reason.BAD_CONSTRAINTS


def test_held_jobs_and_future_begin_times_wait_with_slurms_reasons():
    later = time.time() + 3600
    jobs = [make_job(1).held().build(), make_job(2).spec(begin=int(later)).build()]
    result = run_cycle(snap(jobs), REG)
    assert result.starts == []
    assert result.reasons == {1: Reason.JOB_HELD_USER, 2: Reason.BEGIN_TIME}


def test_afterok_waits_then_starts_and_never_starts_after_a_failure():
    job = make_job(2).depends("afterok:1").build()
    running = {1: (target(1, JobState.RUNNING),)}
    assert run_cycle(snap([job], targets=running), REG).reasons[2] is Reason.DEPENDENCY
    done = {1: (target(1, JobState.COMPLETED),)}
    assert [d.job.job_id for d in run_cycle(snap([job], targets=done), REG).starts] == [2]
    failed = {1: (target(1, JobState.FAILED, 256),)}
    assert run_cycle(snap([job], targets=failed), REG).never[2] is (
        Reason.DEPENDENCY_NEVER_SATISFIED
    )


def test_afternotok_and_any_of_dependencies():
    job = make_job(3).depends("afternotok:1?afterok:2").build()
    targets = {1: (target(1, JobState.COMPLETED),), 2: (target(2, JobState.RUNNING),)}
    assert run_cycle(snap([job], targets=targets), REG).reasons[3] is Reason.DEPENDENCY
    targets[2] = (target(2, JobState.COMPLETED),)
    assert run_cycle(snap([job], targets=targets), REG).starts


def test_a_dependency_on_a_job_that_no_longer_exists_is_lifted_as_in_slurm():
    job = make_job(2).depends("afterok:999").build()
    assert run_cycle(snap([job]), REG).starts


def test_array_tasks_start_up_to_the_throttle():
    meta = make_job(1).array("0-9%2").tasks(1).build()
    result = run_cycle(snap([meta], cpus=8), REG)
    assert [d.task for d in result.starts] == [0, 1]
    result = run_cycle(snap([meta], cpus=8, running_tasks={1: 2}), REG)
    assert result.starts == []
    assert result.reasons[1] is Reason.JOB_ARRAY_TASK_LIMIT


def test_gpus_are_counted_per_node():
    jobs = [make_job(1).gpus(2).build(), make_job(2).gpus(2).build(), make_job(3).gpus(1).build()]
    result = run_cycle(snap(jobs, gpus=4, cpus=8), REG)
    assert [d.job.job_id for d in result.starts] == [1, 2]
    assert result.starts[0].placement[0].gpus == (0, 1)
    assert result.starts[1].placement[0].gpus == (2, 3)


def test_exclusive_jobs_take_the_whole_node():
    jobs = [make_job(1).exclusive().build(), make_job(2).build()]
    result = run_cycle(snap(jobs, cpus=4), REG)
    assert [d.job.job_id for d in result.starts] == [1]
    assert result.starts[0].placement[0].cpus == 4


def test_exclusive_jobs_hold_every_gpu_of_their_nodes() -> None:
    """slurmctld allocates an --exclusive job every GRES of its nodes (the test cluster's
    AllocTRES: `gres/gpu=4` for `--exclusive -n1` on a 4-GPU node, `gres/gpu=6` for
    `--gpus-per-node=1` on nodes of 2 and 4)."""
    jobs = [make_job(1).exclusive().build(), make_job(2).gpus(1).exclusive().build()]
    result = run_cycle(snap(jobs, nodes=2, gpus=4), REG)
    assert [d.placement[0].gpus for d in result.starts] == [(0, 1, 2, 3), (0, 1, 2, 3)]


def test_backfill_lets_a_short_job_run_when_it_ends_before_the_blocked_job_could_start():
    now = time.time()
    running = (
        make_job(1)
        .tasks(3)
        .time(60)
        .state(
            JobState.RUNNING,
            start_time=now,
            nodes=("n01",),
            num_cpus=3,
            placement=(RankPlacement("n01", 3, 3, 0),),
        )
        .build()
    )
    big = make_job(2).tasks(4).time(60).build()
    short = make_job(3).tasks(1).time(10).build()
    long_ = make_job(4).tasks(1).time(120).build()
    result = run_cycle(snap([running, big, short, long_], cpus=4, now=now), REG)
    assert [d.job.job_id for d in result.starts] == [3]
    assert result.reasons[2] is Reason.RESOURCES
    assert result.reasons[4] is Reason.PRIORITY


def test_tasks_without_a_node_count_spread_over_as_many_nodes_as_they_need():
    """`-n 5` without -N on 2-CPU nodes: Slurm runs it on three nodes, 2,2,1 tasks (real
    Slurm 22.05 on the test cluster: node[02-04], SLURM_TASKS_PER_NODE=1,2(x2) while
    node01 had one CPU busy)."""
    result = run_cycle(snap([make_job(1).tasks(5).build()], nodes=4, cpus=2), REG)
    placement = result.starts[0].placement
    assert [(p.node, p.tasks, p.cpus) for p in placement] == [
        ("n01", 2, 2),
        ("n02", 2, 2),
        ("n03", 1, 1),
    ]
    busy = (
        make_job(9)
        .state(
            JobState.RUNNING,
            start_time=time.time(),
            nodes=("n01",),
            num_cpus=1,
            placement=(RankPlacement("n01", 1, 1, 0),),
        )
        .build()
    )
    result = run_cycle(snap([busy, make_job(1).tasks(5).build()], nodes=4, cpus=2), REG)
    assert sorted(p.tasks for p in result.starts[0].placement) == [1, 2, 2]
    assert sum(p.cpus for p in result.starts[0].placement) == 5
    # more tasks than all free CPUs: the whole gang waits, nothing is taken
    result = run_cycle(snap([busy, make_job(2).tasks(8).build()], nodes=4, cpus=2), REG)
    assert result.starts == []
    assert result.reasons[2] is Reason.RESOURCES
    # with -N the count is fixed: -N 1 -n 5 never fits a 2-CPU node
    fixed = make_job(3).nodes(1).tasks(5).build()
    assert run_cycle(snap([fixed], nodes=4, cpus=2), REG).starts == []


def test_a_node_range_takes_as_many_free_nodes_as_it_may() -> None:
    """-N MIN-MAX as the test cluster places it on idle 2-CPU nodes (slurmctld 22.05):
    `-N1-2 -n3` on two nodes, 2,1; `-N1-4 -n3` on three, a task each; `-N2-4` on all
    four; with only one node free, `-N1-4 -n2` starts there at once and `-N2-4` waits."""

    def layout(job: Job, jobs: Iterable[Job] = ()) -> list[tuple[str, int]] | None:
        result = run_cycle(snap([*jobs, job], nodes=4, cpus=2), REG)
        starts = [d for d in result.starts if d.job.job_id == job.job_id]
        return [(p.node, p.tasks) for p in starts[0].placement] if starts else None

    def ranged(job_id: int, lo: int, hi: int, tasks: int | None = None) -> Job:
        fields: dict[str, object] = {"nodes_min": lo, "nodes_max": hi}
        if tasks is not None:
            fields["ntasks"] = tasks
        return make_job(job_id).spec(**fields).build()

    assert layout(ranged(1, 1, 2, 3)) == [("n01", 2), ("n02", 1)]
    assert layout(ranged(1, 1, 4, 3)) == [("n01", 1), ("n02", 1), ("n03", 1)]
    assert layout(ranged(1, 1, 2, 4)) == [("n01", 2), ("n02", 2)]
    assert layout(ranged(1, 2, 4)) == [("n01", 1), ("n02", 1), ("n03", 1), ("n04", 1)]
    assert layout(ranged(1, 1, 2, 5)) is None  # two 2-CPU nodes at most
    busy = [
        make_job(9 + i)
        .state(
            JobState.RUNNING,
            start_time=time.time(),
            nodes=(f"n0{i + 1}",),
            num_cpus=2,
            placement=(RankPlacement(f"n0{i + 1}", 2, 2, 0),),
        )
        .build()
        for i in range(3)
    ]
    assert layout(ranged(1, 1, 4, 2), busy) == [("n04", 2)]
    assert layout(ranged(1, 2, 4, 2), busy) is None


def test_a_node_with_fewer_tasks_of_the_gang_takes_fewer_cpus():
    """-N 2 -n 3: SLURM_JOB_CPUS_PER_NODE=2,1 on the real test cluster."""
    result = run_cycle(snap([make_job(1).nodes(2).tasks(3).build()], nodes=2, cpus=2), REG)
    assert [(p.tasks, p.cpus) for p in result.starts[0].placement] == [(2, 2), (1, 1)]


def test_tasks_with_gpus_each_spread_as_far_as_each_nodes_gpus_go() -> None:
    """`-n4 --gpus-per-task=1` on nodes of 4 CPUs and 2 GPUs: two tasks a node, two GPUs
    each (the test cluster: node03 and node04 two each); before, every node was asked for
    the four tasks' GPUs and the job never ran."""
    job = make_job(1).tasks(4).build()
    job = replace(job, spec=replace(job.spec, gpus_per_task=(GresItem("gpu", None, 1),)))
    result = run_cycle(snap([job], nodes=3, cpus=4, gpus=2), REG)
    placement = result.starts[0].placement
    assert [(p.node, p.tasks, p.cpus, len(p.gpus)) for p in placement] == [
        ("n01", 2, 2, 2),
        ("n02", 2, 2, 2),
    ]
    more = replace(job, job_id=2, spec=replace(job.spec, ntasks=7))  # six GPUs in all
    assert run_cycle(snap([more], nodes=3, cpus=4, gpus=2), REG).starts == []


def _gpus(job_id: int, count: int, tasks: int | None = None) -> Job:
    job = make_job(job_id).build()
    spec = replace(job.spec, gpus=(GresItem("gpu", None, count),), ntasks=tasks)
    return replace(job, spec=spec)


def test_job_wide_gpus_no_node_holds_go_over_several_nodes() -> None:
    """`--gpus=G` without -N: one node when one holds G (the test cluster: `--gpus=3` on
    node04 alone); else as many nodes as their GPUs need, each given what it has while the
    next ones keep one (`--gpus=6`: node03 2, node04 4), a task each without -n. Before,
    a job no node could hold alone was refused."""
    one = run_cycle(snap([_gpus(1, 2)], nodes=3, cpus=4, gpus=2), REG).starts[0].placement
    assert [(p.node, p.tasks, len(p.gpus)) for p in one] == [("n01", 1, 2)]
    five = run_cycle(snap([_gpus(2, 5)], nodes=3, cpus=4, gpus=2), REG).starts[0].placement
    assert [(p.node, p.tasks, len(p.gpus)) for p in five] == [
        ("n01", 1, 2),
        ("n02", 1, 2),
        ("n03", 1, 1),
    ]
    tasks = run_cycle(snap([_gpus(3, 4, tasks=4)], nodes=3, cpus=4, gpus=2), REG)
    assert [(p.node, p.tasks, len(p.gpus)) for p in tasks.starts[0].placement] == [
        ("n01", 2, 2),
        ("n02", 2, 2),
    ]
    # more GPUs than the nodes have: the job waits whole
    assert run_cycle(snap([_gpus(4, 7)], nodes=3, cpus=4, gpus=2), REG).starts == []


def test_job_wide_gpus_with_a_node_count_are_split_over_those_nodes() -> None:
    """`-N2 --gpus=3`: 2 + 1, as the test cluster gives node03 2 and node04 1 (before: 2
    each, four GPUs allocated for three)."""
    job = _gpus(1, 3)
    job = replace(job, spec=replace(job.spec, nodes_min=2, nodes_max=2))
    placed = run_cycle(snap([job], nodes=3, cpus=4, gpus=2), REG).starts[0].placement
    assert [(p.node, p.tasks, len(p.gpus)) for p in placed] == [("n01", 1, 2), ("n02", 1, 1)]
