"""The gateway's live jobs, with the indexes a scheduling cycle reads.

A cycle needs the jobs it may start, the jobs holding resources, the unfinished jobs of a
(user, name) for `singleton`, and an array's records; /metrics needs the number of jobs per
label set (state, partition, cluster, user, account, reason, hold). Scanning every live job
for each of these made a cycle (or a scrape) cost O(all jobs), so a queue of many held or
waiting jobs slowed every submission. Each write re-indexes the one job it changes instead.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from gateway.metrics.collect import JobKey, job_key
from gateway.model.job import Job
from gateway.model.state import JobState

__all__ = ["JobTable"]


def _schedulable(job: Job) -> bool:
    """Waiting for Caldera to place it (not held, not queued by a backend that places
    its own jobs)."""
    return job.state is JobState.PENDING and not job.backend_id and job.hold is None


class JobTable(Mapping[int, Job]):
    """job id -> Job, kept in submission order, with secondary indexes."""

    def __init__(self) -> None:
        self._jobs: dict[int, Job] = {}
        self.pending: dict[int, Job] = {}  # schedulable, oldest first
        self.active: dict[int, Job] = {}  # holding or about to hold resources
        self.queued: dict[int, Job] = {}  # pending in a backend's own queue (Slurm's PD)
        self._by_user_name: dict[tuple[int, str], set[int]] = {}  # unfinished only
        self._by_array: dict[int, set[int]] = {}  # array_job_id -> its records
        self.label_counts: dict[JobKey, int] = {}  # jobs per /metrics label set

    def __getitem__(self, job_id: int) -> Job:
        return self._jobs[job_id]

    def __iter__(self) -> Iterator[int]:
        return iter(self._jobs)

    def __len__(self) -> int:
        return len(self._jobs)

    def __setitem__(self, job_id: int, job: Job) -> None:
        old = self._jobs.get(job_id)
        if old is not None:
            self._unindex(old)
        self._jobs[job_id] = job
        self._index(job)

    def pop(self, job_id: int, default: Job | None = None) -> Job | None:
        """Forget a job (it left MinJobAge)."""
        old = self._jobs.pop(job_id, None)
        if old is None:
            return default
        self._unindex(old)
        return old

    def same_user_name(self, uid: int, name: str) -> tuple[int, ...]:
        """Ids of the unfinished jobs of this user with this name, ascending."""
        return tuple(sorted(self._by_user_name.get((uid, name), ())))

    def array(self, array_job_id: int) -> list[Job]:
        """The live records of an array job (its tasks and its meta record)."""
        return [self._jobs[i] for i in sorted(self._by_array.get(array_job_id, ()))]

    def job_or_array(self, job_id: int) -> list[Job]:
        """The job with this id and, when it is an array's id, every record of the array."""
        out = self.array(job_id)
        if not out and job_id in self._jobs:
            out = [self._jobs[job_id]]
        return out

    def _index(self, job: Job) -> None:
        jid = job.job_id
        key = job_key(job)
        self.label_counts[key] = self.label_counts.get(key, 0) + 1
        if _schedulable(job):
            self.pending[jid] = job
        if job.state.is_active:
            self.active[jid] = job
        elif job.state is JobState.PENDING and job.backend_id:
            self.queued[jid] = job
        if not job.state.is_finished:
            self._by_user_name.setdefault((job.uid, job.spec.name), set()).add(jid)
        if job.array_job_id:
            self._by_array.setdefault(job.array_job_id, set()).add(jid)

    def _unindex(self, job: Job) -> None:
        jid = job.job_id
        label = job_key(job)
        left = self.label_counts[label] - 1
        if left:
            self.label_counts[label] = left
        else:
            del self.label_counts[label]
        self.pending.pop(jid, None)
        self.active.pop(jid, None)
        self.queued.pop(jid, None)
        key = (job.uid, job.spec.name)
        members = self._by_user_name.get(key)
        if members is not None:
            members.discard(jid)
            if not members:
                del self._by_user_name[key]
        if job.array_job_id:
            tasks = self._by_array.get(job.array_job_id)
            if tasks is not None:
                tasks.discard(jid)
                if not tasks:
                    del self._by_array[job.array_job_id]
