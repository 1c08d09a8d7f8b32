"""slurmctld's job list order, which squeue keeps for ties and `scontrol show job` prints.

slurmctld appends a job's record to its list when the job is submitted, so the list is in
job id order, except for arrays: when a task starts, the array's pending record becomes that
task (under a new id, where the record was) and a copy keeping the array's id is appended
at the end of the list. The task split k-th therefore sits where the array's record was
after split k-1 (right after the jobs that existed then), and the array's own record sits
after its last split task.
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.model.job import Job

__all__ = ["list_order"]


def list_order(jobs: Iterable[Job]) -> list[Job]:
    """`jobs` (in job id order) in slurmctld's list order; unchanged without split tasks."""
    out = list(jobs)
    split: dict[int, list[int]] = {}
    for job in out:
        if job.array_job_id and job.job_id != job.array_job_id:
            split.setdefault(job.array_job_id, []).append(job.job_id)
    if not split:
        return out
    place: dict[int, float] = {}
    for array_id, ids in split.items():
        ids.sort()
        for k, task_id in enumerate(ids):
            place[task_id] = array_id if k == 0 else ids[k - 1] + 0.5
        place[array_id] = ids[-1] + 0.5
    return sorted(out, key=lambda j: place.get(j.job_id, j.job_id))
