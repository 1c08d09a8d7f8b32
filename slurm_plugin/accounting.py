"""slurmdbd's accounting of Caldera's jobs, merged into Caldera's records for its sacct.

A Slurm job's accounting (states, times, exit codes, nodes, TRES, steps) is Slurm's; its
identity (job id, array ids, user, the request, submit time and line) is Caldera's, since
that is what the user submitted and sees in squeue. `merge_accounting` makes that one
record; `SlurmBackend.accounting(jobs)` returns one per Caldera job found in slurmdbd.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gateway.compat.fmt_common import JobExtras
from gateway.model.job import Job, Step

__all__ = ["AccountingRecord", "merge_accounting"]


@dataclass(frozen=True, slots=True)
class AccountingRecord:
    """One Caldera job as sacct shows it: the merged record, its steps and extras."""

    job: Job
    steps: tuple[Step, ...]
    extras: JobExtras | None = None


def merge_accounting(
    caldera: Job,
    slurm: Job,
    steps: tuple[Step, ...],
    extras: JobExtras | None,
    *,
    partition: str,
    node_prefix: str = "",
) -> AccountingRecord:
    """Caldera's identity and request with Slurm's accounting (`partition`: Caldera's name)."""
    nodes = tuple(node_prefix + n for n in slurm.nodes)
    job = replace(
        slurm,
        job_id=caldera.job_id,
        spec=caldera.spec,
        user=caldera.user,
        uid=caldera.uid,
        group=caldera.group,
        gid=caldera.gid,
        submit_time=caldera.submit_time,
        submit_host=caldera.submit_host,
        submit_line=caldera.submit_line,
        command=caldera.command,
        priority=caldera.priority if slurm.priority == 0 else slurm.priority,
        array_job_id=caldera.array_job_id,
        array_task_id=caldera.array_task_id,
        array_pending=None,
        partition=partition,
        cluster=caldera.cluster,
        backend_id=caldera.backend_id,
        nodes=nodes,
        placement=caldera.placement,
        eligible_time=caldera.eligible_time or slurm.eligible_time,
    )
    merged_steps = tuple(
        replace(s, job_id=caldera.job_id, nodes=tuple(node_prefix + n for n in s.nodes))
        for s in steps
    )
    return AccountingRecord(job, merged_steps, extras)
