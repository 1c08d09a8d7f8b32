"""Suspension: the record's clocks replayed against lifecycles recorded on real Slurm 22.05
(tests/data/slurm_suspend_22.05.json), the refusals and their messages, what backend
reports do to a suspended job, PreemptMode=SUSPEND's settings, and a cycle starting a
preemptor on its stopped victims' room."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from gateway.backend import capabilities_of
from gateway.compat.show_fmt import show_job
from gateway.compat.slurm_errors import SlurmErrno
from gateway.control.suspend import refusal
from gateway.control.transitions import after_event, ended, requeued
from gateway.model.backend import BackendEvent, EventKind
from gateway.model.job import Job
from gateway.model.state import JobState
from gateway.model.suspension import (
    SUSPENDED_BY_OPERATOR,
    caldera_suspended,
    expected_end,
    resumed,
    run_seconds,
    suspended,
    suspended_seconds,
)
from gateway.policy.preempt_rules import Mode, mode_text, parse_mode, preempt_config
from gateway.scheduler.builtin import DEFAULT_PLUGINS, FACTORIES
from gateway.scheduler.cycle import run_cycle
from gateway.scheduler.plugins import Registry
from gateway.scheduler.preempt import Preemption
from tests.unit.test_preempt_victims import _pending, _running
from tests.unit.test_scheduler_cycle import snap

DATA = json.loads((Path(__file__).parents[1] / "data" / "slurm_suspend_22.05.json").read_text())
REG = Registry.build(DEFAULT_PLUGINS, FACTORIES)


def _field(text: str, key: str) -> str:
    m = re.search(rf"\b{key}=(\S+)", text)
    assert m, f"{key} not in {text!r}"
    return m.group(1)


def _hms(text: str) -> int:
    h, m, s = (int(x) for x in text.split(":"))
    return h * 3600 + m * 60 + s


def _epoch(stamp: str) -> float:
    """A recorded scontrol time, in the recording machine's zone (UTC)."""
    from datetime import UTC

    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC).timestamp()


def _job(start: float, limit_s: int) -> Job:
    run = _running(1, {"n01": 1}, priority=100, started=start)
    return replace(run, time_limit=limit_s // 60)


def _replay(record: dict[str, Any], by: int) -> list[tuple[dict[str, Any], Job, float]]:
    """Each recorded step applied to a record: (step, record after it, when)."""
    job = _job(record["start"], record["time_limit"])
    out = []
    for step in record["steps"]:
        at = float(step["at"])
        if step["do"] == "suspend" or "suspended" in step["do"]:
            job = suspended(job, at, by)
        elif step["do"] == "resume" or "resumed" in step["do"]:
            job = resumed(job, at, priority=100)
        else:
            job = ended(job, JobState.CANCELLED, at)
        out.append((step, job, at))
    return out


def test_an_operators_suspends_and_resumes_keep_slurms_clocks() -> None:
    rec = DATA["operator_lifecycle"]
    for step, job, at in _replay(rec, SUSPENDED_BY_OPERATOR):
        show = step.get("show", "")
        if "SecsPreSuspend" in show:
            assert job.pre_sus_time == int(_field(show, "SecsPreSuspend"))
            assert job.suspend_time == _epoch(_field(show, "SuspendTime"))
            assert expected_end(job, rec["time_limit"]) == _epoch(_field(show, "EndTime"))
        if job.state is JobState.SUSPENDED:
            assert run_seconds(job, at + 30) == _hms(_field(show, "RunTime"))
            assert job.priority == 0  # held for the operator
        if "sacct_json_time" in step:
            want = step["sacct_json_time"]
            assert suspended_seconds(job, at) == want["suspended"]
            assert run_seconds(job, at) == want["elapsed"]
            assert want["end"] - want["start"] - suspended_seconds(job, at) == want["elapsed"]


def test_a_preemptions_suspend_keeps_the_priority_and_the_same_clocks() -> None:
    rec = DATA["preempt_suspend_lifecycle"]
    job = _job(rec["victim_start"], rec["time_limit"])
    stop, resume, cancel = (float(s["at"]) for s in rec["steps"])
    job = suspended(job, stop, by=rec["preemptor"])
    show = rec["steps"][0]["show_584"]
    assert (job.pre_sus_time, job.priority) == (int(_field(show, "SecsPreSuspend")), 100)
    assert caldera_suspended(job)
    assert job.suspended_by == rec["preemptor"]
    job = resumed(job, resume, priority=job.priority)
    after = rec["steps"][1]["show_584"]
    assert expected_end(job, rec["time_limit"]) == _epoch(_field(after, "EndTime"))
    assert run_seconds(job, _epoch("2026-11-26T06:40:51")) == _hms(_field(after, "RunTime"))
    job = ended(job, JobState.CANCELLED, cancel)
    victim_row = rec["steps"][2]["sacct"][0].split("|")
    assert suspended_seconds(job, cancel) == _hms(victim_row[4])
    assert run_seconds(job, cancel) == _hms(victim_row[3])


def test_show_job_prints_the_suspension_fields() -> None:
    rec = DATA["operator_lifecycle"]
    step, job, at = _replay(rec, SUSPENDED_BY_OPERATOR)[0]
    text = show_job(job, now=at + 30)
    for key in ("JobState", "RunTime", "SuspendTime", "SecsPreSuspend", "EndTime", "Priority"):
        assert _field(text, key) == _field(step["show"], key)


def test_a_job_ended_while_suspended_counts_its_last_pause() -> None:
    job = suspended(_job(1000.0, 300), 1010.0, SUSPENDED_BY_OPERATOR)
    out = ended(job, JobState.CANCELLED, 1025.0)
    rec = DATA["ended_while_suspended"]
    assert out.end_time == job.suspend_time  # EndTime=SuspendTime, as recorded
    assert run_seconds(out, 2000.0) == job.pre_sus_time == 10
    assert suspended_seconds(out, 2000.0) == 0 == _hms(rec["sacct"].split("|")[3])
    again = requeued(job, 1030.0)
    assert (again.suspend_time, again.pre_sus_time, again.suspended_s) == (None, 0, 0)


def test_backend_reports_do_not_resume_a_job_the_gateway_stopped() -> None:
    job = suspended(_job(1000.0, 300), 1010.0, SUSPENDED_BY_OPERATOR)
    seen = BackendEvent(job_id=1, kind=EventKind.STARTED, time=1020.0, state=JobState.RUNNING)
    assert after_event(job, seen, True, 1020.0) is None
    done = BackendEvent(job_id=1, kind=EventKind.FINISHED, time=1030.0, state=JobState.CANCELLED)
    out = after_event(job, done, True, 1030.0)
    assert out is not None
    assert (out.state, out.end_time, out.suspended_s) == (JobState.CANCELLED, 1010.0, 0)
    # a Slurm backend's own SUSPENDED job (not the gateway's) mirrors Slurm's state
    theirs = replace(job, suspended_by=None)
    assert not caldera_suspended(theirs)
    back = after_event(theirs, seen, True, 1020.0)
    assert back is not None
    assert back.state is JobState.RUNNING


def _recorded(what: str, user: str = "root") -> str:
    return str(
        next(
            r["stderr"] for r in DATA["refusals"] if r["argv"].endswith(what) and r["user"] == user
        )
    )


@pytest.mark.parametrize(
    ("state", "resume", "recorded"),
    [
        (JobState.PENDING, False, "suspend 579"),
        (JobState.PENDING, True, "resume 579"),
        (JobState.COMPLETED, False, "suspend 580"),
        (JobState.COMPLETED, True, "resume 580"),
        (JobState.RUNNING, True, "resume 578"),
    ],
)
def test_refusals_are_slurms(state: JobState, resume: bool, recorded: str) -> None:
    err = refusal(replace(_job(1000.0, 300), state=state), resume)
    assert err is not None
    job_id = recorded.split()[-1]
    assert f"{err.text} for job {job_id}\n" == _recorded(recorded)


def test_running_and_suspended_jobs_may_be_suspended() -> None:
    job = _job(1000.0, 300)
    assert refusal(job, False) is None
    stopped = suspended(job, 1010.0, 7)
    assert refusal(stopped, False) is None
    assert refusal(stopped, True) is None
    # suspended again by an operator: held (Priority 0), and the operator's from then on
    held = suspended(stopped, 1020.0, SUSPENDED_BY_OPERATOR)
    assert (held.priority, held.suspended_by, held.suspend_time) == (0, 0, 1010.0)
    assert SlurmErrno.UNEXPECTED_MSG.text + " for job 999999\n" == _recorded(
        "suspend 999999", "tester"
    )


def test_only_a_backend_with_suspend_and_resume_has_the_capability() -> None:
    class Stops:
        def suspend(self, job: Job) -> None: ...

        def resume(self, job: Job) -> None: ...

    class Cannot:
        def suspend(self, job: Job) -> None: ...

    assert capabilities_of(Stops()).suspends is not None  # type: ignore[arg-type]
    assert capabilities_of(Cannot()).suspends is None  # type: ignore[arg-type]


def test_preempt_mode_suspend_needs_gang_and_partition_prio() -> None:
    conf = DATA["config_checks"]
    with pytest.raises(ValueError, match="PreemptMode=SUSPEND requires GANG too"):
        preempt_config({"preempt_type": "preempt/partition_prio", "preempt_mode": "SUSPEND"})
    assert "requires GANG too" in conf[0]["slurmctld"]
    ok = preempt_config({"preempt_type": "preempt/partition_prio", "preempt_mode": "SUSPEND,GANG"})
    assert ok.mode is Mode.SUSPEND
    assert f"PreemptMode={mode_text(ok.mode)}" in conf[2]["scontrol show partition lo"]
    with pytest.raises(ValueError, match="preempt/qos"):  # slurmctld would oversubscribe
        preempt_config({"preempt_type": "preempt/qos", "preempt_mode": "SUSPEND,GANG"})
    assert parse_mode("partition lo", "GANG,SUSPEND") is Mode.SUSPEND
    assert parse_mode("partition lo", "SUSPEND") is Mode.SUSPEND  # a partition's own mode


def _preempt_snap(victim_state: JobState) -> tuple[Any, Job, Job]:
    victim = replace(_running(1, {"n01": 4}, priority=1), state=victim_state)
    pre = replace(_pending(9, 4), priority=100)
    return snap([victim, pre], nodes=1, cpus=4), victim, pre


def test_a_preemptor_starts_on_its_stopped_victims_room_and_not_before() -> None:
    s, victim, _ = _preempt_snap(JobState.RUNNING)
    rules = Preemption(lambda p, v: v.job_id == 1, s.running, ending={9: frozenset({1})})
    waiting = run_cycle(s, REG, rules)
    assert (waiting.preempt, waiting.starts) == ({9: (1,)}, [])  # victim not stopped yet
    s, victim, _pre = _preempt_snap(JobState.SUSPENDED)
    rules = Preemption(
        lambda p, v: v.job_id == 1,
        s.running,
        ending={9: frozenset({1})},
        stopped=frozenset({1}),
    )
    started = run_cycle(s, REG, rules)
    assert [d.job.job_id for d in started.starts] == [9]
    assert not started.preempt
    assert started.starts[0].placement[0].node == "n01"
    # no other job may take the stopped victim's room, and nobody else preempts it
    other = replace(_pending(10, 4), priority=50)
    s2 = snap([replace(victim, state=JobState.SUSPENDED), other], nodes=1, cpus=4)
    rules = Preemption(
        lambda p, v: True, s2.running, ending={9: frozenset({1})}, stopped=frozenset({1})
    )
    result = run_cycle(s2, REG, rules)
    assert not result.starts
    assert not result.preempt


@pytest.mark.parametrize(
    ("lines", "fragment"),
    [
        ("PreemptType=preempt/partition_prio\nPreemptMode=SUSPEND", "requires GANG too"),
        ("PreemptType=preempt/qos\nPreemptMode=SUSPEND,GANG", "preempt/qos"),
    ],
)
def test_slurm_conf_suspend_settings_stop_the_gateway_naming_them(
    tmp_path: Path, lines: str, fragment: str
) -> None:
    from gateway.control.config import ConfigError, load_config

    conf = tmp_path / "slurm.conf"
    conf.write_text(f"ClusterName=s\n{lines}\nNodeName=n01 CPUs=2 RealMemory=100\n")
    (tmp_path / "caldera.toml").write_text(f'[local]\nslurm_conf = "{conf}"\n')
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path)
    assert fragment in str(err.value)


def test_slurm_conf_suspend_gang_shows_as_slurmctld_prints_it(tmp_path: Path) -> None:
    from gateway.control.config import load_config
    from gateway.control.site import local_cluster

    conf = tmp_path / "slurm.conf"
    conf.write_text(
        "ClusterName=s\nPreemptType=preempt/partition_prio\nPreemptMode=SUSPEND,GANG\n"
        "NodeName=n01 CPUs=2 RealMemory=100\n"
        "PartitionName=lo Nodes=ALL Default=YES\nPartitionName=hi Nodes=ALL PriorityTier=5\n"
    )
    (tmp_path / "caldera.toml").write_text(f'[local]\nslurm_conf = "{conf}"\n')
    lo, _ = local_cluster(load_config(tmp_path)).partitions
    recorded = DATA["config_checks"][2]["scontrol show partition lo"]
    assert f"PreemptMode={lo.preempt_mode}" in recorded
