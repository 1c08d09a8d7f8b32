"""scontrol hold/release of a running job and scancel -s of one that has not started, as
the test cluster (Slurm 22.05) answered them (gateway/control/ops.py):

- `scontrol hold` of a running job: rc 0, it runs on at Priority=0 with JobHeldUser (as
  its user) or JobHeldAdmin (as root); `scontrol release`: a priority number again, Reason
  None; both on a finished job: "Job has already finished".
- `scancel -s TERM|INT|HUP|CONT|STOP|USR1` of a pending job (held, or waiting for its
  --begin) or of a pending array task: "Job can not be altered now, try again later"
  (exit 228); only SIGKILL (scancel's default) cancels it.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

from gateway.compat.slurm_errors import SlurmErrno
from gateway.control import ops
from gateway.control.arraytasks import parse_targets
from gateway.control.gateway import Gateway
from gateway.control.submit import Caller
from gateway.model.job import Job
from gateway.model.state import JobState, Reason
from tests.support.builders import make_gateway, make_job

OWNER = Caller(uid=1000, gid=1000, user="u", group="g", operator=False)
ROOT = Caller(uid=0, gid=0, user="root", group="root", operator=True)


def _targets(text: str):  # type: ignore[no-untyped-def]
    targets = parse_targets(text)
    assert targets is not None
    return targets


async def _gateway(tmp_path: Path, *jobs: Job) -> Gateway:
    gw = make_gateway(tmp_path)
    await gw.commit(list(jobs), "submit")
    return gw


def test_a_running_job_is_held_at_priority_zero_and_released_to_a_number(tmp_path: Path) -> None:
    async def main() -> None:
        running = make_job(7).state(JobState.RUNNING, start_time=1.0).build()
        done = make_job(8).state(JobState.COMPLETED, start_time=1.0).build()
        gw = await _gateway(tmp_path, replace(running, priority=4242), done)
        results = await ops.hold(gw, _targets("7"), OWNER)
        assert [r.error for r in results] == [None]
        held = gw.jobs[7]
        assert (held.state, held.priority, held.reason, held.hold) == (
            JobState.RUNNING,
            0,
            Reason.JOB_HELD_USER,
            None,
        )
        results = await ops.release(gw, _targets("7"), OWNER)
        assert [r.error for r in results] == [None]
        again = gw.jobs[7]
        assert (again.state, again.reason) == (JobState.RUNNING, Reason.NONE)
        assert again.priority > 0
        admin = await ops.hold(gw, _targets("7"), ROOT, user_hold=False)
        assert [r.error for r in admin] == [None]
        assert (gw.jobs[7].priority, gw.jobs[7].reason) == (0, Reason.JOB_HELD_ADMIN)
        finished = await ops.hold(gw, _targets("8"), OWNER)
        assert [r.error for r in finished] == [SlurmErrno.JOB_FINISHED]
        finished = await ops.release(gw, _targets("8"), OWNER)
        assert [r.error for r in finished] == [SlurmErrno.JOB_FINISHED]
        gw.committer.close()

    asyncio.run(main())


def test_only_sigkill_reaches_a_job_that_has_not_started(tmp_path: Path) -> None:
    async def main() -> None:
        pending = replace(make_job(5).build(), hold=None)
        gw = await _gateway(tmp_path, pending)
        for sig in (15, 2, 1, 18, 19, 10):
            results = await ops.cancel(gw, _targets("5"), OWNER, signal=sig)
            refused = [(r.target, r.error) for r in results if r.error]
            assert refused == [("5", SlurmErrno.TRANSITION_STATE_NO_UPDATE)], sig
            assert gw.jobs[5].state is JobState.PENDING
        assert SlurmErrno.TRANSITION_STATE_NO_UPDATE.code & 0xFF == 228  # scancel's exit
        results = await ops.cancel(gw, _targets("5"), OWNER, signal=9)
        assert [r.error for r in results] == [None]
        assert gw.jobs[5].state is JobState.CANCELLED
        gw.committer.close()

    asyncio.run(main())


def test_a_signal_refused_to_pending_array_tasks_names_their_record_once(tmp_path: Path) -> None:
    """As scancel's `_build_jobid_str` names the record it signals: the array's pending
    part (`12_[1-5]`), once however many of its tasks are named (the test cluster: `-s
    USR1 12_2`, `12` and `12_[2-3]` all answer `Kill job error on job id 12_[1-5]`, 228;
    once task 4 ran apart, `12_1` answers `12_[1-3,5]`)."""

    async def main() -> None:
        meta = make_job(12).array("1-5").held().build()
        gw = await _gateway(tmp_path, meta)
        busy = SlurmErrno.TRANSITION_STATE_NO_UPDATE
        for text in ("12_2", "12", "12_[2-3]", "12_2,12_3"):
            results = await ops.cancel(gw, _targets(text), OWNER, signal=10)
            assert [(r.target, r.error) for r in results if r.error] == [("12_[1-5]", busy)]
        gw.committer.close()

    asyncio.run(main())


def test_a_refused_request_is_told_in_words_without_its_input() -> None:
    """`scancel -s 99` printed the API's whole validation report (a JSON dump of the
    input); every command now prints each field at fault and what is wrong with it."""
    from gateway.cli.fastclient import refusal_text

    report = [
        {
            "type": "less_than_equal",
            "loc": ["body", "signal"],
            "msg": "Input should be less than or equal to 64",
            "input": 99,
        },
        {"loc": ["body", "env", "SECRET"], "msg": "bad", "input": "hunter2"},
    ]
    text = refusal_text(report)
    assert text == "signal: Input should be less than or equal to 64; env.SECRET: bad"
    assert "hunter2" not in text
    assert refusal_text({"code": 2017, "message": "Invalid job id specified"}) == (
        "Invalid job id specified"
    )
    assert refusal_text([]) == "invalid request"
    assert refusal_text("plain") == "plain"
