"""`scontrol suspend` / `scontrol resume`, and the stop and continue a preemption in SUSPEND
mode uses (gateway/control/preemption.py).

As slurmctld 22.05 (`job_suspend2`), checked on the burst test cluster
(tests/data/slurm_suspend_22.05.json): operators only (a user gets "Access/permission
denied", even for their own job); an unknown id is "Unexpected message received"; a pending
job "Job is pending execution"; an ended one "Job/step already completing or completed";
resuming a job that is not suspended "Job is not suspended"; suspending a suspended job
succeeds (and holds it for the operator: Priority 0). The job's processes are stopped by
its backend (`Suspends`: the local runner's SIGSTOP to the job's own process group) before
the record says SUSPENDED, and continued before it says RUNNING, so the record never
claims more than happened.

Resources: slurmctld gives back an operator-suspended job's CPUs (its memory stays
allocated) and oversubscribes them on resume. Caldera keeps every resource of a suspended
job allocated instead, so that a resume never lands on a node another job now uses; what
it frees for others is a preemption's business (its preemptor runs on the victim's room).
A suspended job is never pending, so it is never started anywhere else; after a gateway
restart it stays suspended (its supervisor keeps the processes stopped, the store keeps
the state, and the backend's reports about the stopped run do not make it RUNNING).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from gateway.compat.slurm_errors import SlurmErrno
from gateway.control.arraytasks import Target
from gateway.control.bulk import Changes
from gateway.control.gateway import Gateway
from gateway.control.ops import OpResult, call_backend, resolve_target, target_name
from gateway.control.submit import Caller
from gateway.model.job import Job
from gateway.model.state import JobState
from gateway.model.suspension import SUSPENDED_BY_OPERATOR, resumed, suspended
from gateway.policy.service import policy_of

__all__ = ["refusal", "resume", "resume_run", "suspend", "suspend_run"]

log = logging.getLogger("caldera.suspend")


def refusal(job: Job, resume: bool) -> SlurmErrno | None:
    """Why slurmctld refuses to suspend (resume) this job, or None."""
    if job.state is JobState.PENDING:
        return SlurmErrno.JOB_PENDING
    if job.state.is_finished:
        return SlurmErrno.ALREADY_DONE
    if resume and job.state is not JobState.SUSPENDED:
        return SlurmErrno.JOB_NOT_SUSPENDED
    if not resume and job.state not in (JobState.RUNNING, JobState.SUSPENDED):
        return SlurmErrno.JOB_NOT_RUNNING
    return None


async def suspend_run(gw: Gateway, job: Job, by: int) -> Job | SlurmErrno:
    """Stop the job's processes and return its SUSPENDED record (not yet committed), or
    the error (NOT_SUPPORTED where the backend cannot suspend)."""
    if job.state is JobState.SUSPENDED:  # already stopped: only the record changes
        return suspended(job, gw.clock(), by)
    stops = gw.capabilities(job).suspends
    if stops is None:
        return SlurmErrno.NOT_SUPPORTED
    await gw.launcher.settled(job.job_id)
    err = await call_backend(lambda: stops.suspend(job))
    if err is not None:
        return err
    current = gw.jobs.get(job.job_id, job)
    if current.state is not JobState.RUNNING or current.restart_count != job.restart_count:
        return refusal(current, False) or SlurmErrno.JOB_NOT_RUNNING
    return suspended(current, gw.clock(), by)


async def resume_run(gw: Gateway, job: Job) -> Job | SlurmErrno:
    """Continue the job's processes and return its RUNNING record (not yet committed)."""
    stops = gw.capabilities(job).suspends
    if stops is None:
        return SlurmErrno.NOT_SUPPORTED
    err = await call_backend(lambda: stops.resume(job))
    if err is not None:
        return err
    current = gw.jobs.get(job.job_id, job)
    if current.state is not JobState.SUSPENDED:
        return refusal(current, True) or SlurmErrno.JOB_NOT_SUSPENDED
    held = current.suspended_by == SUSPENDED_BY_OPERATOR
    priority = policy_of(gw).number(current) if held else current.priority
    return resumed(current, gw.clock(), priority)


async def _each(
    gw: Gateway, targets: Sequence[Target], caller: Caller, resume: bool
) -> list[OpResult]:
    kind = "resume" if resume else "suspend"
    changes = Changes(gw, kind, caller.uid)
    await changes.load(targets)
    results: list[OpResult] = []
    for target in targets:
        matched = resolve_target(changes, target)
        if not matched:  # what scontrol prints for an unknown id (not "Invalid job id")
            results.append(OpResult(target_name(target), SlurmErrno.UNEXPECTED_MSG))
            continue
        err: SlurmErrno | None = None
        for job, _ in matched:
            job = gw.jobs.get(job.job_id, changes.current(job))
            if not caller.operator:
                err = SlurmErrno.ACCESS_DENIED
                continue
            refused = refusal(job, resume)
            if refused is not None:
                err = err or refused
                continue
            if resume:
                out = await resume_run(gw, job)
            else:
                out = await suspend_run(gw, job, SUSPENDED_BY_OPERATOR)
            if isinstance(out, SlurmErrno):
                err = err or out
                continue
            await gw.commit([out], kind, by=caller.uid)
            log.info("job %s: %s by uid %s", job.job_id, kind, caller.uid)
        results.append(OpResult(target_name(target), err))
    gw.wake()  # the next cycle sees the change
    return results


async def suspend(gw: Gateway, targets: Sequence[Target], caller: Caller) -> list[OpResult]:
    """scontrol suspend: operators only; running jobs are stopped, then SUSPENDED."""
    return await _each(gw, targets, caller, resume=False)


async def resume(gw: Gateway, targets: Sequence[Target], caller: Caller) -> list[OpResult]:
    """scontrol resume: operators only; suspended jobs continue, RUNNING again."""
    return await _each(gw, targets, caller, resume=True)
