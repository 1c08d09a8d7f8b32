"""A command naming many jobs commits once (issue 14: 2,000 ids were 2,000 fsyncs).

A real Gateway over a real SQLite store (no backend: every job is pending and held, which
is what the bulk path serves); the committer's own count of transactions is the measure.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from gateway.compat.slurm_errors import SlurmErrno
from gateway.control import ops
from gateway.control.arraytasks import Target, parse_targets
from gateway.control.gateway import Gateway
from gateway.control.submit import Caller
from gateway.model.job import Hold, Job
from gateway.model.state import JobState, Reason
from tests.support.builders import make_gateway, make_job

OWNER = Caller(uid=1000, gid=1000, user="u", group="g", operator=False)
OTHER = Caller(uid=1001, gid=1001, user="tester", group="tester", operator=False)


def _gateway(tmp_path: Path) -> Gateway:
    return make_gateway(tmp_path)


async def _stored(gw: Gateway, jobs: list[Job]) -> None:
    await gw.commit(jobs, "submit")
    gw.next_id = max(j.job_id for j in jobs) + 1


def _targets(text: str) -> list[Target]:
    parsed = parse_targets(text)
    assert parsed is not None
    return parsed


def test_releasing_2000_held_jobs_is_one_commit_with_a_result_per_id(tmp_path: Path) -> None:
    async def main() -> None:
        gw = _gateway(tmp_path)
        jobs = [make_job(i).held().build() for i in range(1, 2001)]
        await _stored(gw, jobs)
        before = gw.committer.commits
        ids = " ".join(str(i) for i in range(1, 2001)) + " 999999"
        results = await ops.release(gw, _targets(ids), OWNER)
        assert gw.committer.commits == before + 1
        assert len(results) == 2001
        assert all(r.error is None for r in results[:2000])
        assert results[2000] == ops.OpResult("999999", SlurmErrno.INVALID_JOB_ID)
        for job_id in (1, 1000, 2000):
            stored = gw.store.get(job_id)
            assert stored is not None
            assert (stored.hold, stored.reason) == (None, Reason.NONE)
            assert stored.priority > 0
            assert [e.kind for e in gw.store.events(job_id)] == ["submit", "release"]
        gw.committer.close()

    asyncio.run(main())


def test_holding_an_array_range_splits_every_task_in_one_commit(tmp_path: Path) -> None:
    async def main() -> None:
        gw = _gateway(tmp_path)
        await _stored(gw, [make_job(100).array("0-1999").build()])
        before = gw.committer.commits
        results = await ops.hold(gw, _targets("100_[0-1499]"), OWNER)
        assert gw.committer.commits == before + 1
        assert [r.error for r in results] == [None]
        records = gw.jobs.array(100)
        held = [j for j in records if j.hold is Hold.USER]
        assert sorted(j.array_task_id for j in held) == list(range(1500))
        meta = gw.jobs[100]
        assert meta.array_pending is not None
        assert 0 not in meta.array_pending
        assert 1500 in meta.array_pending
        assert meta.hold is None
        # the same tasks again, one by one in one command: each one found, one commit
        results = await ops.release(gw, _targets("100_0 100_1 100_1499 100_1500"), OWNER)
        assert gw.committer.commits == before + 2
        assert [r.error for r in results] == [None] * 4
        released = {j.array_task_id: j for j in gw.jobs.array(100)}
        assert all(released[i].hold is None for i in (0, 1, 1499, 1500))
        assert released[2].hold is Hold.USER
        gw.committer.close()

    asyncio.run(main())


def test_errors_stay_per_id_and_a_cancel_of_many_is_one_commit(tmp_path: Path) -> None:
    async def main() -> None:
        gw = _gateway(tmp_path)
        mine = [make_job(i).held().build() for i in range(1, 301)]
        theirs = make_job(301).user(OTHER.uid).held().build()
        done = make_job(302).state(JobState.COMPLETED, end_time=1.0).build()
        await _stored(gw, [*mine, theirs, done])
        before = gw.committer.commits
        results = await ops.cancel(gw, [], OWNER)
        assert results == []
        assert gw.committer.commits == before  # nothing named, nothing stored
        ids = [Target(i) for i in range(1, 303)]
        results = await ops.cancel(gw, ids, OWNER)
        assert gw.committer.commits == before + 1
        errors = {r.target: r.error for r in results}
        assert errors["301"] is SlurmErrno.ACCESS_DENIED
        assert errors["302"] is SlurmErrno.ALREADY_DONE
        assert all(errors[str(i)] is None for i in range(1, 301))
        assert all(gw.jobs[i].state is JobState.CANCELLED for i in range(1, 301))
        assert gw.jobs[301].state is JobState.PENDING
        gw.committer.close()

    asyncio.run(main())
