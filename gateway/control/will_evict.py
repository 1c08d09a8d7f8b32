"""Delayed, job-level preemption (the OpenI-Octopus platform's, built on Volcano), for the
clusters the gateway places itself.

A pending job whose QOS has Caldera's `Privileged` flag and that cannot start marks the
fewest whole running jobs whose resources suffice (`fewest_victims`) as WillEvict instead
of preempting them at once: each victim shows `Reason=WillEvict` (squeue %r, scontrol
show job) and keeps running while the notice lasts, the privileged QOS's GraceTime in job
seconds. The marks are recomputed every cycle and withdrawn when the preemptor starts
(because room freed up, or elsewhere), is cancelled, or needs fewer victims; once every
mark of a preemptor has run its notice, its victims are preempted as Slurm does
(gateway/control/preemption.py: their PreemptMode, their own GraceTime, SIGTERM then end).

Every step is an event in the jobs' histories: `will-evict` (victim: by, notice_s) and
`will-evict-marked` (preemptor: victims); `will-evict-withdrawn` on both (why: started,
ended, not-needed, victim-ended, stale). A gateway restart keeps the notices: the marks
are read back from the victims' last `will-evict` events (their preemptor, their notice,
when it began), so a crash neither restarts a victim's notice nor ends it early; a mark
whose preemptor is no longer pending is withdrawn as stale.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection
from dataclasses import replace
from typing import TYPE_CHECKING

from gateway.model.job import Job
from gateway.model.state import JobState
from gateway.store.base import StoredEvent, StoreError
from gateway.store.sqlite import Batch

if TYPE_CHECKING:
    from gateway.control.gateway import Gateway

__all__ = ["WILL_EVICT", "WillEvict"]

log = logging.getLogger("caldera.preempt")

WILL_EVICT = "WillEvict"  # the victim's reason while marked (Volcano/Octopus's word)


class WillEvict:
    """The WillEvict marks standing: preemptor -> victim -> when its notice ends."""

    def __init__(
        self,
        gw: Gateway,
        notice_s: Callable[[Job], int],
        being_preempted: Callable[[], Collection[int]],
    ) -> None:
        self.gw = gw
        self.notice_s = notice_s  # the preemptor's notice in job seconds
        self.being_preempted = being_preempted  # marks handed over, runs being ended
        self.marks: dict[int, dict[int, float]] = {}
        self.shown: set[int] = set()  # jobs given Reason=WillEvict, until cleared
        self._swept = False

    def marked(self) -> dict[int, frozenset[int]]:
        """The cycle's view: preemptor -> its marked victims."""
        return {p: frozenset(vs) for p, vs in self.marks.items()}

    async def update(self, preemptor: int, victims: tuple[int, ...]) -> bool:
        """This cycle's victims for a privileged preemptor: new ones are marked, ones no
        longer needed are withdrawn. True once every mark has run its notice (the marks
        are then handed over: the caller preempts the victims)."""
        gw = self.gw
        now = gw.clock()
        current = self.marks.setdefault(preemptor, {})
        dropped = [v for v in current if v not in victims]
        if dropped:
            await self._withdraw(preemptor, dropped, "not-needed")
        fresh = [v for v in victims if v not in current]
        if fresh:
            job = gw.jobs.get(preemptor)
            notice = self.notice_s(job) if job is not None else 0
            deadline = now + notice * gw.config.time_scale
            for vid in fresh:
                current[vid] = deadline
            await self._mark(preemptor, fresh, notice)
        if all(t <= now for t in current.values()):
            del self.marks[preemptor]
            return True
        return False

    async def settle(self, preempting: set[int], started: set[int]) -> None:
        """After a cycle: withdraw the marks of preemptors that no longer name victims
        (they started, ended, or now fit without them)."""
        for preemptor in [p for p in self.marks if p not in preempting]:
            await self.withdraw_all(preemptor, self._why(preemptor, started))

    async def tick(self) -> None:
        """Each cycle, pending jobs or not: withdraw the marks of preemptors no longer
        pending (cancelled, started) and of victims that ended by themselves."""
        gw = self.gw
        for preemptor in list(self.marks):
            job = gw.jobs.get(preemptor)
            if job is None or job.state is not JobState.PENDING:
                await self.withdraw_all(preemptor, self._why(preemptor, set()))
                continue
            gone = [
                v
                for v in self.marks[preemptor]
                if (r := gw.jobs.get(v)) is None or not r.state.is_active
            ]
            if gone:
                await self._withdraw(preemptor, gone, "victim-ended")
        await self._clear_stale()

    async def _clear_stale(self) -> None:
        """Clear Reason=WillEvict where no mark stands behind it any more: a handed-over
        victim that ended or was requeued meanwhile, or, after a restart, a job the store
        still shows marked by a preemptor that is no longer pending."""
        gw = self.gw
        if not self._swept:
            self._swept = True
            await self._restore()
        marked = {v for vs in self.marks.values() for v in vs}
        ending = set(self.being_preempted())
        stale: list[Job] = []
        for vid in list(self.shown):
            job = gw.jobs.get(vid)
            if vid in marked or (vid in ending and job is not None and job.state.is_active):
                continue
            self.shown.discard(vid)
            if job is not None and job.state_desc == WILL_EVICT:
                stale.append(replace(job, state_desc=None))
        await gw.commit_or_log(stale, "will-evict-withdrawn", why="stale")

    async def _restore(self) -> None:
        """Once, after a (re)start: the marks the store shows, with their first deadline."""
        gw = self.gw
        for job in [j for j in gw.jobs.values() if j.state_desc == WILL_EVICT]:
            self.shown.add(job.job_id)
            if not job.state.is_active or job.job_id in self.being_preempted():
                continue  # ended, or handed over and inside its grace (preempt_restore.py)
            events = await asyncio.to_thread(gw.store.events, job.job_id)
            last = next((e for e in reversed(events) if e.kind == "will-evict"), None)
            if last is None:
                continue
            by, notice = last.detail.get("by"), last.detail.get("notice_s")
            if not isinstance(by, int) or not isinstance(notice, int):
                continue
            preemptor = gw.jobs.get(by)
            if preemptor is None or preemptor.state is not JobState.PENDING:
                continue  # cleared below as stale
            deadline = last.time + notice * gw.config.time_scale
            self.marks.setdefault(by, {})[job.job_id] = deadline
            log.info(
                "job %s: WillEvict by %s restored (notice ends in %.1f s)",
                job.job_id,
                by,
                deadline - gw.clock(),
            )

    def _why(self, preemptor: int, started: set[int]) -> str:
        job = self.gw.jobs.get(preemptor)
        if preemptor in started:
            return "started"
        if job is None:
            return "ended"
        if job.state is JobState.PENDING:
            return "not-needed"
        return "started" if job.state.is_active else "ended"

    async def withdraw_all(self, preemptor: int, why: str) -> None:
        """Lift every mark of one preemptor."""
        await self._withdraw(preemptor, list(self.marks.get(preemptor, {})), why)

    async def _mark(self, preemptor: int, victims: list[int], notice: int) -> None:
        gw = self.gw
        jobs = [j for v in victims if (j := gw.jobs.get(v)) is not None]
        marked = [replace(j, state_desc=WILL_EVICT) for j in jobs]
        self.shown.update(j.job_id for j in jobs)
        await gw.commit_or_log(marked, "will-evict", by=preemptor, notice_s=notice)
        await self._event(preemptor, "will-evict-marked", {"victims": victims, "notice_s": notice})
        log.info("job %s marks %s WillEvict (notice %d s)", preemptor, victims, notice)

    async def _withdraw(self, preemptor: int, victims: list[int], why: str) -> None:
        gw = self.gw
        current = self.marks.get(preemptor, {})
        for vid in victims:
            current.pop(vid, None)
        if not current:
            self.marks.pop(preemptor, None)
        if not victims:
            return
        jobs = [j for v in victims if (j := gw.jobs.get(v)) is not None]
        cleared = [replace(j, state_desc=None) for j in jobs if j.state_desc == WILL_EVICT]
        self.shown.difference_update(victims)
        await gw.commit_or_log(cleared, "will-evict-withdrawn", by=preemptor, why=why)
        await self._event(preemptor, "will-evict-withdrawn", {"victims": victims, "why": why})
        log.info("job %s withdraws WillEvict from %s (%s)", preemptor, victims, why)

    async def _event(self, job_id: int, kind: str, detail: dict[str, object]) -> None:
        if self.gw.jobs.get(job_id) is None:
            return
        try:
            event = StoredEvent(job_id, self.gw.clock(), kind, detail)
            await self.gw.committer.commit(Batch(events=[event]))
        except StoreError as exc:
            log.error("job %s: %s not stored: %s", job_id, kind, exc)
