"""How a job record changes when it ends, is requeued, or a backend reports on it.

Pure functions of the record, the event and the clock reading: the gateway applies them
on its loop thread and commits the result.
"""

from __future__ import annotations

import math
from dataclasses import replace

from gateway.model.backend import BackendEvent, EventKind
from gateway.model.job import HANDING, Job
from gateway.model.state import JobState, Reason
from gateway.model.suspension import caldera_suspended, ended_suspended

__all__ = ["after_event", "ended", "requeued", "withdrawn"]


def ended(
    job: Job, state: JobState, now: float, exit_code: int = 0, reason: Reason = Reason.NONE
) -> Job:
    """The job finished in `state` at `now`. An array's meta record keeps the set of tasks
    it held (Slurm shows the cancelled remainder as `12_[3-9%2]` in squeue and sacct); a
    finished record starts none of them. A job that ends suspended counts its last pause."""
    out = replace(
        job,
        state=state,
        reason=reason,
        end_time=now,
        start_time=job.start_time or now,
        exit_code=exit_code,
    )
    return ended_suspended(job, out)


def requeued(job: Job, now: float, delay_s: float = 0) -> Job:
    """The job back in the queue for its next run (Slurm counts runs in Restarts and, as
    slurmctld does, gives the new run the requeue time as its submit time). The store keeps
    the run that ended as an attempt record of its own (`sacct --duplicates`). `delay_s`
    (real seconds): the next run is not eligible before then (Reason=BeginTime), unless the
    job's own begin time is later (slurmctld keeps a future --begin)."""
    begin, reason = job.spec.begin, Reason.NONE
    if delay_s > 0:
        begin, reason = max(begin or 0, int(now) + math.ceil(delay_s)), Reason.BEGIN_TIME
    return replace(
        job,
        spec=job.spec if begin == job.spec.begin else replace(job.spec, begin=begin),
        submit_time=now,
        state=JobState.PENDING,
        reason=reason,
        eligible_time=None if delay_s > 0 else job.eligible_time,
        start_time=None,
        end_time=None,
        nodes=(),
        placement=(),
        num_cpus=0,
        backend_id=None,
        restart_count=job.restart_count + 1,
        exit_code=0,
        suspend_time=None,
        pre_sus_time=0,
        suspended_s=0,
        suspended_by=None,
        preempt_time=None,
        requeuing=False,
    )


def withdrawn(job: Job, reason: Reason, message: str | None) -> Job:
    """The job back in the queue because its backend handed it back before it started (the
    placement could not be bound): the same run, placed again by the next cycle. Unlike a
    requeue nothing ran, so neither the restart count nor the submit time (its priority
    age) change."""
    return replace(
        job,
        state=JobState.PENDING,
        reason=reason,
        state_desc=message,
        start_time=None,
        end_time=None,
        nodes=(),
        placement=(),
        num_cpus=0,
        backend_id=None,
        exit_code=0,
    )


def after_event(job: Job, ev: BackendEvent, requeue_default: bool, now: float) -> Job | None:
    """The job after one backend event (None: no change). `requeue_default` is the site's
    JobRequeue, used when the job did not say --requeue or --no-requeue; a lost job ends
    `now`, when the gateway learns of it."""
    handed = job.state.is_active or (job.state is JobState.PENDING and bool(job.backend_id))
    own_id = None if job.backend_id == HANDING else job.backend_id  # the cluster's, once known
    requeue = requeue_default if job.spec.requeue is None else job.spec.requeue
    ends = ev.kind in (EventKind.FINISHED, EventKind.LOST)
    if ends and job.state is JobState.RUNNING and job.preempt_time is not None:
        return None  # a victim in its GraceTime: the preemption records the end (even one a
        # gateway restart meanwhile read back from the store, control/preempt_restore.py)
    if ev.kind is EventKind.FINISHED and handed:
        state = ev.state or JobState.COMPLETED
        if state is JobState.NODE_FAIL and requeue:
            return requeued(job, now)
        out = replace(
            job,
            state=state,
            reason=ev.reason or Reason.NONE,
            end_time=ev.time,
            start_time=ev.started_at or job.start_time or ev.time,
            exit_code=ev.exit_code,
            derived_exit_code=ev.derived_exit_code,
            nodes=ev.nodes or job.nodes,
            # why the launch failed (the image could not be pulled...), as scontrol shows it
            state_desc=ev.message if ev.reason is Reason.JOB_LAUNCH_FAILURE else job.state_desc,
        )
        return ended_suspended(job, out)
    if ev.kind is EventKind.LOST and handed:
        if requeue:
            return requeued(job, now)
        return ended(job, JobState.NODE_FAIL, now, 0, Reason.NODE_DOWN)
    if ev.kind is EventKind.WITHDRAWN and handed:
        if ev.backend_id and job.backend_id and ev.backend_id != job.backend_id:
            return None  # an earlier copy's (the run was placed here again since)
        return withdrawn(job, ev.reason or Reason.RESOURCES, ev.message)
    if ev.kind is EventKind.SUBMITTED and not job.state.is_finished:
        if own_id or not ev.backend_id:
            return None
        return replace(job, backend_id=ev.backend_id)
    if ev.kind.mirrors_state and caldera_suspended(job):
        return None  # the gateway stopped this run: the backend's view of it changes nothing
    if ev.kind.mirrors_state and not job.state.is_finished:
        # a backend that queues jobs itself (Slurm) reports its own state and reason
        changed = replace(job, backend_id=own_id or ev.backend_id or job.backend_id)
        if ev.state is not None and ev.state is not job.state:
            changed = replace(changed, state=ev.state)
            if ev.state.is_active:  # a waiting reason (Volcano's Resources) ends with the wait
                changed = replace(
                    changed, start_time=ev.time, nodes=ev.nodes or job.nodes, reason=Reason.NONE
                )
        if ev.started_at is not None and changed.state.is_active:
            changed = replace(changed, start_time=ev.started_at, nodes=ev.nodes or changed.nodes)
        if ev.reason is not None:
            changed = replace(changed, reason=ev.reason)
        return changed if changed != job else None
    return None
