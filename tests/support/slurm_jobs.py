"""Slurm backend tests and benchmarks: Caldera jobs and launches as the gateway makes them.

    launch = make_launch(7, "#!/bin/sh\\nhostname\\n", user="tester", workdir=d,
                         partitions=("real",), time_limit=1)

builds the JobSpec from keyword fields (JobSpec's own names), the RUNNING Job record the
gateway stores before calling `submit`, and the Launch it hands to the backend.
"""

from __future__ import annotations

import grp
import os
import pwd
import time
from collections.abc import Callable, Mapping
from typing import Any

from gateway.model.backend import Backend, BackendEvent, EventKind, Launch
from gateway.model.job import Job
from gateway.model.jobspec import JobSpec
from gateway.model.state import JobState

__all__ = ["EventLog", "make_job", "make_launch", "wrap"]


def wrap(command: str) -> str:
    """The script sbatch --wrap makes of a command."""
    return f"#!/bin/sh\n# This script was created by sbatch --wrap.\n\n{command}\n"


def make_job(
    job_id: int,
    *,
    user: str = "root",
    workdir: str = "/tmp",
    name: str | None = None,
    cluster: str = "slurm",
    array_job_id: int | None = None,
    array_task: int | None = None,
    now: float | None = None,
    **spec_fields: Any,
) -> Job:
    """A RUNNING Caldera job (as the gateway stores it just before `submit`)."""
    pw = pwd.getpwnam(user)
    group = grp.getgrgid(pw.pw_gid).gr_name
    spec = JobSpec(name=name or f"job{job_id}", workdir=workdir, **spec_fields)
    when = time.time() if now is None else now
    is_array = spec.array is not None or array_task is not None
    return Job(
        job_id=job_id,
        spec=spec,
        user=user,
        uid=pw.pw_uid,
        group=group,
        gid=pw.pw_gid,
        submit_time=when,
        state=JobState.RUNNING,
        array_job_id=(array_job_id or job_id) if is_array else 0,
        array_task_id=array_task,
        partition=",".join(spec.partitions),
        account=(spec.account or "").lower(),
        cluster=cluster,
        start_time=when,
    )


def make_launch(
    job_id: int,
    script: str,
    *,
    user: str = "root",
    workdir: str = "/tmp",
    env: Mapping[str, str] | None = None,
    cluster: str = "slurm",
    **job_fields: Any,
) -> Launch:
    """The Launch of a new job (PATH, HOME, USER, LOGNAME in its environment)."""
    job = make_job(job_id, user=user, workdir=workdir, cluster=cluster, **job_fields)
    environment = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": pwd.getpwnam(user).pw_dir,
        "USER": user,
        "LOGNAME": user,
        **(env or {}),
    }
    return Launch(
        job=job,
        script=script,
        environment=environment,
        placement=(),
        partition=job.partition.split(",")[0],
        cluster=cluster,
    )


class EventLog:
    """Every event a backend's poll() gave, and waiting for one."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.events: list[BackendEvent] = []

    def drain(self) -> list[BackendEvent]:
        """Poll once; the new events."""
        new = self.backend.poll()
        self.events.extend(new)
        return new

    def of(self, job_id: int, kind: EventKind | None = None) -> list[BackendEvent]:
        """The events of one job (of one kind)."""
        return [e for e in self.events if e.job_id == job_id and (kind is None or e.kind is kind)]

    def wait(
        self, pred: Callable[[BackendEvent], bool], timeout: float = 120.0, what: str = ""
    ) -> BackendEvent:
        """The first event (already seen or new) that satisfies `pred`."""
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            for ev in self.events[seen:]:
                if pred(ev):
                    return ev
            seen = len(self.events)
            if time.monotonic() > deadline:
                tail = "\n".join(map(repr, self.events[-8:]))
                raise TimeoutError(f"no event {what} within {timeout:.0f} s; last:\n{tail}")
            if not self.drain():
                time.sleep(0.05)

    def finished(self, job_id: int, timeout: float = 300.0) -> BackendEvent:
        """The FINISHED event of a job."""
        return self.wait(
            lambda e: e.job_id == job_id and e.kind is EventKind.FINISHED,
            timeout,
            f"FINISHED of job {job_id}",
        )

    def state(self, job_id: int, state: JobState, timeout: float = 300.0) -> BackendEvent:
        """The first event of a job that mirrors that Slurm state (PENDING, STARTED or
        OBSERVED, as slurm_plugin.statuses maps it)."""
        return self.wait(
            lambda e: e.job_id == job_id and e.kind.mirrors_state and e.state is state,
            timeout,
            f"{state.long} of job {job_id}",
        )
