"""Acting on the cycle's preemption decisions, for the clusters the gateway places itself.

For each victim the cycle names (gateway/scheduler/preempt.py): a `preempt` event on the
victim and a `preempting` event on the preemptor; with GraceTime, SIGTERM to every
process of the victim (`preempt-signal`); once the grace is over, its run is ended and
confirmed gone (the backend's `EndsAttempts`, as a requeue does; else a SIGKILL), then the
victim is recorded PREEMPTED (CANCEL) or requeued (REQUEUE) with a `preempt-end` event.
Only then are its resources free, so the preemptor starts (`preempt-start`) no earlier
than its victims' runs have ended: the two never overlap. A privileged preemptor (QOS flag
`Privileged`) first marks its victims WillEvict for a notice (control/will_evict.py).

From the moment a victim is chosen its run is marked as being ended by the gateway, so
what the backend reports about that run (a job that exits on its SIGTERM) stays out of the
record: the preemption records how it ends.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING

from gateway.control.will_evict import WILL_EVICT, WillEvict
from gateway.model.backend import BackendError
from gateway.model.cluster import Partition
from gateway.model.job import Job
from gateway.model.state import JobState, Reason
from gateway.policy.model import PolicyState
from gateway.policy.preempt_rules import (
    Mode,
    PreemptConfig,
    grace_s,
    may_preempt,
    may_preempt_any,
    mode_of,
    privileged,
)
from gateway.scheduler.cycle import CycleResult
from gateway.scheduler.preempt import Preemption
from gateway.scheduler.snapshot import Snapshot
from gateway.store.base import StoredEvent, StoreError
from gateway.store.sqlite import Batch

if TYPE_CHECKING:
    from gateway.control.gateway import Gateway

__all__ = ["Preempter"]

log = logging.getLogger("caldera.preempt")

_SIGTERM, _SIGKILL = 15, 9
REQUEUE_DELAY_S = 121  # slurmctld: cred_expire (120 s) + 1 before a requeued job may start


@dataclass
class _Victim:
    job_id: int
    run: int
    preemptor: int
    mode: Mode
    deadline: float  # gateway clock: when the run is ended


class Preempter:
    """One gateway's preemptions in progress."""

    def __init__(
        self, gw: Gateway, cfg: PreemptConfig, policy: Callable[[], PolicyState | None]
    ) -> None:
        self.gw = gw
        self.cfg = cfg
        self.policy = policy
        self.victims: dict[int, _Victim] = {}
        self.waiting: set[int] = set()  # preemptors whose victims were chosen
        self.will_evict = WillEvict(gw, self._notice_s, lambda: self.victims.keys())

    def _notice_s(self, preemptor: Job) -> int:
        """A privileged preemptor's WillEvict notice: its QOS's GraceTime."""
        state = self.policy()
        qos = state.qos.get(preemptor.qos) if state is not None else None
        return qos.grace_time_s if qos is not None else 0

    def _parts(self) -> dict[str, Partition]:
        """The partitions of the clusters the gateway places itself, by name."""
        gw = self.gw
        return {
            p.name: p
            for name, cluster in gw.clusters.items()
            if (caps := gw.caps.get(name)) is None or not caps.places_itself
            for p in cluster.partitions
        }

    def rules(self, snap: Snapshot) -> Preemption | None:
        """The cycle's preemption input (None: preemption is off)."""
        if not self.cfg.enabled:
            return None
        ending: dict[int, set[int]] = {}
        for v in self.victims.values():
            ending.setdefault(v.preemptor, set()).add(v.job_id)
        state = self.policy()
        test = partial(may_preempt, self.cfg, state, self._parts(), snap.now)
        ends = {k: frozenset(v) for k, v in ending.items()}
        first = partial(may_preempt_any, self.cfg, state)
        return Preemption(
            test,
            snap.running,
            ends,
            worth_asking=first,
            delayed=partial(privileged, state),
            marked=self.will_evict.marked(),
        )

    async def after_cycle(self, result: CycleResult) -> None:
        """Record the starts of preemptors, act on new victims, end those whose grace is
        over."""
        gw = self.gw
        started = [d.job.job_id for d in result.starts if d.job.job_id in self.waiting]
        if started:
            now = gw.clock()
            events = [StoredEvent(j, now, "preempt-start", {}) for j in started]
            self.waiting.difference_update(started)
            await self._events(events)
        state = self.policy()
        for preemptor, ids in result.preempt.items():
            fresh = tuple(v for v in ids if v not in self.victims)
            pre = gw.jobs.get(preemptor)
            delayed = fresh and pre is not None and privileged(state, pre)
            if delayed and not await self.will_evict.update(preemptor, fresh):
                continue  # WillEvict: the notice is still running
            for vid in fresh:
                await self._choose(preemptor, vid)
        await self.will_evict.settle(set(result.preempt), {d.job.job_id for d in result.starts})
        await self.tick()

    async def _events(self, events: list[StoredEvent]) -> None:
        try:
            await self.gw.committer.commit(Batch(events=events))
        except StoreError as exc:
            log.error("preemption events not stored: %s", exc)

    async def _choose(self, preemptor: int, vid: int) -> None:
        gw = self.gw
        job = gw.jobs.get(vid)
        if job is None or not job.state.is_active:
            return
        state = self.policy()
        parts = self._parts()
        mode = mode_of(self.cfg, state, job, gw.config.job_requeue, parts)
        grace = grace_s(self.cfg, state, job, parts)
        now = gw.clock()
        deadline = now + grace * gw.config.time_scale  # job seconds, as time limits
        self.victims[vid] = _Victim(vid, job.restart_count, preemptor, mode, deadline)
        self.waiting.add(preemptor)
        gw.ending_run(job)
        await self._events(
            [
                StoredEvent(
                    vid,
                    now,
                    "preempt",
                    {"by": preemptor, "mode": mode.value.upper(), "grace_s": grace},
                ),
                StoredEvent(preemptor, now, "preempting", {"victim": vid}),
            ]
        )
        log.info("job %s preempts job %s (%s, grace %d s)", preemptor, vid, mode.value, grace)
        if grace > 0:
            backend = gw.backend_for(job)
            if backend is not None:
                try:
                    await asyncio.to_thread(backend.cancel, job, _SIGTERM, False)
                except Exception as exc:  # noqa: BLE001 - the grace still ends it
                    log.warning("SIGTERM to preempted job %s: %s", vid, exc)
            await self._events([StoredEvent(vid, gw.clock(), "preempt-signal", {"signal": 15})])

    def _requeued(self, job: Job) -> Job:
        """The victim back in the queue as slurmctld requeues it: eligible again only
        after the credential lifetime (checked on the test cluster: `scontrol requeue`
        leaves Reason=BeginTime, EligibleTime 121 s later), which also keeps it from
        taking back the room its preemptor is about to start in."""
        out = self.gw.requeued(job)
        begin = self.gw.clock() + REQUEUE_DELAY_S * self.gw.config.time_scale
        spec = replace(out.spec, begin=math.ceil(begin))
        return replace(out, spec=spec, reason=Reason.BEGIN_TIME, eligible_time=None)

    async def tick(self) -> None:
        """End the victims whose grace is over (each cycle, pending jobs or not)."""
        gw = self.gw
        await self.will_evict.tick()
        now = gw.clock()
        self.waiting = {
            j for j in self.waiting if (p := gw.jobs.get(j)) and p.state is JobState.PENDING
        }
        for victim in [v for v in self.victims.values() if v.deadline <= now]:
            await self._end(victim)

    async def _end(self, victim: _Victim) -> None:
        gw = self.gw
        key = (victim.job_id, victim.run)
        job = gw.jobs.get(victim.job_id)
        if job is None or job.restart_count != victim.run or not job.state.is_active:
            del self.victims[victim.job_id]  # ended or requeued meanwhile by someone else
            gw.ended_runs([key])
            return
        ends = gw.capabilities(job).ends_attempts
        try:
            if ends is not None:
                await asyncio.to_thread(ends.end_attempt, job)
            else:
                backend = gw.backend_for(job)
                if backend is not None:
                    await asyncio.to_thread(backend.cancel, job, _SIGKILL, False)
        except BackendError as exc:  # not confirmed gone yet: try again next cycle
            log.warning("preempted job %s not ended yet: %s", victim.job_id, exc)
            return
        except Exception:  # logged; retried next cycle
            log.exception("ending preempted job %s failed", victim.job_id)
            return
        current = gw.jobs.get(victim.job_id, job)
        if current.restart_count != victim.run or not current.state.is_active:
            del self.victims[victim.job_id]
            gw.ended_runs([key])
            return
        if current.state_desc == WILL_EVICT:
            current = replace(current, state_desc=None)
        if victim.mode is Mode.REQUEUE:
            out = self._requeued(current)
        else:  # Slurm: State PREEMPTED, ExitCode 0:15
            out = gw.ended(current, JobState.PREEMPTED, _SIGTERM)
        del self.victims[victim.job_id]
        gw.metrics.preempted(current.cluster, victim.mode.value)
        try:
            await gw.commit_or_log([out], "preempt-end", mode=victim.mode.value.upper())
        finally:
            gw.ended_runs([key])
        gw.wake()
