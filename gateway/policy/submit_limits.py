"""Submit-time limits (slurmctld's acct_policy_validate at submission): QOS GrpSubmitJobs
and MaxSubmitJobsPerUser, association GrpSubmitJobs (up the tree) and MaxSubmitJobs
(inherited down it). Unlike the run-time limits (limits.py), these refuse the submission:
nothing is stored, and sbatch prints the reason and ESLURM_ACCOUNTING_POLICY's text.

Jobs counted are those not finished (pending, running, suspended); an array counts one per
task, as Slurm counts it (a pending meta record counts its unstarted tasks).
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.compat.errors import CompatError, Diagnostic, Level
from gateway.model.job import Job
from gateway.policy.jobs import assoc_index, assoc_of
from gateway.policy.model import Assoc, PolicyState

__all__ = [
    "ACCOUNTING_POLICY",
    "SubmitLimitError",
    "check_submit",
    "submit_limit_reason",
    "task_count",
]

# slurm_errno.c, ESLURM_ACCOUNTING_POLICY
ACCOUNTING_POLICY = (
    "Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)"
)


class SubmitLimitError(CompatError):
    """A submission over a submit limit: sbatch's two lines and exit status 1."""

    def __init__(self, reason: str) -> None:
        super().__init__(
            Diagnostic(Level.ERROR, reason),
            Diagnostic(Level.ERROR, f"Batch job submission failed: {ACCOUNTING_POLICY}"),
            exit_code=1,
        )
        self.reason = reason


def task_count(job: Job) -> int:
    """How many jobs a record counts for: its unstarted tasks for an array's meta record
    (a new array: every task), else one."""
    if job.array_task_id is None and job.array_pending is not None:
        return job.array_pending.count
    if job.array_task_id is None and job.spec.array is not None and not job.array_job_id:
        return job.spec.array.count
    return 1


def _lineage(job: Job, state: PolicyState) -> list[Assoc]:
    assoc = assoc_of(job, state, assoc_index(state))
    return [] if assoc is None else state.lineage(assoc)


def _inherited_max_submit(lineage: list[Assoc]) -> int | None:
    for a in lineage:
        if a.max_submit is not None:
            return a.max_submit
    return None


def submit_limit_reason(job: Job, state: PolicyState, active: Iterable[Job]) -> str | None:
    """Slurm's reason name when submitting `job` (not yet stored) would exceed a submit
    limit, given the jobs not finished (`active`); None when it may be submitted."""
    qos = state.qos.get(job.qos)
    lineage = _lineage(job, state)
    ids = {a.id for a in lineage}
    user_assoc = lineage[0].id if lineage else None
    want = task_count(job)
    qos_all = qos_user = own = 0
    subtree: dict[int, int] = {}
    index = assoc_index(state) if lineage else {}
    lineages: dict[int, list[Assoc]] = {}
    for other in active:
        if other.state.is_finished:
            continue
        n = task_count(other)
        if other.qos == job.qos:
            qos_all += n
            if other.user == job.user:
                qos_user += n
        if not lineage:
            continue
        mine = assoc_of(other, state, index)
        if mine is None:
            continue
        if mine.id == user_assoc:
            own += n
        if mine.id not in lineages:
            lineages[mine.id] = state.lineage(mine)
        for up in lineages[mine.id]:
            if up.id in ids:
                subtree[up.id] = subtree.get(up.id, 0) + n
    if qos is not None:
        if qos.grp_submit is not None and qos_all + want > qos.grp_submit:
            return "QOSGrpSubmitJobsLimit"
        if qos.max_submit_pu is not None and qos_user + want > qos.max_submit_pu:
            return "QOSMaxSubmitJobPerUserLimit"
    for a in lineage:
        if a.grp_submit is not None and subtree.get(a.id, 0) + want > a.grp_submit:
            return "AssocGrpSubmitJobsLimit"
    max_submit = _inherited_max_submit(lineage)
    if max_submit is not None and own + want > max_submit:
        return "AssocMaxSubmitJobLimit"
    return None


def check_submit(job: Job, state: PolicyState | None, active: Iterable[Job]) -> None:
    """Raise SubmitLimitError when `job` may not be submitted (no policy: always allowed)."""
    if state is None or not _has_submit_limits(state):
        return
    reason = submit_limit_reason(job, state, active)
    if reason is not None:
        raise SubmitLimitError(reason)


def _has_submit_limits(state: PolicyState) -> bool:
    if any(q.grp_submit is not None or q.max_submit_pu is not None for q in state.qos.values()):
        return True
    return any(a.grp_submit is not None or a.max_submit is not None for a in state.assocs)
