"""How a preempted run ends and is recorded, as the burst cluster showed it
(tests/data/slurm_preempt_22.05.json): COMPLETING while KillWait runs with EndTime =
PreemptTime = the kill, then PREEMPTED with the batch shell's status (sacct's job row 0:0);
a REQUEUE victim's ended run kept as PREEMPTED at its kill; PreemptEligibleTime in
`scontrol show job` only while preemption is on.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import replace
from types import SimpleNamespace
from typing import Any, cast

from gateway.backend.capabilities import Capabilities, PreemptsRuns
from gateway.compat.job_fields import SiteDefaults, preempt_line, slurm_time
from gateway.compat.sacct_fmt_fields import accounted_exit_code
from gateway.compat.show_fmt import show_job
from gateway.compat.squeue_fmt import SqueueOptions, render_squeue
from gateway.control.preemption import Preempter, _Victim
from gateway.control.transitions import ended, requeued
from gateway.model.job import Job
from gateway.model.state import JobState
from gateway.policy.preempt_rules import Mode, PreemptConfig
from gateway.store.attempts import finished_attempt
from gateway.store.base import StoredEvent
from tests.support.builders import make_job

T0 = 1_795_687_000.0


class _Runs:
    """A backend that ends preempted runs itself (the local runner's ability)."""

    def __init__(self) -> None:
        self.asked: list[int] = []
        self.status: int | None = None

    def preempt_run(self, job: Job, at: float) -> None:
        self.asked.append(job.job_id)

    def preempted_status(self, job: Job) -> int | None:
        return self.status

    def end_attempt(self, job: Job, requeue: bool = False) -> None:
        self.asked.append(-job.job_id)


def _preempter(victim: Job, runs: _Runs) -> tuple[Preempter, dict[str, Any]]:
    jobs = {victim.job_id: victim}
    stored: dict[str, Any] = {"kinds": []}

    async def commit(batch: Any) -> None:
        stored["kinds"].extend(e.kind for e in batch.events)

    async def commit_or_log(updates: list[Job], kind: str, **detail: object) -> None:
        for job in updates:
            jobs[job.job_id] = job
        if updates:  # as the gateway's: nothing to store, no event
            stored["kinds"].append(kind)

    assert isinstance(runs, PreemptsRuns)
    caps = Capabilities(preempts_runs=runs, ends_attempts=runs)
    gw = SimpleNamespace(
        jobs=jobs,
        clusters={},
        caps={},
        config=SimpleNamespace(job_requeue=True, time_scale=1.0, kill_wait_s=5),
        capabilities=lambda job: caps,
        clock=lambda: stored.get("now", T0),
        remember=lambda job: jobs.__setitem__(job.job_id, job),
        committer=SimpleNamespace(commit=commit),
        commit_or_log=commit_or_log,
        ended=lambda job, state, code=0: ended(job, state, stored.get("now", T0), code),
        requeued=lambda job, wait=False: requeued(job, stored.get("now", T0), 121 if wait else 0),
        ended_runs=lambda keys: None,
        metrics=SimpleNamespace(preempted=lambda cluster, mode: None),
        wake=lambda: None,
    )
    pre = Preempter(cast(Any, gw), PreemptConfig("preempt/partition_prio"), lambda: None)
    pre._recovered = pre._graces_read = True  # nothing to read back after a restart
    return pre, stored


def test_a_killed_victim_shows_completing_then_preempted_with_its_shells_status() -> None:
    victim = make_job(1).state(JobState.RUNNING).build()
    victim = replace(victim, start_time=T0 - 30, preempt_time=T0 - 8)
    runs = _Runs()
    pre, stored = _preempter(victim, runs)
    pre.victims[1] = _Victim(1, 0, 2, Mode.CANCEL, T0)

    asyncio.run(pre.tick())  # the grace is over: asked to end, COMPLETING
    job = pre.gw.jobs[1]
    assert runs.asked == [1]
    assert (job.state, job.end_time, job.preempt_time) == (JobState.COMPLETING, T0, T0)
    assert stored["kinds"] == ["preempt-kill"]

    stored["now"] = T0 + 4
    asyncio.run(pre.tick())  # KillWait running, no report yet: nothing changes
    assert pre.gw.jobs[1].state is JobState.COMPLETING

    runs.status = 9  # SIGKILLed after KillWait (its TERM trap kept it running)
    stored["now"] = T0 + 5.2
    asyncio.run(pre.tick())
    job = pre.gw.jobs[1]
    assert runs.asked == [1, -1]  # the end confirmed before it is recorded
    assert (job.state, job.exit_code) == (JobState.PREEMPTED, 9)
    assert (job.end_time, job.preempt_time) == (T0, T0)  # the kill, not the end of KillWait
    assert accounted_exit_code(job) == 0  # sacct's job row: PREEMPTED 0:0
    assert 1 not in pre.victims


def test_a_victim_that_never_reports_is_ended_after_kill_wait_and_a_margin() -> None:
    victim = replace(make_job(1).state(JobState.RUNNING).build(), start_time=T0 - 30)
    runs = _Runs()
    pre, _ = _preempter(victim, runs)
    pre.victims[1] = _Victim(1, 0, 2, Mode.CANCEL, T0)
    asyncio.run(pre.tick())
    pre.gw.clock = lambda: T0 + 9.9
    asyncio.run(pre.tick())
    assert pre.gw.jobs[1].state is JobState.COMPLETING
    pre.gw.clock = lambda: T0 + 10.0
    asyncio.run(pre.tick())
    assert (pre.gw.jobs[1].state, pre.gw.jobs[1].exit_code) == (JobState.PREEMPTED, 15)


def test_a_requeued_victims_run_is_kept_as_preempted_at_its_kill() -> None:
    ran = replace(make_job(5).state(JobState.COMPLETING).build(), start_time=T0 - 3, end_time=T0)
    requeue = StoredEvent(5, T0 + 4.7, "preempt-end", {"state": "PENDING", "mode": "REQUEUE"})
    kept = finished_attempt(ran, [requeue], T0 + 4.7)
    assert kept is not None
    assert (kept.state, kept.end_time, kept.exit_code) == (JobState.PREEMPTED, T0, 0)


def test_scontrol_shows_preempt_eligible_time_only_while_preemption_is_on() -> None:
    running = replace(make_job(1).state(JobState.RUNNING).build(), start_time=T0, qos="normal")
    assert preempt_line(running, SiteDefaults()) == []  # preempt/none
    site = SiteDefaults(preempt_exempt_s=15, qos_preempt_exempt={"low": 60})
    assert preempt_line(running, site) == [
        f"PreemptEligibleTime={slurm_time(int(T0) + 15)} PreemptTime=None"
    ]
    low = replace(running, qos="low", preempt_time=T0 + 61)  # the QOS's own exempt time
    assert preempt_line(low, site) == [
        f"PreemptEligibleTime={slurm_time(int(T0) + 60)} PreemptTime={slurm_time(int(T0) + 61)}"
    ]
    pending = make_job(2).state(JobState.PENDING).build()
    assert preempt_line(pending, site) == []  # pending (or requeued): no line


def test_a_requeue_victim_in_kill_wait_shows_its_next_run_as_slurmctld() -> None:
    """Recorded (requeue_trap_and_rerun) and live: COMPLETING through KillWait with
    Restarts already 1, RunTime 00:00:00, no PreemptTime line, StartTime and EndTime not
    planned; then pending with Restarts 1 and the mark gone."""
    victim = replace(make_job(1).state(JobState.RUNNING).build(), start_time=T0 - 30)
    victim = replace(victim, time_limit=5)
    runs = _Runs()
    pre, _ = _preempter(victim, runs)
    pre.victims[1] = _Victim(1, 0, 2, Mode.REQUEUE, T0)
    asyncio.run(pre.tick())
    job = pre.gw.jobs[1]
    assert (job.state, job.restart_count, job.requeuing) == (JobState.COMPLETING, 0, True)
    site = SiteDefaults(preempt_exempt_s=0)
    text = show_job(job, now=T0 + 2, site=site)
    fields = dict(re.findall(r"(\w+)=(\S*)", text))
    assert (fields["JobState"], fields["Restarts"], fields["RunTime"]) == (
        "COMPLETING",
        "1",
        "00:00:00",
    )
    assert (fields["StartTime"], fields["EndTime"]) == ("Unknown", "Unknown")
    assert "PreemptTime" not in text
    opts = SqueueOptions(format="%t %M", noheader=True, site=site)
    assert render_squeue([job], opts, now=T0 + 2) == "CG 0:00\n"

    runs.status = 15
    asyncio.run(pre.tick())
    again = pre.gw.jobs[1]
    assert (again.state, again.restart_count, again.requeuing) == (JobState.PENDING, 1, False)
    assert not again.shown_requeued


def test_a_cancel_victim_in_kill_wait_keeps_its_run() -> None:
    victim = replace(make_job(1).state(JobState.RUNNING).build(), start_time=T0 - 30)
    pre, _ = _preempter(victim, _Runs())
    pre.victims[1] = _Victim(1, 0, 2, Mode.CANCEL, T0)
    asyncio.run(pre.tick())
    text = show_job(pre.gw.jobs[1], now=T0 + 2, site=SiteDefaults(preempt_exempt_s=0))
    fields = dict(re.findall(r"(\w+)=(\S*)", text))
    assert (fields["Restarts"], fields["RunTime"]) == ("0", "00:00:30")
    assert fields["PreemptTime"] == slurm_time(int(T0))
