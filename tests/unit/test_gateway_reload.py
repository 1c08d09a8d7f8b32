"""A restarted gateway takes back the jobs that finished within MinJobAge, as slurmctld's
saved state does (squeue -t all / squeue -j keep showing them until they age out), and
those older stay in the store only (sacct, scontrol show job)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path

from gateway.model.job import Job
from gateway.model.state import JobState
from tests.support.builders import make_gateway, make_job


def _ended(job_id: int, ago_s: float) -> Job:
    end = time.time() - ago_s
    job = make_job(job_id).state(JobState.COMPLETED, start_time=end - 5).build()
    return replace(job, end_time=end)


def test_a_restart_keeps_showing_jobs_within_min_job_age(tmp_path: Path) -> None:
    async def main() -> tuple[set[int], set[int], Job | None]:
        first = make_gateway(tmp_path)
        jobs = [_ended(1, 1000), _ended(2, 30), make_job(3).build()]
        await first.commit(jobs, "submit")
        await first.stop()
        again = make_gateway(tmp_path)
        await again.start()
        shown = {j.job_id for j in again.visible_jobs()}
        again.config = replace(again.config, min_job_age_s=10)
        again._forget_old()  # once job 2 is past MinJobAge
        later = {j.job_id for j in again.visible_jobs()}
        old = await again.find(1)
        await again.stop()
        return shown, later, old

    shown, later, old = asyncio.run(main())
    assert shown == {2, 3}
    assert later == {3}
    assert old is not None
    assert old.state is JobState.COMPLETED  # still in the store
