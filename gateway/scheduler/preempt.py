"""Preemption victims: which running jobs a pending job that cannot start now should end.

Slurm's rule (preempt/qos, preempt/partition_prio, slurmctld's _preempt_job_list): a
preemptor may take the resources of running jobs it is allowed to preempt; victims are
whole jobs (every rank of a gang), the fewest and lowest-priority ones whose resources
suffice on the nodes the preemptor would use, never more than needed. A victim already
being ended (grace time running) counts as free for the preemptor it was chosen for, so a
preemptor waiting for its victims picks no new ones.

`fewest_victims` is the delayed, job-level preemption's choice (OpenI-Octopus): the
fewest whole jobs rather than the lowest-priority ones; its victims are marked WillEvict
first (gateway/control/will_evict.py), and a job marked for one preemptor is never taken
by another.

PreemptMode=SUSPEND: a victim stopped for its preemptor keeps its resources in the free map
(it resumes there); `Preemption.room` gives its preemptor alone the free map with that room
released, so the preemptor starts on it while the victim stays suspended, and no other job
can take it. A suspended job is never a candidate for another preemptor.

`choose_victims` is pure; `Preemption` is the cycle's per-cycle bookkeeping (a victim is
claimed by one preemptor per cycle; the cycle keeps what a preemptor will use out of
lower-priority jobs' reach meanwhile).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import combinations
from typing import TypeVar

from gateway.model.job import Job, RankPlacement
from gateway.model.state import JobState
from gateway.scheduler.request import node_request
from gateway.scheduler.snapshot import NodeFree

__all__ = ["Preemption", "choose_victims", "fewest_victims", "released"]

P = TypeVar("P")

# (preemptor, running job) -> whether the preemptor may preempt it now
MayPreempt = Callable[[Job, Job], bool]
# a free map -> the preemptor's placement on it, or None
Fits = Callable[[dict[str, NodeFree]], Sequence[RankPlacement] | None]
FEWEST_BUDGET = 2000  # placement tests fewest_victims may spend on one preemptor


def released(free: Mapping[str, NodeFree], victims: Iterable[Job]) -> dict[str, NodeFree]:
    """The free map once the victims' runs are gone (every rank of each)."""
    out = dict(free)
    for job in victims:
        exclusive = node_request(job.spec, ()).exclusive
        for rank in job.placement:
            cur = out.get(rank.node)
            if cur is None:
                continue
            node = cur.node
            out[rank.node] = replace(
                cur,
                cpus=min(node.cpus, cur.cpus + rank.cpus),
                memory_mb=min(node.memory_mb, cur.memory_mb + rank.memory_mb),
                gpus=cur.gpus | frozenset(rank.gpus),
                exclusive_jobs=max(0, cur.exclusive_jobs - int(exclusive)),
                jobs=max(0, cur.jobs - 1),
            )
    return out


def _order(job: Job, ending: frozenset[int]) -> tuple[int, int, float, int]:
    """Victims already being ended first (they cost nothing more), then the lowest
    priority, then the youngest (Slurm prefers to preempt the job that ran least)."""
    return (
        0 if job.job_id in ending else 1,
        job.priority,
        -(job.start_time or 0.0),
        -job.job_id,
    )


def _candidates(
    preemptor: Job,
    running: Iterable[Job],
    free: Mapping[str, NodeFree],
    may_preempt: MayPreempt,
    first: frozenset[int],
) -> list[Job]:
    return sorted(
        (
            r
            for r in running
            if r.state.is_active
            and (r.state is not JobState.SUSPENDED or r.job_id in first)
            and r.placement
            and r.job_id != preemptor.job_id
            and any(p.node in free for p in r.placement)
            and may_preempt(preemptor, r)
        ),
        key=lambda r: _order(r, first),
    )


def _on_used(
    chosen: Sequence[Job], free: Mapping[str, NodeFree], fits: Fits
) -> tuple[Job, ...] | None:
    """The chosen victims that hold room on the nodes the preemptor would use."""
    placement = fits(released(free, chosen))
    if placement is None:
        return None
    used = {p.node for p in placement}
    return tuple(v for v in chosen if any(p.node in used for p in v.placement))


def fewest_victims(
    preemptor: Job,
    running: Iterable[Job],
    free: Mapping[str, NodeFree],
    fits: Fits,
    may_preempt: MayPreempt,
    marked: frozenset[int] = frozenset(),
    budget: int = FEWEST_BUDGET,
) -> tuple[Job, ...] | None:
    """The fewest whole jobs whose resources let `preemptor` start (OpenI-Octopus's
    job-level preemption): every set of one, two, then three victims is tried, lowest
    priority first (its `marked` victims before others, so that marks stay put while they
    still suffice), within `budget` placement tests; past three victims or the budget,
    `choose_victims`'s greedy pick, trimmed. None when even every allowed victim would not
    suffice."""
    cands = _candidates(preemptor, running, free, may_preempt, marked)
    tests = 0
    for size in range(1, min(3, len(cands)) + 1):
        for combo in combinations(cands, size):
            tests += 1
            if tests > budget:
                return choose_victims(preemptor, cands, free, fits, may_preempt)
            got = _on_used(combo, free, fits)
            if got is not None:
                return got
    if len(cands) <= 3:
        return None
    return choose_victims(preemptor, cands, free, fits, may_preempt)


def choose_victims(
    preemptor: Job,
    running: Iterable[Job],
    free: Mapping[str, NodeFree],
    fits: Fits,
    may_preempt: MayPreempt,
    ending: frozenset[int] = frozenset(),
) -> tuple[Job, ...] | None:
    """The victims that let `preemptor` start (`fits`: its placement on a free map, or
    None), or None when preempting every job it may preempt would not suffice. Jobs in
    `ending` are already being ended for it and are always usable."""
    cands = _candidates(
        preemptor, running, free, lambda p, r: r.job_id in ending or may_preempt(p, r), ending
    )
    chosen: list[Job] = []
    placement: Sequence[RankPlacement] | None = None
    for cand in cands:
        chosen.append(cand)
        placement = fits(released(free, chosen))
        if placement is not None:
            break
    if placement is None:
        return None
    # never more than needed: drop, highest priority first, any victim without which the
    # preemptor still fits (a job chosen early may have become unnecessary)
    for victim in sorted(chosen, key=lambda r: _order(r, ending), reverse=True):
        if victim.job_id in ending:
            continue
        rest = [v for v in chosen if v is not victim]
        if fits(released(free, rest)) is not None:
            chosen = rest
    return _on_used(chosen, free, fits)


@dataclass
class Preemption:
    """One cycle's preemption: the rules, the running jobs, and the victims claimed so far
    (job id -> the victims it waits for)."""

    may_preempt: MayPreempt
    running: tuple[Job, ...]
    ending: Mapping[int, frozenset[int]] = field(default_factory=dict)  # preemptor -> victims
    claimed: dict[int, tuple[int, ...]] = field(default_factory=dict)
    # a cheap first test per pending job (e.g. its QOS lists no other: never a preemptor)
    worth_asking: Callable[[Job], bool] = lambda job: True
    # delayed job-level preemption: whether a job picks the fewest victims and marks them
    # WillEvict (control/will_evict.py), and the marks standing (preemptor -> victims)
    delayed: Callable[[Job], bool] = lambda job: False
    marked: Mapping[int, frozenset[int]] = field(default_factory=dict)
    # PreemptMode=SUSPEND: victims already stopped for their preemptor (in `ending`)
    stopped: frozenset[int] = frozenset()

    def room(
        self, job_id: int, victims: Sequence[int], free: Mapping[str, NodeFree]
    ) -> dict[str, NodeFree] | None:
        """The free map the preemptor may start on now: with the room of its victims
        released when every one of them is stopped for it (SUSPEND); None otherwise (it
        waits for them to be stopped or ended)."""
        mine = self.ending.get(job_id, frozenset())
        if not victims or any(v not in self.stopped or v not in mine for v in victims):
            return None
        return released(free, [r for r in self.running if r.job_id in victims])

    def attempt(
        self,
        job: Job,
        free: dict[str, NodeFree],
        place: Callable[[dict[str, NodeFree]], tuple[P, Sequence[RankPlacement]] | None],
    ) -> tuple[tuple[int, ...], Sequence[RankPlacement]] | None:
        """Victims for `job` and the placement it will have once they are gone, or None.
        The victims are claimed for this cycle; the caller keeps the placement's share
        that is free now out of later jobs' reach (Planner.hold)."""
        mine = self.ending.get(job.job_id, frozenset())
        if not mine and not self.worth_asking(job):
            return None
        busy = {v for vs in self.claimed.values() for v in vs}
        for owners in (self.ending, self.marked):  # another preemptor's: never this one's
            busy |= {v for p, vs in owners.items() if p != job.job_id for v in vs}
        preemptors = set(self.ending) | set(self.claimed) | set(self.marked)
        running = [r for r in self.running if r.job_id not in busy and r.job_id not in preemptors]

        def fits(f: dict[str, NodeFree]) -> Sequence[RankPlacement] | None:
            got = place(dict(f))
            return None if got is None else got[1]

        if not mine and self.delayed(job):
            marks = self.marked.get(job.job_id, frozenset())
            victims = fewest_victims(job, running, free, fits, self.may_preempt, marks)
        else:
            victims = choose_victims(job, running, free, fits, self.may_preempt, mine)
        if not victims:
            return None
        placement = fits(released(free, victims)) or ()
        ids = tuple(v.job_id for v in victims)
        self.claimed[job.job_id] = ids
        return ids, placement
