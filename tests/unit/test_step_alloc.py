"""Step allocation inside a job (containers/step_alloc.py, step_book.py): the answers the
test cluster gave (tests/differential/test_step_resources_vs_slurm.py runs them live), and
the book's rule that a step whose srun is gone holds nothing."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from containers.step_alloc import Grant, Hold, JobShare, Refused, Spent, StepAsk, pick_step
from containers.step_book import Claimed, StepBook

# one 2-CPU node, DefMemPerCPU=100: the job holds 200 MB there
ONE = JobShare(("node01",), (2,), (200,))
FOUR = JobShare(("node01", "node02", "node03", "node04"), (1, 1, 1, 1), (100,) * 4)


def _ask(tasks: tuple[int, ...], **kw: object) -> StepAsk:
    kw.setdefault("mem_per_cpu", 100)
    n = sum(tasks)
    return StepAsk(tasks, 1, n, **kw)  # type: ignore[arg-type]


def test_a_step_without_exact_takes_the_whole_node_and_the_next_waits() -> None:
    first = pick_step(ONE, [], _ask((1,)))
    assert isinstance(first, Grant)
    assert first.hold == Hold(("node01",), (2,), (200,))
    assert first.alloc_cpus == 2
    assert pick_step(ONE, [first.hold], _ask((1,))) is Refused.BUSY
    assert isinstance(pick_step(ONE, [], _ask((1,))), Grant)  # once it ended


def test_exact_steps_share_the_node_by_cpus() -> None:
    first = pick_step(ONE, [], _ask((1,), whole=False))
    assert isinstance(first, Grant)
    assert first.hold.cpus == (1,)
    assert first.alloc_cpus == 1
    second = pick_step(ONE, [first.hold], _ask((1,), whole=False))
    assert isinstance(second, Grant)
    assert pick_step(ONE, [first.hold, second.hold], _ask((1,), whole=False)) is Refused.BUSY
    assert pick_step(ONE, [first.hold], _ask((2,), whole=False)) is Refused.BUSY


def test_overlap_is_refused_memory_other_steps_hold() -> None:
    held = Hold(("node01",), (2,), (200,))
    # refused once slurmctld has numbered the step: the id is spent
    assert pick_step(ONE, [held], _ask((1,), overlap=True)) == Spent(Refused.MEMORY)
    free = pick_step(ONE, [], _ask((1,), overlap=True))
    assert isinstance(free, Grant)
    assert free.hold.cpus == (0,)
    assert free.hold.mem_mb == (0,)


def test_memory_beyond_the_job_is_refused_at_once_within_it_waits() -> None:
    job = JobShare(("node01",), (2,), (1000,), job_mem_per_node=1000)
    held = Hold(("node01",), (2,), (400,))
    assert pick_step(job, [], _ask((1,), mem_per_cpu=None, mem_per_node=1500)) is Refused.MEMORY
    assert pick_step(job, [held], _ask((1,), mem_per_cpu=None, mem_per_node=400)) is Refused.BUSY
    # a per-CPU job: a step's --mem above the node's share can never fit
    assert pick_step(ONE, [], _ask((2,), mem_per_cpu=None, mem_per_node=3000)) is Refused.MEMORY


def test_steps_take_the_nodes_no_step_uses() -> None:
    first = pick_step(FOUR, [], _ask((1, 1)))
    assert isinstance(first, Grant)
    assert first.hold.nodes == ("node01", "node02")
    second = pick_step(FOUR, [first.hold], _ask((1, 1)))
    assert isinstance(second, Grant)
    assert second.hold.nodes == ("node03", "node04")
    assert pick_step(FOUR, [first.hold, second.hold], _ask((1,))) is Refused.BUSY
    assert pick_step(FOUR, [first.hold], _ask((1, 1, 1))) is Refused.BUSY
    named = pick_step(FOUR, [first.hold], _ask((1,), nodelist=("node02",)))
    assert named is Refused.BUSY


def test_all_nodes_of_a_busy_job_make_the_step_wait() -> None:
    two = JobShare(("node03", "node04"), (1, 1), (100, 100))
    held = Hold(("node03", "node04"), (1, 1), (100, 100))
    assert pick_step(two, [held], _ask((1,))) is Refused.BUSY
    assert pick_step(two, [held], _ask((1, 1))) is Refused.BUSY


def test_without_memory_accounting_only_cpus_count() -> None:
    job = JobShare(("node01",), (2,), None)
    grant = pick_step(job, [], _ask((1,), whole=False, mem_per_cpu=500))
    assert isinstance(grant, Grant)
    assert grant.hold.mem_mb == (0,)


@given(
    cpus=st.lists(st.integers(1, 4), min_size=1, max_size=4),
    held=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4)), max_size=4),
    tasks=st.lists(st.integers(1, 4), min_size=1, max_size=4),
    whole=st.booleans(),
    overlap=st.booleans(),
    mem=st.sampled_from([None, 50, 100, 1000]),
)
def test_grants_never_exceed_the_job(
    cpus: list[int],
    held: list[tuple[int, int]],
    tasks: list[int],
    whole: bool,
    overlap: bool,
    mem: int | None,
) -> None:
    """Whatever runs, a grant never makes the non-overlapping holds exceed the job."""
    nodes = tuple(f"n{i}" for i in range(len(cpus)))
    job = JobShare(nodes, tuple(cpus), tuple(100 * c for c in cpus))
    holds = [Hold((nodes[i % len(nodes)],), (c,), (0,)) for i, c in held]
    tasks = tasks[: len(nodes)]
    if sum(tuple(c for _, c in held)) > sum(cpus):
        return
    ask = StepAsk(tuple(tasks), 1, sum(tasks), (), whole, overlap, mem, None)
    answer = pick_step(job, holds, ask)
    if isinstance(answer, Grant):
        assert len(answer.hold.nodes) == len(tasks)
        for name, c in zip(answer.hold.nodes, answer.hold.cpus, strict=True):
            used = sum(h.cpus[0] for h in holds if h.nodes[0] == name)
            if not overlap and used <= job.cpus[nodes.index(name)]:
                assert used + c <= job.cpus[nodes.index(name)]


def _record(step_id: int, grant: Grant) -> dict[str, object]:
    return {"step_id": str(step_id), "state": "RUNNING", "nodes": list(grant.hold.nodes)}


def test_the_book_claims_in_turn_and_forgets_steps_whose_srun_is_gone(tmp_path: Path) -> None:
    book = StepBook(tmp_path)
    first = book.claim(ONE, _ask((1,)), _record)
    assert isinstance(first, Claimed)
    assert first.step_id == 0
    saved = json.loads(first.record.read_text())
    assert saved["hold"] == {"nodes": ["node01"], "cpus": [2], "mem": [200], "gpus": []}
    refused = book.claim(ONE, _ask((1,)), _record)
    assert refused == (Refused.BUSY, frozenset({0}))
    first.close()  # srun gone (a SIGKILL closes the lock the same way)
    second = book.claim(ONE, _ask((1,)), _record)
    assert isinstance(second, Claimed)
    assert second.step_id == 1
    assert book.snapshot() == frozenset({1})
    # a record that says RUNNING but whose lock nobody holds holds nothing
    (tmp_path / "7.json").write_text(json.dumps({**saved, "step_id": "7"}))
    fd = os.open(tmp_path / ".7.lock", os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as a running srun holds it
    assert book.snapshot() == frozenset({1, 7})
    os.close(fd)
    assert book.snapshot() == frozenset({1})
    (tmp_path / "8.json").write_text("{not json")
    assert book.snapshot() == frozenset({1})
    second.close()


def test_srun_asks_with_the_batch_environment_s_memory_unless_told() -> None:
    from containers.srun_claim import job_share, step_ask
    from containers.srun_layout import allocation_from_env, plan_step
    from containers.step_alloc import megabytes

    def ask(argv: list[str]) -> StepAsk:
        step = plan_step(argv, env)
        return step_ask(step.tasks_per_node, step.cpus_per_task, step.options, (), env)

    env = {
        "SLURM_JOB_ID": "5",
        "SLURM_JOB_NODELIST": "node[01-02]",
        "SLURM_JOB_CPUS_PER_NODE": "2(x2)",
        "SLURM_TASKS_PER_NODE": "1(x2)",
        "SLURM_NNODES": "2",
        "SLURM_NTASKS": "2",
        "SLURM_MEM_PER_CPU": "100",
    }
    alloc = allocation_from_env(env)
    share = job_share(alloc.nodes, alloc.cpus_per_node, env)
    assert share == JobShare(("node01", "node02"), (2, 2), (200, 200))
    plain = ask(["true"])
    assert (plain.mem_per_cpu, plain.mem_per_node, plain.whole) == (100, None, True)
    told = ask(["--mem=1G", "-c", "1", "true"])
    assert (told.mem_per_cpu, told.mem_per_node, told.whole) == (None, 1024, False)
    assert ask(["--exact", "-n1", "true"]).whole is False
    assert [megabytes(t) for t in ("3000", "500K", "2g", "1T", "x", "-1", "")] == [
        3000,
        1,
        2048,
        1 << 20,
        None,
        None,
        None,
    ]


def test_the_pods_size_parser_agrees_with_the_gateway_s() -> None:
    from containers.step_alloc import megabytes
    from gateway.compat.quantity import str_to_mbytes

    for text in ("3000", "500K", "2g", "4GB", "1T", " 7", "+5", "1P", "x", "-1", "", "3 ", "2kb"):
        assert megabytes(text) == str_to_mbytes(text), text


def test_a_step_whose_srun_is_killed_holds_while_its_tasks_run(tmp_path: Path) -> None:
    """srun's tasks inherit the step's lock: SIGKILL on srun leaves the step holding its
    CPUs until the tasks end, as slurmstepd keeps such a step."""
    book = StepBook(tmp_path)
    step = book.claim(ONE, _ask((1,)), _record)
    assert isinstance(step, Claimed)
    task = subprocess.Popen(["sleep", "30"], pass_fds=(step.lock_fd,))
    try:
        os.close(step.lock_fd)  # srun gone without a word (its lock file stays)
        assert book.snapshot() == frozenset({0})
        assert book.claim(ONE, _ask((1,)), _record) == (Refused.BUSY, frozenset({0}))
    finally:
        task.kill()
        task.wait()
    assert book.snapshot() == frozenset()
