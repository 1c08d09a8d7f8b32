"""`scontrol update JobId=...`: every field of one command applied to a job, or none.

The fields' rules are job_update.py's; here the job is found, the caller checked, what a
field is checked against looked up (the partition's MaxTime, up to which a user may raise
a pending job's time limit; node names; the partitions' node features) and a new time
limit or hold forwarded to a backend that already holds the job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from gateway.compat.slurm_errors import SlurmErrno
from gateway.control.arraytasks import Target
from gateway.control.bulk import Changes
from gateway.control.gateway import Gateway
from gateway.control.job_update import UpdateSite, not_persistent, update_field
from gateway.control.ops import (
    OpResult,
    allowed,
    call_backend,
    forward_hold,
    resolve_target,
    target_name,
)
from gateway.control.submit import Caller
from gateway.model.job import Hold, Job
from gateway.model.state import JobState
from gateway.model.values import INFINITE
from gateway.policy.service import policy_of

__all__ = ["apply_update"]


# fields a pending job's backend queue (Slurm's) is not told of: refused for a job queued
# there, rather than changed here alone
_NOT_FORWARDED = frozenset(
    {
        "reqnodelist",
        "excnodelist",
        "features",
        "requeue",
        "workdir",
        "stdout",
        "minmemorynode",
        "minmemorycpu",
        "licenses",
    }
)


def _site(gw: Gateway) -> UpdateSite:
    """What update_job checks a field against: every node and its features (the test
    cluster took Features=gpu for a job of a partition whose nodes lack it, found on
    others) and the clusters' licences; MaxTime is each job's (`_max_time`)."""
    nodes = [n for c in gw.clusters.values() for n in c.nodes]
    return UpdateSite(
        nodes=frozenset(n.name for n in nodes),
        features=tuple(n.features for n in nodes),
        clusters=tuple(gw.clusters.values()),
    )


def _max_time(gw: Gateway, job: Job) -> int:
    """MaxTime (minutes) of the job's first partition; INFINITE when unknown."""
    first = job.partition.split(",")[0]
    for cluster in gw.clusters.values():
        part = cluster.partition(first)
        if part is not None:
            return part.max_time or INFINITE
    return INFINITE


async def _forward_time_limit(gw: Gateway, job: Job) -> SlurmErrno | None:
    """A new time limit reaches a job its backend already holds."""
    updates = gw.capabilities(job).time_limit if job.backend_id else None
    if updates is None:
        return None
    return await call_backend(lambda: updates.update_time_limit(job, job.time_limit))


async def apply_update(
    gw: Gateway, target: Target, fields: Mapping[str, str], caller: Caller
) -> OpResult:
    """scontrol update JobId=... Key=Value...: all fields or none."""
    view = Changes(gw, "update", caller.uid)
    await view.load([target])
    matched = resolve_target(view, target)
    if not matched:
        return OpResult(target_name(target), SlurmErrno.INVALID_JOB_ID)
    changed: list[Job] = []
    lowered: list[Job] = []
    warning: SlurmErrno | None = None
    shared = _site(gw)  # (once: an array's update matches many records)
    for job, _ in matched:
        job = gw.jobs.get(job.job_id, job)
        site = replace(shared, max_time=_max_time(gw, job))
        if not allowed(job, caller):
            return OpResult(target_name(target), SlurmErrno.USER_ID_MISSING)
        if job.state.is_finished:
            return OpResult(target_name(target), SlurmErrno.JOB_FINISHED)
        for key, value in fields.items():
            if key.lower() == "arraytaskthrottle" and target.tasks is not None:
                continue  # a task has no array record: slurmctld ignores it
            queued = job.backend_id and job.state is JobState.PENDING  # (by Slurm)
            if queued and key.lower() in _NOT_FORWARDED:
                return OpResult(target_name(target), SlurmErrno.NOT_SUPPORTED)
            out = update_field(job, key, value, caller.operator, site)
            if isinstance(out, SlurmErrno):
                return OpResult(target_name(target), out)
            if key.lower() == "timelimit":
                refused = await _forward_time_limit(gw, out)
                if refused is not None:
                    return OpResult(target_name(target), refused)
            if out.hold is not None and job.hold is None:  # Priority=0
                refused = await forward_hold(view, out, out.hold is Hold.ADMIN)
                if refused is not None:
                    return OpResult(target_name(target), refused)
            if key.lower() == "priority" and not_persistent(job, out, caller.operator):
                warning = SlurmErrno.PRIO_RESET_FAIL  # applied, and said to be fleeting
                lowered.append(out)
            job = out
        changed.append(job)
    await gw.commit(changed, "update", by=caller.uid, fields=dict(fields))
    for job in lowered:
        policy_of(gw).lowered_by_user(job)
    return OpResult(target_name(target), warning)
