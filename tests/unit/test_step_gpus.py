"""GPUs between a job's steps (containers/step_alloc.py, srun_claim.py, srun_layout.py): what
the test cluster (Slurm 22.05.8, node03 gpu:2, node04 gpu:a100:4, fake /dev/nvidia*) did,
and the rule behind it: a step holds its GPUs, the lowest of the job's that no other step
holds, and a step with no GPU option takes the job's own. tests/differential/
test_step_gpus_vs_slurm.py runs the same scripts on both."""

from __future__ import annotations

from pathlib import Path

from hypothesis import assume, given
from hypothesis import strategies as st

from containers.srun_claim import JOB_GPUS_VAR, JobGpus, gpu_ask, gpu_env, job_gpus
from containers.srun_layout import SrunExit, plan_step
from containers.step_alloc import GpuAsk, Grant, Hold, JobShare, Refused, Spent, StepAsk, pick_step
from containers.step_book import Claimed, StepBook

# node04 with its four GPUs and two CPUs, memory not tracked
FOUR_GPUS = JobShare(("node04",), (2,), None, gpus=((0, 1, 2, 3),))
TWO_NODES = JobShare(("node03", "node04"), (2, 2), None, gpus=((0, 1), (0, 1)))


def _ask(tasks: tuple[int, ...], gpu: GpuAsk | None, **kw: object) -> StepAsk:
    kw.setdefault("whole", False)
    return StepAsk(tasks, 1, sum(tasks), gpu=gpu, **kw)  # type: ignore[arg-type]


def test_steps_get_their_own_gpus_and_wait_for_them_overlap_does_not() -> None:
    first = pick_step(FOUR_GPUS, [], _ask((1,), GpuAsk(per_node=2)))
    assert isinstance(first, Grant)
    second = pick_step(FOUR_GPUS, [first.hold], _ask((1,), GpuAsk(per_node=2)))
    assert isinstance(second, Grant)
    assert (first.gpus, second.gpus) == (((0, 1),), ((2, 3),))
    held = [first.hold, second.hold]
    # CPUs are all taken too; an --overlap step is held back by neither and holds nothing
    assert pick_step(FOUR_GPUS, held, _ask((1,), GpuAsk(per_node=1))) is Refused.BUSY
    over = pick_step(FOUR_GPUS, held, _ask((1,), GpuAsk(per_node=1), overlap=True))
    assert isinstance(over, Grant)
    assert (over.gpus, over.hold.gpus) == (((0,),), ())


def test_a_step_waits_for_the_gpus_even_with_cpus_free() -> None:
    job = JobShare(("node03",), (2,), None, gpus=((0, 1),))
    whole = pick_step(job, [], _ask((1,), GpuAsk(per_node=2)))
    assert isinstance(whole, Grant)
    # srun -n1 --exact with no GPU option: the job's gpu:2, which the first step holds
    assert pick_step(job, [whole.hold], _ask((1,), GpuAsk(per_node=2))) is Refused.BUSY
    assert pick_step(job, [whole.hold], _ask((1,), GpuAsk(per_node=1))) is Refused.BUSY
    alone = pick_step(job, [whole.hold], _ask((1,), None))  # --gres=none
    assert isinstance(alone, Grant)
    assert alone.gpus == ()


def test_a_per_step_count_leaves_one_for_each_node_still_to_come() -> None:
    spread = pick_step(TWO_NODES, [], _ask((1, 1), GpuAsk(per_step=3)))
    assert isinstance(spread, Grant)
    assert spread.gpus == ((0, 1), (0,))  # as the cluster gave srun --gpus=3 on two nodes
    assert pick_step(TWO_NODES, [], _ask((1, 1), GpuAsk(per_step=5))) is Refused.INVALID_GRES
    one = JobShare(("node04",), (2,), None, gpus=((0, 1),))
    assert pick_step(one, [], _ask((1,), GpuAsk(per_step=3))) is Refused.INVALID_GRES


def test_gpus_per_task_limit_the_tasks_a_node_can_take() -> None:
    one = JobShare(("node04",), (2,), None, gpus=((0, 1),))
    # srun -n2 --gpus-per-task=2 in a gpu:a100:2 job: "More processors requested than permitted"
    assert pick_step(one, [], _ask((2,), GpuAsk(per_task=2))) is Refused.TOO_MANY_CPUS
    each = pick_step(one, [], _ask((2,), GpuAsk(per_task=1)))
    assert isinstance(each, Grant)
    assert each.gpus == ((0, 1),)


def test_gpus_are_ignored_when_the_job_s_are_unknown() -> None:
    job = JobShare(("node01",), (2,), None)
    grant = pick_step(job, [], _ask((1,), GpuAsk(per_node=8)))
    assert isinstance(grant, Grant)
    assert grant.gpus == ()


@given(
    held=st.lists(st.sets(st.integers(0, 3), max_size=4), max_size=3),
    per_node=st.integers(0, 4),
    per_task=st.integers(0, 2),
    per_step=st.integers(0, 5),
    tasks=st.integers(1, 2),
    overlap=st.booleans(),
)
def test_granted_gpus_are_the_job_s_and_free_unless_overlapping(
    held: list[set[int]], per_node: int, per_task: int, per_step: int, tasks: int, overlap: bool
) -> None:
    gpu = GpuAsk(per_node, per_task, per_step)
    assume(gpu != GpuAsk())  # (srun asks for no GPUs then)
    holds = [Hold(("node04",), (0,), (0,), (tuple(sorted(h)),)) for h in held]
    answer = pick_step(FOUR_GPUS, holds, _ask((tasks,), gpu, overlap=overlap))
    taken = set().union(*held) if held else set()
    if isinstance(answer, Grant):
        (mine,) = answer.gpus
        assert set(mine) <= {0, 1, 2, 3}
        assert len(mine) == (per_node or per_task * tasks or per_step)
        if not overlap:
            assert not set(mine) & taken
            assert answer.hold.gpus == answer.gpus
    else:
        assert answer in (Refused.BUSY, Refused.INVALID_GRES, Refused.TOO_MANY_CPUS)


def test_a_refusal_after_numbering_spends_the_step_id(tmp_path: Path) -> None:
    job = JobShare(("node01",), (2,), (200,))
    book = StepBook(tmp_path)
    first = book.claim(job, StepAsk((1,), 1, 1, whole=False, mem_per_cpu=100), _record)
    second = book.claim(job, StepAsk((1,), 1, 1, whole=False, mem_per_cpu=100), _record)
    assert isinstance(first, Claimed)
    assert isinstance(second, Claimed)
    over = StepAsk((1,), 1, 1, overlap=True, mem_per_cpu=100)
    assert pick_step(job, [first.grant.hold, second.grant.hold], over) == Spent(Refused.MEMORY)
    assert book.claim(job, over, _record) == (Refused.MEMORY, frozenset({0, 1}))
    assert book.claim(job, over, _record)[0] is Refused.MEMORY  # type: ignore[index]
    first.close()
    second.close()
    third = book.claim(job, over, _record)
    assert isinstance(third, Claimed)
    assert third.step_id == 4  # as sacct numbers them on the cluster: 2 and 3 were spent
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["0.json", "1.json", "4.json"]
    third.close()


def _record(step_id: int, grant: Grant) -> dict[str, object]:
    return {"step_id": str(step_id), "state": "RUNNING"}


def test_srun_reads_its_gpu_options_as_slurmctld_takes_them() -> None:
    job = JobGpus("a100", per_node=4, nodes={"node04": (0, 1, 2, 3)})
    assert gpu_ask({}, job) == GpuAsk(per_node=4)  # the job's own
    assert gpu_ask({"gres": "gpu:a100:2"}, job) == GpuAsk(per_node=2)
    assert gpu_ask({"gres": "gpu"}, job) == GpuAsk(per_node=1)
    assert gpu_ask({"gres": "none"}, job) is None
    assert gpu_ask({"gres": "gpu:0"}, job) is None
    assert gpu_ask({"gpus": "3"}, job) == GpuAsk(per_step=3)
    assert gpu_ask({"gpus-per-task": "1", "gres": "gpu:2"}, job) == GpuAsk(2, 1)
    assert gpu_ask({}, JobGpus(per_job=3, nodes={"a": (0,)})) == GpuAsk(per_step=3)
    # an --exclusive job holds its nodes' GPUs without asking: its steps take none
    assert gpu_ask({}, JobGpus(nodes={"node03": (0, 1)})) is None
    assert job_gpus({JOB_GPUS_VAR: job.render()}) == job
    for bad in ("", "{", "[]", '{"nodes": {"a": [-1]}}', '{"nodes": {}, "per_node": "2"}'):
        assert job_gpus({JOB_GPUS_VAR: bad}) is None
    assert gpu_env((2, 3))["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert gpu_env((2, 3))["SLURM_GPUS_ON_NODE"] == "2"
    assert gpu_env(()) == {}


def _refusal(argv: list[str], job: JobGpus) -> list[str]:
    env = {
        "SLURM_JOB_ID": "9",
        "SLURM_JOB_NODELIST": ",".join(job.nodes),
        "SLURM_JOB_CPUS_PER_NODE": f"2(x{len(job.nodes)})",
        "SLURM_TASKS_PER_NODE": f"1(x{len(job.nodes)})",
        "SLURM_NNODES": str(len(job.nodes)),
        "SLURM_JOB_GPUS": "0,1",
        JOB_GPUS_VAR: job.render(),
    }
    try:
        plan_step([*argv, "true"], env)
    except SrunExit as exc:
        return list(exc.lines)
    return []


def test_step_gpu_requests_beyond_the_job_s_are_refused_with_slurmctld_s_words() -> None:
    invalid = "srun: error: Unable to create step for job 9: " + Refused.INVALID_GRES.value
    plain = JobGpus(None, per_node=2, nodes={"node03": (0, 1)})
    assert _refusal(["-n1", "--gres=gpu:3"], plain) == [
        "srun: error: Step requested gres_per_node=gpu:3 is more than the job's "
        "gres_per_node=gpu:2",
        invalid,
    ]
    assert _refusal(["-n1", "--gres=gpu:a100:1"], plain) == [
        "srun: error: Step requested GRES (gpu:a100) not found in the job",
        invalid,
    ]
    typed = JobGpus("a100", per_node=2, nodes={"node04": (0, 1)})
    assert _refusal(["-n1", "--gres=gpu:v100:1"], typed)[0].endswith(
        "(gpu:v100) not found in the job"
    )
    assert _refusal(["-n1", "--gres=gpu:1"], typed) == []
    two = JobGpus(None, per_node=2, nodes={"node03": (0, 1), "node04": (0, 1)})
    assert _refusal(["-N2", "-n2", "--gpus=1"], two) == [
        "srun: error: Step requested gres=gpu:1 is less than the requested min nodes=2",
        invalid,
    ]
    per_job = JobGpus(None, per_job=3, nodes={"node03": (0, 1), "node04": (0,)})
    assert _refusal(["-N2", "-n2", "--gpus=5"], per_job)[0] == (
        "srun: error: Step requested gres=gpu:5 is more than the job's gres=gpu:3"
    )


def test_a_steps_gres_is_kept_as_slurmctld_keeps_it() -> None:
    """squeue -s %b on the test cluster: `--gres=gpu:1` -> gres:gpu:1; `--gpus=1`, none
    or `--gres=none` -> (null)."""
    from containers.srun_claim import tres_per_node

    assert tres_per_node({"gres": "gpu:1"}) == "gres:gpu:1"
    assert tres_per_node({"gres": "gpu:a100:2,gres/craynetwork:1"}) == (
        "gres:gpu:a100:2,gres/craynetwork:1"
    )
    assert tres_per_node({"gpus": "1"}) is None
    assert tres_per_node({"gres": "none"}) is None
    assert tres_per_node({}) is None
