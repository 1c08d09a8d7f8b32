"""Job control as scancel and scontrol do it: signal/cancel, hold, release, requeue
(`scontrol update`: update_op.py).

Users act only on their own jobs; operators (root and configured uids) on all. Each
operation answers per job with Slurm's error code, so the commands can print Slurm's
messages (`scancel: error: Kill job error on job id 12: Access/permission denied`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from signal import SIGRTMAX

from gateway.compat.slurm_errors import SlurmErrno
from gateway.control.arraytasks import Target, remove_index
from gateway.control.bulk import Changes
from gateway.control.gateway import Gateway
from gateway.control.submit import Caller
from gateway.model.backend import BackendError
from gateway.model.job import Hold, Job
from gateway.model.state import JobState, Reason
from gateway.policy.service import policy_of

__all__ = [
    "OpResult",
    "allowed",
    "call_backend",
    "cancel",
    "forward_hold",
    "hold",
    "release",
    "requeue",
    "resolve_target",
    "target_name",
]

log = logging.getLogger("caldera.ops")

REQUEUED_HELD = "job requeued in held state"  # slurmctld's state_desc for requeuehold


@dataclass(frozen=True, slots=True)
class OpResult:
    """The outcome for one target: None when it worked, else Slurm's error."""

    target: str
    error: SlurmErrno | None = None


def allowed(job: Job, caller: Caller) -> bool:
    return caller.operator or job.uid == caller.uid


def resolve_target(changes: Changes, target: Target) -> list[tuple[Job, int | None]]:
    """(record, task index to split from a pending meta record, or None) per matched job."""
    members = changes.members(target.job_id)
    out: list[tuple[Job, int | None]] = []
    if target.tasks is None:
        direct = [m for m in members if m.job_id == target.job_id]
        if direct and not direct[0].array_job_id:
            return [(direct[0], None)]
        return [(m, None) for m in members if m.array_job_id == target.job_id or m is direct[0]]
    tasks: dict[int, list[tuple[int, Job]]] = {}  # index -> (position, task record)
    metas: list[tuple[int, Job]] = []  # records holding pending tasks
    for pos, m in enumerate(members):
        if m.array_task_id is not None:
            tasks.setdefault(m.array_task_id, []).append((pos, m))
        elif m.is_array_meta and m.array_pending is not None:
            metas.append((pos, m))
    for index in target.tasks:
        hits: list[tuple[int, Job, int | None]] = [(p, m, None) for p, m in tasks.get(index, ())]
        hits += [(p, m, index) for p, m in metas if m.array_pending and index in m.array_pending]
        if not hits:
            return out
        out.extend((m, i) for _, m, i in sorted(hits, key=lambda h: h[0]))
    return out


def target_name(target: Target) -> str:
    """The target as scontrol and scancel name it in their messages (`12`, `12_3`)."""
    if target.tasks is None:
        return str(target.job_id)
    if len(target.tasks) == 1:
        return f"{target.job_id}_{target.tasks[0]}"
    return f"{target.job_id}_[{','.join(map(str, target.tasks))}]"


async def cancel(
    gw: Gateway,
    targets: Sequence[Target],
    caller: Caller,
    signal: int | None = None,
    batch_only: bool = False,
    filters: Mapping[str, object] | None = None,
) -> list[OpResult]:
    """scancel: pending jobs end CANCELLED at once; running ones are signalled."""
    changes = Changes(gw, "cancel", caller.uid)
    await changes.load(targets)
    results: list[OpResult] = []
    unsignalled: dict[int, str] = {}  # records refused a signal, named as scancel names them
    for target in targets:
        matched = resolve_target(changes, target)
        if not matched:
            results.append(OpResult(target_name(target), SlurmErrno.INVALID_JOB_ID))
            continue
        err: SlurmErrno | None = None
        for job, index in matched:
            job = changes.current(job)
            if not allowed(job, caller):
                err = SlurmErrno.ACCESS_DENIED
                continue
            if job.state.is_finished:
                err = err or SlurmErrno.ALREADY_DONE
                continue
            unstarted = index is not None or (job.state is JobState.PENDING and not job.backend_id)
            if unstarted and signal not in (None, 9):
                # only SIGKILL (a cancel) reaches a job that has not started: job_signal
                # refuses others (the test cluster: TERM, INT, HUP, CONT, STOP, USR1 exit 228)
                # once per record, named as scancel names it (`12_[1-3,5]`: pending tasks)
                unsignalled.setdefault(job.job_id, job.display_id)
                continue
            if not unstarted and signal is not None and signal > SIGRTMAX:
                continue  # slurmd's kill() fails on it and nobody is told (scancel exits 0)
            if index is not None:  # a task the meta record still holds
                job = _drop_task(changes, job, index)
                if job.array_pending is not None:
                    continue
            if job.state is JobState.PENDING and not job.backend_id:
                # a pending job keeps its reason (JobHeldUser, Dependency...), as in Slurm
                changes.add(gw.ended(job, JobState.CANCELLED, reason=job.reason, by=caller.uid))
                continue
            await gw.launcher.settled(job.job_id)  # a launch in flight reaches its backend
            job = changes.current(job)
            if job.state.is_finished:
                continue
            if signal is None:  # who cancels is recorded before the backend reports the end
                changes.add(replace(job, cancelled_by=caller.uid))
            await changes.flush()
            refused = await call_backend(_cancel(gw, job, signal, batch_only))
            if refused is not None:
                err = refused
                now = gw.jobs.get(job.job_id)
                if signal is None and now is not None and not now.state.is_finished:
                    changes.add(replace(now, cancelled_by=job.cancelled_by))
        results.append(OpResult(target_name(target), err))
    busy = SlurmErrno.TRANSITION_STATE_NO_UPDATE
    results += [OpResult(name, busy) for name in unsignalled.values()]
    await changes.flush()
    return results


async def signal_steps(
    gw: Gateway, steps: Sequence[tuple[str, Target, int]], caller: Caller, signal: int | None
) -> list[OpResult]:
    """scancel ID.STEP: one step of a running job signalled (None: cancelled), the job
    running on. Refusals name the job alone, as scancel's `_cancel_step_id` prints them."""
    changes = Changes(gw, "signal_step", caller.uid)
    await changes.load([t for _, t, _ in steps])
    results: list[OpResult] = []
    for text, target, step in steps:
        job = _started(changes, target)
        err: SlurmErrno | None = None
        if job is None or job.state.is_finished:
            err = SlurmErrno.INVALID_JOB_ID
        elif not allowed(job, caller):
            err = SlurmErrno.ACCESS_DENIED
        elif not job.backend_id or job.state is JobState.PENDING:
            err = SlurmErrno.JOB_PENDING
        elif signal is not None and signal > SIGRTMAX:
            pass  # slurmstepd's kill() fails on it and nobody is told
        elif (backend := gw.backend_for(job)) is not None:
            err = await call_backend(partial(backend.signal_step, job, step, signal, caller.uid))
        results.append(OpResult(text.partition(".")[0], err))
    return results


def _started(changes: Changes, target: Target) -> Job | None:
    """The job record a step id names (not a task still pending in its array's record)."""
    records = [changes.current(j) for j, index in resolve_target(changes, target) if index is None]
    direct = [j for j in records if j.job_id == target.job_id]
    return (direct or records)[0] if records else None


def _drop_task(changes: Changes, meta: Job, index: int) -> Job:
    """Cancel one pending task of an array as slurmctld does: the index leaves the meta
    record's set and no record of it remains (squeue, scontrol and sacct know it no more);
    the meta record is returned, holding nothing once its last task is gone (it then ends
    CANCELLED and shows as the bare array id)."""
    assert meta.array_pending is not None
    meta = replace(meta, array_pending=remove_index(meta.array_pending, index))
    changes.add(meta)
    return meta


async def call_backend(operation: Callable[[], object]) -> SlurmErrno | None:
    """Run a backend's operation on a job off the event loop (it may talk to a cluster);
    a refusal comes back as the Slurm error it carries (`errno`), else as NOT_SUPPORTED
    (the backend cannot do it, e.g. a signal a pod cannot receive) or INTERNAL."""
    try:
        await asyncio.to_thread(operation)
    except BackendError as exc:
        fallback = SlurmErrno.INTERNAL if exc.retryable else SlurmErrno.NOT_SUPPORTED
        return next((e for e in SlurmErrno if e.code == exc.errno), fallback)
    except Exception:
        log.exception("backend operation failed")
        return SlurmErrno.INTERNAL
    return None


def _cancel(gw: Gateway, job: Job, signal: int | None, batch_only: bool) -> Callable[[], object]:
    backend = gw.backend_for(job)
    return (lambda: None) if backend is None else partial(backend.cancel, job, signal, batch_only)


async def forward_hold(changes: Changes, job: Job, admin: bool) -> SlurmErrno | None:
    """Jobs a backend queues itself (Slurm) are held there too."""
    control = changes.gw.capabilities(job).control if job.backend_id else None
    if control is None:
        return None
    await changes.flush()
    return await call_backend(lambda: control.hold(job, admin))


async def _forward_release(changes: Changes, job: Job) -> SlurmErrno | None:
    """... and released there."""
    control = changes.gw.capabilities(job).control if job.backend_id else None
    if control is None:
        return None
    await changes.flush()
    return await call_backend(lambda: control.release(job))


async def hold(
    gw: Gateway, targets: Sequence[Target], caller: Caller, user_hold: bool = True
) -> list[OpResult]:
    """scontrol hold/uhold: pending jobs get priority 0 and JobHeldUser (JobHeldAdmin)."""
    kind = Hold.USER if (user_hold or not caller.operator) else Hold.ADMIN
    reason = Reason.JOB_HELD_USER if kind is Hold.USER else Reason.JOB_HELD_ADMIN
    return await _each(
        gw,
        targets,
        caller,
        lambda j: replace(j, hold=kind, priority=0, reason=reason),
        kind="hold",
        denied=SlurmErrno.USER_ID_MISSING,
        forward=lambda c, j: forward_hold(c, j, kind is Hold.ADMIN),
    )


async def release(gw: Gateway, targets: Sequence[Target], caller: Caller) -> list[OpResult]:
    """scontrol release: users may lift only their own user holds."""
    changes = Changes(gw, "release", caller.uid)
    await changes.load(targets)
    results: list[OpResult] = []
    for target in targets:
        matched = resolve_target(changes, target)
        if not matched:
            results.append(OpResult(target_name(target), SlurmErrno.INVALID_JOB_ID))
            continue
        err: SlurmErrno | None = None
        for job, index in matched:
            job = changes.current(job)
            if not allowed(job, caller):
                err = SlurmErrno.USER_ID_MISSING
                continue
            if job.hold is Hold.ADMIN and not caller.operator:
                err = SlurmErrno.ACCESS_DENIED
                continue
            if job.state.is_finished:
                err = err or SlurmErrno.JOB_FINISHED
                continue
            if job.state is JobState.RUNNING:  # held while running (hold): a number again
                if job.priority == 0:
                    changes.add(
                        replace(job, reason=Reason.NONE, priority=policy_of(gw).number(job))
                    )
                continue
            if job.state is not JobState.PENDING:
                err = err or SlurmErrno.JOB_NOT_PENDING
                continue
            refused = await _forward_release(changes, job)
            if refused is not None:
                err = refused
                continue
            job = changes.current(job)  # as it is now: events may have changed it meanwhile
            if job.state is not JobState.PENDING:
                err = err or SlurmErrno.JOB_NOT_PENDING
                continue
            if index is not None:
                job = _take_task(gw, job, index, changes)
            changes.add(
                replace(
                    job,
                    hold=None,
                    reason=Reason.NONE,
                    state_desc=None if job.state_desc == REQUEUED_HELD else job.state_desc,
                    fixed_priority=job.fixed_priority and job.hold is None,
                    priority=policy_of(gw).number(job),
                )
            )
        results.append(OpResult(target_name(target), err))
    await changes.flush()
    return results


async def requeue(
    gw: Gateway, targets: Sequence[Target], caller: Caller, hold_after: bool = False
) -> list[OpResult]:
    """scontrol requeue[hold]: back to pending, restart count + 1 (running jobs are killed)."""
    changes = Changes(gw, "requeue", caller.uid)
    results: list[OpResult] = []
    try:
        await changes.load(targets)
        for target in targets:
            matched = resolve_target(changes, target)
            if not matched:
                results.append(OpResult(target_name(target), SlurmErrno.INVALID_JOB_ID))
                continue
            err: SlurmErrno | None = None
            for job, index in matched:
                job = changes.current(job)
                if not allowed(job, caller):
                    err = SlurmErrno.ACCESS_DENIED
                    continue
                if job.state is JobState.PENDING or index is not None:
                    err = err or SlurmErrno.JOB_PENDING
                    continue
                if job.spec.requeue is False:
                    err = err or SlurmErrno.DISABLED
                    continue
                was_suspended = job.state is JobState.SUSPENDED
                if job.state.is_active:
                    await gw.launcher.settled(job.job_id)
                    job = changes.current(job)
                    await changes.flush()
                    if gw.capabilities(job).ends_attempts is not None:
                        changes.ending(gw.ending_run(job))
                    refused = await _end_run(gw, job)
                    if refused is not None:
                        err = refused
                        continue
                    current = gw.jobs.get(job.job_id, job)
                    if current.restart_count != job.restart_count:
                        continue  # requeued by someone else meanwhile
                    job = current
                again = gw.requeued(job, wait=True)
                if hold_after:  # squeue's reason on the test cluster: the state_desc
                    again = replace(
                        again,
                        hold=Hold.USER,
                        priority=0,
                        reason=Reason.JOB_HELD_USER,
                        state_desc=REQUEUED_HELD,
                    )
                if was_suspended:  # slurmctld holds it for the operator (burst cluster)
                    again = replace(
                        again, hold=Hold.ADMIN, priority=0, reason=Reason.JOB_HELD_ADMIN
                    )
                changes.add(again)
            results.append(OpResult(target_name(target), err))
        await changes.flush()
    except BaseException:
        changes.abandon()  # nothing stored: the marks of runs being ended are lifted
        raise
    return results


async def _end_run(gw: Gateway, job: Job) -> SlurmErrno | None:
    """End the job's current run for a requeue: where the backend can, its whole run
    (batch script and all it started) before the requeue is committed (the backend starts
    no next run until it is confirmed gone); elsewhere a SIGKILL through cancel."""
    ends = gw.capabilities(job).ends_attempts
    if ends is None:
        return await call_backend(_cancel(gw, job, 9, False))
    try:
        await asyncio.to_thread(ends.end_attempt, job, True)
    except BackendError as exc:  # not confirmed yet: the backend holds the next run back
        log.warning("requeue of job %s: %s", job.job_id, exc)
    except Exception:  # refused as Slurm refuses a failed operation; job unchanged
        log.exception("requeue of job %s: ending its run failed", job.job_id)
        return SlurmErrno.INTERNAL
    return None


def _take_task(gw: Gateway, meta: Job, index: int, changes: Changes) -> Job:
    """Split one pending task off an array's meta record (as slurmctld does before it holds
    or releases `123_[4-6]`): the task record; the shrunken meta is a change too."""
    if meta.array_pending is None or index not in meta.array_pending:
        return meta
    task, rest = gw.split_task(meta, index)
    if rest is not None:
        changes.add(rest)
    return task


async def _each(
    gw: Gateway,
    targets: Sequence[Target],
    caller: Caller,
    change: Callable[[Job], Job],
    kind: str,
    denied: SlurmErrno,
    forward: Callable[[Changes, Job], Awaitable[SlurmErrno | None]],
) -> list[OpResult]:
    """Hold every job the targets name (scontrol hold), committed once: a pending job is
    held; a running one runs on at priority 0 with the hold's reason, as on the test
    cluster (22.05), until `scontrol release` gives it a number again."""
    changes = Changes(gw, kind, caller.uid)
    await changes.load(targets)
    results: list[OpResult] = []
    for target in targets:
        matched = resolve_target(changes, target)
        if not matched:
            results.append(OpResult(target_name(target), SlurmErrno.INVALID_JOB_ID))
            continue
        err: SlurmErrno | None = None
        for job, index in matched:
            job = changes.current(job)
            if not allowed(job, caller):
                err = denied
                continue
            if job.state.is_finished:
                err = err or SlurmErrno.JOB_FINISHED
                continue
            if job.state is JobState.RUNNING:  # runs on at priority 0, with the hold's reason
                changes.add(replace(change(job), hold=None))
                continue
            if job.state is not JobState.PENDING:
                err = err or SlurmErrno.JOB_NOT_PENDING
                continue
            refused = await forward(changes, job)
            if refused is not None:
                err = refused
                continue
            job = changes.current(job)  # as it is now: events may have changed it meanwhile
            if job.state is not JobState.PENDING:
                err = err or SlurmErrno.JOB_NOT_PENDING
                continue
            if index is not None:
                job = _take_task(gw, job, index, changes)
            changes.add(change(job))
        results.append(OpResult(target_name(target), err))
    await changes.flush()
    return results
