"""Preemption for jobs waiting in the queue of a Kubernetes cluster that Volcano places.

Such a job was handed to the cluster at once (the gateway keeps no books of its nodes), so no
scheduling cycle of the gateway ever finds it blocked. Caldera still decides who is preempted
there, with the same rules as on the clusters it places itself (docs/preemption.md,
"Kubernetes under Volcano"): each cycle, for every job of a preempting QOS waiting in such a
queue (highest priority first) that does not fit the free room now, the victims are chosen by
`Preemption.attempt` over the cluster's room as its backend sees it (`ShowsRoom`: free per
node, and what each running job's pods hold), and handed to the Preempter like the cycle's
own: WillEvict first for a privileged job, then the victims' PreemptMode and GraceTime (pods
deleted with that grace), PREEMPTED or requeued. Volcano binds the preemptor once the
victims' pods are gone (it counts terminating pods as used), so the two never overlap.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING

from gateway.backend.capabilities import ShowsRoom
from gateway.model.job import HANDING, Job, RankPlacement
from gateway.model.state import JobState
from gateway.policy.preempt_rules import may_preempt_any
from gateway.scheduler.cycle import placement_now
from gateway.scheduler.plugins import Registry
from gateway.scheduler.preempt import released
from gateway.scheduler.selection import Target, targets_on
from gateway.scheduler.snapshot import NodeFree, Snapshot
from gateway.store.base import StoredEvent, StoreError
from gateway.store.sqlite import Batch

if TYPE_CHECKING:
    from gateway.control.preemption import Preempter

__all__ = ["QueuedPreemption"]

log = logging.getLogger("caldera.preempt")


class QueuedPreemption:
    """The victims of jobs waiting in self-placing clusters' own queues."""

    def __init__(self, preempter: Preempter) -> None:
        self.p = preempter
        self.asking: set[int] = set()  # preemptors that named victims in the last round
        self.waiting: set[int] = set()  # preemptors whose victims were handed over

    async def victims(self) -> dict[int, tuple[int, ...]]:
        """This round's preemptor -> victims, over every cluster that shows its room."""
        await self._started()
        out: dict[int, tuple[int, ...]] = {}
        for name, caps in self.p.gw.caps.items():
            if caps.places_itself and caps.shows_room is not None:
                out.update(self._on(name, caps.shows_room))
        for preemptor in self.asking - set(out):  # fits now, or gone: no marks stand
            if preemptor in self.p.will_evict.marks:
                await self.p.will_evict.withdraw_all(preemptor, "not-needed")
        self.asking = set(out)
        self.waiting |= set(out)
        return out

    def _on(self, name: str, shows: ShowsRoom) -> dict[int, tuple[int, ...]]:
        """The victims for the jobs waiting in one cluster's queue, highest priority first
        (a victim is claimed by one preemptor)."""
        gw = self.p.gw
        cluster = gw.clusters.get(name)
        state = self.p.policy()
        queued = sorted(
            (
                j
                for j in gw.jobs.queued.values()
                if j.cluster == name
                and j.state is JobState.PENDING
                and j.backend_id not in (None, "", HANDING)
                and j.hold is None
                and may_preempt_any(self.p.cfg, state, j)  # cheap: most jobs preempt nothing
            ),
            key=lambda j: (-j.priority, j.job_id),
        )
        room = shows.room() if queued and cluster is not None else None
        if room is None or cluster is None:
            return {}
        running = tuple(
            replace(j, placement=held)
            for j in gw.jobs.active.values()
            if j.cluster == name and (held := room.held.get((j.job_id, j.restart_count)))
        )
        # pods of runs that have ended for the record (a victim past its grace) are about to
        # go: their room counts as free (Volcano's FutureIdle), or it would take new victims
        ending = [
            replace(j, placement=ranks)
            for (jid, run), ranks in room.held.items()
            if (j := gw.jobs.get(jid)) is not None
            and not (j.state.is_active and j.restart_count == run)
        ]
        free = released(room.free, ending)
        snap = Snapshot(
            now=gw.clock(),
            pending=tuple(queued),
            running=running,
            clusters={name: cluster},
            free=free,
            def_mem_per_cpu_mb=gw.config.def_mem_per_cpu_mb,
        )
        rules = self.p.rules(snap)
        out: dict[int, tuple[int, ...]] = {}
        if rules is None:
            return out
        for job in queued:
            targets = tuple(t for t in targets_on(job, cluster, name) if _named(job, t))
            place = partial(_place, job, targets, gw.registry, snap)
            if not targets or place(dict(free)) is not None:
                continue  # its cluster is about to start it without anyone's room
            got = rules.attempt(job, dict(free), place)
            if got is not None:
                out[job.job_id] = got[0]
        return out

    async def _started(self) -> None:
        """`preempt-start` for the preemptors that their cluster started."""
        gw = self.p.gw
        for preemptor in list(self.waiting):
            job = gw.jobs.get(preemptor)
            if job is not None and job.state is JobState.PENDING:
                continue
            self.waiting.discard(preemptor)
            if job is not None and job.state.is_active:
                event = StoredEvent(preemptor, gw.clock(), "preempt-start", {})
                try:
                    await gw.committer.commit(Batch(events=[event]))
                except StoreError as exc:
                    log.error("job %s: preempt-start not stored: %s", preemptor, exc)


def _place(
    job: Job,
    targets: tuple[Target, ...],
    reg: Registry,
    snap: Snapshot,
    free: dict[str, NodeFree],
) -> tuple[Target, tuple[RankPlacement, ...]] | None:
    return placement_now(job, targets, free, reg, snap)


def _named(job: Job, target: Target) -> bool:
    """The partition the job waits in on that cluster (the one it was handed to)."""
    return not job.partition or target.partition in job.partition.split(",")
