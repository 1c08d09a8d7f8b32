"""What Caldera's records show while jobs wait and run, as slurmctld's do (the differences
tests/differential/test_running_vs_slurm.py found): EligibleTime of a job waiting for
resources, AccrueTime and LastSchedEval, SchedNodeList, an array's record order in
`scontrol show job <array>`, and the virtual nodes' CPU load."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from gateway.api.node_routes import machine_load
from gateway.cli.node_view import nodes_view
from gateway.cli.scontrol_cmd import array_order
from gateway.compat.job_list_order import list_order
from gateway.compat.job_times import own_extras
from gateway.compat.show_fmt import show_job
from gateway.compat.sinfo_fmt import SinfoOptions, render_sinfo
from gateway.model.codec import node_to_dict, partition_to_dict
from gateway.model.job import Hold, Job
from gateway.model.state import JobState, Reason
from gateway.scheduler.cycle import CycleResult
from gateway.scheduler.plan import apply_plan, eligible_since
from tests.support.builders import make_cluster, make_job

T0 = 1_790_000_000.0


def _pending(job_id: int, reason: Reason = Reason.RESOURCES) -> Job:
    return replace(make_job(job_id).build(), submit_time=T0, reason=reason)


def _field(text: str, key: str) -> str:
    got = re.search(rf"\b{re.escape(key)}=(\S*)", text)
    assert got, f"{key} not in {text}"
    return got.group(1)


def _stamp(t: float) -> str:
    from gateway.compat.fmt_common import make_time_str

    return make_time_str(t)


def test_a_job_waiting_for_resources_is_eligible_from_that_cycle_on() -> None:
    got = eligible_since(_pending(1), T0 + 2)
    assert got.eligible_time == T0 + 2
    assert eligible_since(got, T0 + 9).eligible_time == T0 + 2  # set once


@pytest.mark.parametrize(
    "reason", [Reason.DEPENDENCY, Reason.BEGIN_TIME, Reason.JOB_HELD_USER, Reason.NONE]
)
def test_a_job_not_yet_eligible_keeps_no_eligible_time(reason: Reason) -> None:
    assert eligible_since(_pending(1, reason), T0 + 2).eligible_time is None


def test_a_held_job_is_not_eligible_whatever_its_reason() -> None:
    held = replace(_pending(1, Reason.PRIORITY), hold=Hold.USER)
    assert eligible_since(held, T0 + 2).eligible_time is None


def test_the_cycle_sets_eligible_time_on_the_records_it_leaves_waiting() -> None:
    waiting = _pending(3, Reason.PRIORITY)
    out, _ = apply_plan([waiting], [waiting], lambda _i: waiting, CycleResult(now=T0 + 5))
    assert [j.eligible_time for j in out] == [T0 + 5]


def test_show_job_of_a_waiting_job_prints_eligible_accrue_eval_and_planned_nodes() -> None:
    job = replace(_pending(4), eligible_time=T0 + 1, sched_start=T0 + 600, sched_nodes="n02")
    text = show_job(job, now=T0 + 30)
    assert _field(text, "EligibleTime") == _stamp(T0 + 1)
    assert _field(text, "AccrueTime") == _stamp(T0 + 1)
    assert _field(text, "LastSchedEval") == _stamp(T0)  # evaluated at submission
    assert _field(text, "SchedNodeList") == "n02"


def test_show_job_of_a_running_job_was_last_evaluated_when_it_started() -> None:
    job = replace(
        _pending(5), state=JobState.RUNNING, reason=Reason.NONE, eligible_time=T0,
        start_time=T0 + 7, nodes=("n01",),
    )  # fmt: skip
    text = show_job(job, now=T0 + 30)
    assert _field(text, "LastSchedEval") == _stamp(T0 + 7)
    assert _field(text, "AccrueTime") == _stamp(T0)
    assert "SchedNodeList" not in text


def test_held_and_array_records_accrue_nothing() -> None:
    held = replace(_pending(6, Reason.JOB_HELD_USER), hold=Hold.USER)
    assert own_extras(held, T0 + 1).accrue_time is None
    task = replace(_pending(7), array_job_id=7, array_task_id=0, eligible_time=T0)
    assert own_extras(task, T0 + 1).accrue_time is None


def test_extras_from_slurmctld_are_shown_as_given() -> None:
    from gateway.compat.fmt_common import JobExtras

    job = replace(_pending(8), eligible_time=T0)
    text = show_job(job, now=T0 + 30, extras=JobExtras())
    assert _field(text, "AccrueTime") == "Unknown"  # slurmctld said so: not derived


def test_an_arrays_records_come_meta_first_then_newest_task_first() -> None:
    def task(job_id: int, task_id: int) -> Job:
        return replace(_pending(job_id), array_job_id=3, array_task_id=task_id)

    jobs = [task(4, 0), task(7, 1), task(8, 2), task(3, 3)]
    assert [j.job_id for j in array_order(jobs, 3)] == [3, 8, 7, 4]
    plain = [_pending(5)]
    assert array_order(plain, 5) == plain


def test_the_local_sites_nodes_report_this_machines_load() -> None:
    cluster = make_cluster(nodes=2, cpus=2)
    raw = [
        {**node_to_dict(n), "state": n.state.long, "cpu_load": 123, "cluster": "c"}
        for n in cluster.nodes
    ]
    doc = {"nodes": raw, "partitions": [partition_to_dict(p) for p in cluster.partitions]}
    state, extras = nodes_view(doc)
    assert {e.cpu_load for e in extras.values()} == {123}
    opts = SinfoOptions(node_view=True, format="%N %O")
    text = render_sinfo(state, opts, now=T0, node_extras=extras)
    assert text.splitlines()[1:] == ["n01 1.23", "n02 1.23"]
    assert 0 <= machine_load() < 100_000


def test_split_tasks_sit_where_slurmctlds_list_keeps_them() -> None:
    """Jobs 604..608 with array 606 whose tasks split off as 609, 610 and 611 (its last task
    kept 606): `scontrol show job` on Slurm 22.05 listed 604 605 609 607 608 610 611 606."""

    def task(job_id: int, task_id: int) -> Job:
        return replace(_pending(job_id), array_job_id=606, array_task_id=task_id)

    jobs = [_pending(604), _pending(605), task(606, 3), _pending(607), _pending(608)]
    jobs += [task(609, 0), task(610, 1), task(611, 2)]
    assert [j.job_id for j in list_order(jobs)] == [604, 605, 609, 607, 608, 610, 611, 606]
    plain = [_pending(2), _pending(1)]
    assert list_order(plain) == plain  # nothing split: the order given
