"""Which jobs one scancel names: its ids, narrowed by its filters, as scancel chooses them.

With a signal, -b or a filter, scancel first checks each id (each task of `12_[1-3]`)
against the unfinished jobs and reports those it does not find ("Invalid job id specified",
exit 1) before it filters; plain `scancel 12` sends the ids as they are and stays silent
about jobs already gone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gateway.control.arraytasks import (
    Target,
    names_no_active_job,
    one_per_task,
    parse_targets,
)
from gateway.model.job import Job
from gateway.model.state import JobState

__all__ = ["Filters", "select", "split_steps"]


@dataclass(frozen=True, slots=True)
class Filters:
    """scancel's -u, -n, -t and -p (None or empty: not given)."""

    user: str | None = None
    name: str | None = None
    states: frozenset[JobState] = frozenset()
    partition: str | None = None

    def __bool__(self) -> bool:
        return bool(self.user or self.name or self.states or self.partition)

    def admit(self, job: Job) -> bool:
        """Whether an unfinished job matches every filter given."""
        return (
            (self.user is None or job.user == self.user or str(job.uid) == self.user)
            and (self.name is None or job.spec.name == self.name)
            and (not self.states or job.state in self.states)
            and (self.partition is None or self.partition in job.partition.split(","))
        )


def select(
    targets: Sequence[Target], jobs: Sequence[Job], filters: Filters, verify: bool
) -> tuple[list[Target], list[Target]]:
    """(targets to act on, targets naming no unfinished job when `verify`)."""
    chosen = list(targets)
    unknown: list[Target] = []
    if verify:
        chosen = one_per_task(chosen)
        unknown = names_no_active_job(chosen, list(jobs))
        gone = set(unknown)
        chosen = [t for t in chosen if t not in gone]
    if not filters:
        return chosen, unknown
    ids = {t.job_id for t in chosen}
    picked = [
        Target(j.job_id)
        for j in jobs
        if not j.state.is_finished
        and filters.admit(j)
        and (not targets or j.job_id in ids or j.array_job_id in ids)  # ids given: only them
    ]
    return picked, unknown


def split_steps(
    steps: Sequence[str], jobs: Sequence[Job]
) -> tuple[list[tuple[str, Target, int]], list[str]]:
    """`scancel ID.STEP` operands: (those of an unfinished job, as text, job and step
    number; those scancel's check does not find, answered "Invalid job id")."""
    named: list[tuple[str, Target, int]] = []
    for text in steps:
        head, _, step = text.partition(".")
        targets = parse_targets(head)
        if targets is not None and len(targets) == 1 and step.isdigit() and len(step) < 10:
            named.append((text, targets[0], int(step)))
    unknown = set(names_no_active_job([t for _, t, _ in named], list(jobs)))
    found = [n for n in named if n[1] not in unknown]
    kept = {text for text, _, _ in found}
    return found, [text for text in steps if text not in kept]
