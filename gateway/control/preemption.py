"""Acting on the cycle's preemption decisions, for the clusters the gateway places itself.

As slurmctld 22.05 does (recorded on the burst test cluster, tests/data/
slurm_preempt_22.05.json). For each victim the cycle names (gateway/scheduler/preempt.py):
a `preempt` event on the victim and a `preempting` event on the preemptor; PreemptTime now.
With GraceTime, EndTime moves to the grace's end and SIGCONT and SIGTERM go to the job's
steps, not its batch shell (`preempt-signal`; a backend that `EndsGracefully` is given the
grace itself, so Kubernetes deletes the pods with it). Once the grace is over, a backend that
`PreemptsRuns` (the local runner) ends the run as slurmstepd does: `DUE TO PREEMPTION` in
the job's output, SIGCONT and SIGTERM to every process, SIGKILL after KillWait; meanwhile
the victim shows COMPLETING with EndTime = PreemptTime = that moment (`preempt-kill`).
When the run has reported its end, or elsewhere at once, it is ended and confirmed gone (the
backend's `EndsAttempts`, as a requeue does; else a SIGKILL), then the victim is recorded
PREEMPTED (CANCEL; ExitCode the batch shell's status) or requeued (REQUEUE) with a
`preempt-end` event. Only then are its resources free, so the preemptor starts
(`preempt-start`) no earlier than its victims' runs have ended: the two never overlap. A
privileged preemptor (QOS flag `Privileged`) first marks its victims WillEvict for a notice
(control/will_evict.py).

From the moment a victim is chosen its run is marked as being ended by the gateway, so
what the backend reports about that run (a job that exits on its SIGTERM) stays out of the
record: the preemption records how it ends.

SUSPEND (preempt/partition_prio): the victim is stopped at once (no GraceTime), SUSPENDED
with `preempt-suspend`; its preemptor then starts on its room (scheduler/preempt.py
`Preemption.room`) while the victim keeps it, and once the preemptor has ended (or is
cancelled before it starts) the victim continues (`preempt-resume`), RUNNING again with its
time limit clock moved by the pause. A victim on a backend that cannot suspend
(`Capabilities.suspends`: Slurm, Kubernetes) is requeued instead (cancelled if it may not
be requeued). The victim's record says who stopped it (`Job.suspended_by`), so a gateway
restart picks up the victims still suspended and resumes each when its preemptor ends. An
operator may `scontrol resume` such a victim early, or `scontrol suspend` it again, which
makes it the operator's: it is then not resumed when the preemptor ends.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING

from gateway.compat.slurm_errors import SlurmErrno
from gateway.control.preempt_restore import in_grace
from gateway.control.queued_preempt import QueuedPreemption
from gateway.control.suspend import resume_run, suspend_run
from gateway.control.will_evict import WILL_EVICT, WillEvict
from gateway.model.backend import BackendError
from gateway.model.cluster import Partition
from gateway.model.job import Job
from gateway.model.state import JobState
from gateway.model.suspension import SUSPENDED_BY_OPERATOR, caldera_suspended, expected_end
from gateway.model.values import INFINITE, NO_VAL
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

_SIGCONT, _SIGTERM, _SIGKILL = 18, 15, 9
_REPORT_MARGIN_S = 5.0  # past KillWait: a run that never reports its end is ended anyway


@dataclass
class _Victim:
    job_id: int
    run: int
    preemptor: int
    mode: Mode
    deadline: float  # gateway clock: when the run is ended (SUSPEND: stopped)
    stopped: bool = False  # SUSPEND: stopped, waiting for its preemptor to end
    killed_at: float | None = None  # asked to end (COMPLETING), waiting for the run's report
    report_by: float = math.inf  # when to stop waiting for it


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
        self.queued = QueuedPreemption(self)  # jobs in Volcano's queue (control/queued_preempt.py)
        self._recovered = False
        self._graces_read = False

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
        self._recover()
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
            stopped=frozenset(v.job_id for v in self.victims.values() if v.stopped),
        )

    def _recover(self) -> None:
        """Once, after a (re)start: the victims the store says a preemptor suspended, or
        was ending (COMPLETING: asked to end, KillWait running)."""
        if self._recovered:
            return
        self._recovered = True
        now = self.gw.clock()
        for job in list(self.gw.jobs.active.values()):
            by = job.suspended_by
            if caldera_suspended(job) and by is not None and by != SUSPENDED_BY_OPERATOR:
                self.victims[job.job_id] = _Victim(
                    job.job_id, job.restart_count, by, Mode.SUSPEND, math.inf, stopped=True
                )
            elif job.state is JobState.COMPLETING and job.preempt_time is not None:
                # asked to end before the restart: wait for that end again, no new signal
                requeue = self.gw.config.job_requeue
                mode = mode_of(self.cfg, self.policy(), job, requeue, self._parts())
                mode = Mode.CANCEL if mode is Mode.CANCEL else Mode.REQUEUE
                wait = now + self.gw.config.kill_wait_s + _REPORT_MARGIN_S
                self.victims[job.job_id] = _Victim(
                    job.job_id, job.restart_count, 0, mode, -math.inf, killed_at=now, report_by=wait
                )
                self.gw.ending_run(job)

    async def _restore_graces(self) -> None:
        """Once, after a (re)start: victims inside their GraceTime keep it, counted from
        their `preempt` event (control/preempt_restore.py), rather than being chosen again."""
        if self._graces_read:
            return
        self._graces_read = True
        for g in await in_grace(self.gw):
            victim = _Victim(g.job.job_id, g.job.restart_count, g.preemptor, g.mode, g.deadline)
            self.victims.setdefault(g.job.job_id, victim)
            self.waiting.add(g.preemptor)
            self.gw.ending_run(g.job)

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
        await self._act(result.preempt)
        preempting = set(result.preempt) | self.queued.asking
        await self.will_evict.settle(preempting, {d.job.job_id for d in result.starts})
        await self.tick()

    async def _act(self, preempt: Mapping[int, tuple[int, ...]]) -> None:
        """Mark (WillEvict) or preempt the new victims of each preemptor."""
        state = self.policy()
        for preemptor, ids in preempt.items():
            fresh = tuple(v for v in ids if v not in self.victims)
            pre = self.gw.jobs.get(preemptor)
            delayed = fresh and pre is not None and privileged(state, pre)
            if delayed and not await self.will_evict.update(preemptor, fresh):
                continue  # WillEvict: the notice is still running
            for vid in fresh:
                await self._choose(preemptor, vid)

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
        if mode is Mode.SUSPEND and gw.capabilities(job).suspends is None:
            requeue = gw.config.job_requeue if job.spec.requeue is None else job.spec.requeue
            mode = Mode.REQUEUE if requeue else Mode.CANCEL  # it cannot be stopped there
        if mode is Mode.SUSPEND:
            grace = 0  # stopped at once; its run goes on later
        now = gw.clock()
        deadline = now + grace * gw.config.time_scale  # job seconds, as time limits
        self.victims[vid] = _Victim(vid, job.restart_count, preemptor, mode, deadline)
        self.waiting.add(preemptor)
        events = [
            StoredEvent(
                vid, now, "preempt", {"by": preemptor, "mode": mode.value.upper(), "grace_s": grace}
            ),
            StoredEvent(preemptor, now, "preempting", {"victim": vid}),
        ]
        if mode is Mode.SUSPEND:
            await self._events(events)
        else:
            gw.ending_run(job)
            await self._store(_graced(job, now, grace), events)
        log.info("job %s preempts job %s (%s, grace %d s)", preemptor, vid, mode.value, grace)
        if grace > 0:
            await self._signal(job, deadline - now)
            await self._events([StoredEvent(vid, gw.clock(), "preempt-signal", {"signal": 15})])

    async def _signal(self, job: Job, grace_wall_s: float) -> None:
        """SIGTERM at the start of the grace. A backend that ends runs gracefully is told
        the grace itself (Kubernetes deletes the pods with it; its `cancel` would give
        them KillWait instead); elsewhere SIGTERM through `cancel`. Either way `_end` ends
        the run for the record once the grace is over."""
        graceful = self.gw.capabilities(job).ends_gracefully
        backend = self.gw.backend_for(job)
        try:
            if graceful is not None:
                await asyncio.to_thread(graceful.end_gracefully, job, grace_wall_s)
            elif backend is not None:  # slurmctld: SIGCONT, then SIGTERM, to the job's steps
                await asyncio.to_thread(backend.cancel, job, _SIGCONT, False)
                await asyncio.to_thread(backend.cancel, job, _SIGTERM, False)
        except Exception as exc:  # noqa: BLE001 - the grace still ends it
            log.warning("SIGTERM to preempted job %s: %s", job.job_id, exc)

    async def _store(self, job: Job, events: list[StoredEvent]) -> None:
        """Make a victim's record current and store it with `events`."""
        self.gw.remember(job)
        try:
            await self.gw.committer.commit(Batch(updates=[job], events=events))
        except StoreError as exc:
            log.error("preemption of job %s not stored: %s", job.job_id, exc)

    async def tick(self) -> None:
        """End the victims whose grace is over, stop SUSPEND victims, resume those whose
        preemptor has ended (each cycle, pending jobs or not)."""
        gw = self.gw
        self._recover()
        await self._restore_graces()
        await self.will_evict.tick()
        if self.cfg.enabled:
            await self._act(await self.queued.victims())
        now = gw.clock()
        self.waiting = {
            j for j in self.waiting if (p := gw.jobs.get(j)) and p.state is JobState.PENDING
        }
        for victim in [v for v in self.victims.values() if _in_grace(v, now)]:
            await self._ended_in_grace(victim)
        for victim in [v for v in self.victims.values() if v.deadline <= now]:
            if victim.mode is Mode.SUSPEND:
                await self._stop(victim)
            else:
                await self._kill(victim, now)
        for victim in [v for v in self.victims.values() if v.stopped]:
            await self._resume(victim)

    async def _ended_in_grace(self, victim: _Victim) -> None:
        """A run that ended by itself inside its GraceTime ends as it ended, not PREEMPTED:
        the grace signals the steps only, and a script whose srun step died of it goes on
        to its own end. slurmctld then records the job COMPLETED (burst test cluster,
        partition_prio, GraceTime 3 s: `srun sleep 100; echo; sleep 1` was COMPLETED 0:0 at
        its own end, 1.3 s into the grace). Only where the grace spares the batch shell
        (`PreemptsRuns`, the local runner): on Kubernetes the whole pod gets SIGTERM."""
        gw = self.gw
        job = gw.jobs.get(victim.job_id)
        runs = gw.capabilities(job).preempts_runs if job is not None else None
        if job is None or runs is None or job.restart_count != victim.run:
            return
        if job.state is not JobState.RUNNING:
            return
        status = await asyncio.to_thread(runs.preempted_status, job)
        if status is None or victim.job_id not in self.victims:
            return
        if not await self._gone(job):  # what the script left behind goes with it
            return
        current = gw.jobs.get(victim.job_id, job)
        if current.restart_count != victim.run or current.state is not JobState.RUNNING:
            return
        del self.victims[victim.job_id]
        state = JobState.COMPLETED if status == 0 else JobState.FAILED
        await gw.commit_or_log([gw.ended(current, state, status)], "backend")
        gw.ended_runs([(victim.job_id, victim.run)])
        gw.wake()

    async def _stop(self, victim: _Victim) -> None:
        """SUSPEND: stop the victim's run (retried next cycle when not confirmed)."""
        gw = self.gw
        job = gw.jobs.get(victim.job_id)
        if job is None or job.restart_count != victim.run or job.state is not JobState.RUNNING:
            del self.victims[victim.job_id]  # ended, requeued or suspended by someone else
            return
        out = await suspend_run(gw, job, victim.preemptor)
        if isinstance(out, SlurmErrno):
            log.warning("preempted job %s not suspended yet: %s", victim.job_id, out.text)
            return
        if out.state_desc == WILL_EVICT:
            out = replace(out, state_desc=None)
        victim.stopped, victim.deadline = True, math.inf
        gw.metrics.preempted(job.cluster, Mode.SUSPEND.value)
        await gw.commit_or_log([out], "preempt-suspend", by=victim.preemptor)
        gw.wake()

    async def _resume(self, victim: _Victim) -> None:
        """SUSPEND: continue the victim once its preemptor has ended (or never will start);
        forget it when someone else resumed, re-suspended or ended it meanwhile."""
        gw = self.gw
        job = gw.jobs.get(victim.job_id)
        if (
            job is None
            or job.restart_count != victim.run
            or job.state is not JobState.SUSPENDED
            or job.suspended_by != victim.preemptor
        ):
            del self.victims[victim.job_id]
            return
        pre = gw.jobs.get(victim.preemptor)
        if pre is not None and (pre.state.is_active or victim.preemptor in self.waiting):
            return  # still runs on the victim's room, or is about to
        out = await resume_run(gw, job)
        if isinstance(out, SlurmErrno):
            log.warning("preempted job %s not resumed yet: %s", victim.job_id, out.text)
            return
        del self.victims[victim.job_id]
        await gw.commit_or_log([out], "preempt-resume", by=victim.preemptor)
        gw.wake()

    async def _kill(self, victim: _Victim, now: float) -> None:
        """The grace is over. A backend that `PreemptsRuns` ends the run as slurmstepd
        does (KillWait included) while the record shows COMPLETING, EndTime and
        PreemptTime now; the run is ended for the record once it has reported its end (or
        KillWait and a margin have passed). Elsewhere the run is ended at once (`_end`)."""
        gw = self.gw
        job = gw.jobs.get(victim.job_id)
        runs = gw.capabilities(job).preempts_runs if job is not None else None
        if job is None or runs is None or job.restart_count != victim.run:
            await self._end(victim, None)
            return
        if victim.killed_at is None:
            if job.state is not JobState.RUNNING:
                await self._end(victim, None)
                return
            try:
                await asyncio.to_thread(runs.preempt_run, job, now)
            except Exception as exc:  # noqa: BLE001 - ended the hard way instead
                log.warning("preempted job %s not asked to end: %s", job.job_id, exc)
                await self._end(victim, None)
                return
            victim.killed_at = now
            victim.report_by = now + gw.config.kill_wait_s + _REPORT_MARGIN_S
            out = replace(
                job,
                state=JobState.COMPLETING,
                end_time=now,
                preempt_time=now,
                state_desc=None,
                requeuing=victim.mode is Mode.REQUEUE,
            )
            await self._store(out, [StoredEvent(job.job_id, now, "preempt-kill", {})])
            return
        status = await asyncio.to_thread(runs.preempted_status, job)
        if status is not None or now >= victim.report_by:
            await self._end(victim, status)

    async def _gone(self, job: Job) -> bool:
        """End every process of the job's run, confirmed (False: not yet, next cycle)."""
        gw = self.gw
        ends = gw.capabilities(job).ends_attempts
        try:
            if ends is not None:
                await asyncio.to_thread(ends.end_attempt, job)
            else:
                backend = gw.backend_for(job)
                if backend is not None:
                    await asyncio.to_thread(backend.cancel, job, _SIGKILL, False)
        except BackendError as exc:  # not confirmed gone yet: try again next cycle
            log.warning("preempted job %s not ended yet: %s", job.job_id, exc)
            return False
        except Exception:  # logged; retried next cycle
            log.exception("ending preempted job %s failed", job.job_id)
            return False
        return True

    async def _end(self, victim: _Victim, status: int | None) -> None:
        """End the victim's run for the record (confirmed gone first): PREEMPTED with the
        batch shell's `status` (0:15 when unknown), or requeued."""
        gw = self.gw
        key = (victim.job_id, victim.run)
        job = gw.jobs.get(victim.job_id)
        if job is None or job.restart_count != victim.run or not job.state.is_active:
            del self.victims[victim.job_id]  # ended or requeued meanwhile by someone else
            gw.ended_runs([key])
            return
        if not await self._gone(job):
            return
        current = gw.jobs.get(victim.job_id, job)
        if current.restart_count != victim.run or not current.state.is_active:
            del self.victims[victim.job_id]
            gw.ended_runs([key])
            return
        if current.state_desc == WILL_EVICT:
            current = replace(current, state_desc=None)
        if victim.mode is Mode.REQUEUE:
            # eligible again only after the credential lifetime, as every requeue (recorded
            # on the burst cluster), which keeps it from taking back its preemptor's room
            out = self.gw.requeued(current, wait=True)
        else:  # Slurm: State PREEMPTED, ExitCode the batch shell's (sacct's job row: 0:0)
            out = gw.ended(current, JobState.PREEMPTED, _SIGTERM if status is None else status)
            killed = current.end_time if current.state is JobState.COMPLETING else None
            end = killed or out.end_time  # when it was ended, not when it was gone
            out = replace(out, end_time=end, preempt_time=end)
        del self.victims[victim.job_id]
        gw.metrics.preempted(current.cluster, victim.mode.value)
        try:
            await gw.commit_or_log([out], "preempt-end", mode=victim.mode.value.upper())
        finally:
            gw.ended_runs([key])
        gw.wake()


def _in_grace(victim: _Victim, now: float) -> bool:
    """Signalled, its GraceTime not over yet (not SUSPEND: stopped at once)."""
    return victim.mode is not Mode.SUSPEND and victim.killed_at is None and victim.deadline > now


def _graced(job: Job, now: float, grace_s: int) -> Job:
    """The victim during its GraceTime as slurmctld shows it: PreemptTime now, EndTime
    moved to the grace's end when that comes first (job seconds, as EndTime counts)."""
    if grace_s <= 0:
        return replace(job, preempt_time=now)
    end = now + grace_s
    if job.time_limit not in (INFINITE, NO_VAL, 0):
        end = min(end, expected_end(job, job.time_limit * 60))
    return replace(job, preempt_time=now, end_time=end)
