"""Starting jobs the scheduler placed: the RUNNING record made durable first, then the
backend's launch; refusals, failures and store faults each leave the job in one state
that memory and the store agree on (or that a restart reconciles), never RUNNING without
a process that the store does not know of.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

from gateway.model.backend import BackendError, Launch
from gateway.model.job import HANDING, Job
from gateway.model.state import JobState, Reason
from gateway.scheduler.cycle import Decision
from gateway.store.base import StoreError

if TYPE_CHECKING:
    from gateway.control.gateway import Gateway

__all__ = ["Launcher"]

log = logging.getLogger("caldera.gateway")

_K = TypeVar("_K", str, int)


class Launcher:
    """Launches for one gateway, with a back-off per cluster after retryable refusals."""

    def __init__(self, gw: Gateway) -> None:
        self.gw = gw
        self._slots = asyncio.Semaphore(8)
        # cluster -> (no launches before this monotonic time, current delay, waiting reason)
        self._backoff: dict[str, tuple[float, float, Reason]] = {}
        # the same for one job whose earlier run is still being ended (Reason Cleaning):
        # that job waits, the rest of its cluster does not
        self._job_backoff: dict[int, tuple[float, float, Reason]] = {}
        self._inflight: dict[int, asyncio.Future[None]] = {}  # job id -> its launch's end

    def not_backed_off(self, starts: Iterable[Decision], changed: list[Job]) -> list[Decision]:
        """The starts whose cluster is not backing off after a retryable refusal; the others
        keep waiting with the refusal's reason (appended to `changed`)."""
        now = time.monotonic()
        out: list[Decision] = []
        for decision in starts:
            held = self._backoff.get(decision.cluster)
            if held is None or now >= held[0]:
                held = self._job_backoff.get(decision.job.job_id)
            if held is None or now >= held[0]:
                out.append(decision)
                continue
            job = self.gw.jobs.get(decision.job.job_id)
            if job is not None and job.reason is not held[2]:
                changed.append(replace(job, reason=held[2]))
        return out

    def back_off(self, cluster: str, reason: Reason) -> None:
        """No launches to `cluster` for a while: 0.5 s after a first refusal, doubling up to
        30 s while refusals continue; a successful launch resets it."""
        _delay(self._backoff, cluster, reason)

    def back_off_job(self, job_id: int, reason: Reason) -> None:
        """The same for one job only (its previous run is not confirmed gone yet)."""
        if len(self._job_backoff) > 10_000:  # stale entries of jobs that went elsewhere
            now = time.monotonic()
            self._job_backoff = {k: v for k, v in self._job_backoff.items() if v[0] > now}
        _delay(self._job_backoff, job_id, reason)

    def prepare(self, decision: Decision) -> tuple[list[Job], Job, Job] | None:
        """Split the task off its array (synchronously: the meta record changes now) and
        build the RUNNING record: (changed array records, RUNNING record, its PENDING
        version); None when the job is no longer pending."""
        job = self.gw.jobs.get(decision.job.job_id)
        if job is None or job.state is not JobState.PENDING:
            return None
        records: list[Job] = []
        if decision.task is not None and job.array_pending is not None:
            task, meta = self.gw.split_task(job, decision.task)
            if meta is not None:
                records.append(meta)
                self.gw.remember(meta)
        else:
            task = job
        placement = decision.placement
        now = self.gw.clock()
        running = replace(
            task,
            state=JobState.RUNNING,
            reason=Reason.NONE,
            state_desc=None,
            start_time=now,
            eligible_time=task.eligible_time or now,
            nodes=tuple(p.node for p in placement),
            placement=placement,
            num_cpus=sum(p.cpus for p in placement),
            partition=decision.partition,
            cluster=decision.cluster,
        )
        if decision.cluster in self.gw.self_placing():
            # that cluster queues the job itself: PENDING (None) until it says otherwise
            running = replace(
                task,
                reason=Reason.NONE,
                state_desc=None,
                eligible_time=task.eligible_time or now,
                partition=decision.partition,
                cluster=decision.cluster,
                backend_id=HANDING,
            )
        self.gw.remember(running)
        return records, running, task

    async def launch(
        self, records: list[Job], running: Job, pending: Job, decision: Decision
    ) -> None:
        """`_launch`, known as in flight until it is over (see `settled`)."""
        done = asyncio.get_running_loop().create_future()
        self._inflight[running.job_id] = done
        try:
            await self._launch(records, running, pending, decision)
        finally:
            if self._inflight.get(running.job_id) is done:
                del self._inflight[running.job_id]
            done.set_result(None)

    async def settled(self, job_id: int) -> None:
        """Return once no launch of the job is in flight: the job is RUNNING before its
        backend has it, and a scancel in that moment must reach the process it starts."""
        pending = self._inflight.get(job_id)
        if pending is not None:
            await asyncio.shield(pending)

    async def _launch(
        self, records: list[Job], running: Job, pending: Job, decision: Decision
    ) -> None:
        """Persist, then hand the job to its backend (off the event loop). When the start
        cannot be stored (disk full, database locked), the job does not start: it is
        PENDING again in memory as in the store, and the cluster backs off."""
        script_id = running.array_job_id or running.job_id
        try:
            script_env = await asyncio.to_thread(self.gw.store.script, script_id)
            # durable first: a restart must find the job RUNNING and reconcile, never start
            # twice; the array's meta record may have moved on since (other tasks split
            # off): write its current version, never the one this task saw
            latest = [self.gw.jobs.get(r.job_id, r) for r in records]
            await self.gw.commit([*latest, running], "start", nodes=list(running.nodes))
        except StoreError as exc:
            log.error("job %s not started: its start cannot be stored: %s", running.job_id, exc)
            if self.gw.jobs.get(running.job_id) is running:
                self.gw.remember(pending)
            self.back_off(decision.cluster, Reason.SYSTEM_FAILURE)
            return
        script, env = script_env if script_env else ("#!/bin/sh\n", {})

        launch = Launch(
            job=running,
            script=script,
            environment=env,
            placement=decision.placement,
            partition=running.partition,
            cluster=decision.cluster,
        )
        backend = self.gw.backends[decision.cluster]
        try:
            async with self._slots:
                backend_id = await asyncio.to_thread(backend.submit, launch)
        except BackendError as exc:
            if not exc.retryable:
                await self._failed(running, exc)
                return
            # not now (unreachable, or full for now): the job waits, and the next submission
            # of the same run finds a copy that did reach it by its tag (never a second job)
            reason = exc.waiting_reason or Reason.CLUSTER_UNREACHABLE
            log.warning(
                "cluster %s refused job %s for now: %s", decision.cluster, running.job_id, exc
            )
            if reason is Reason.CLEANING:
                self.back_off_job(running.job_id, reason)
            else:
                self.back_off(decision.cluster, reason)
            current = self.gw.jobs.get(running.job_id, running)
            if not _same_run(current, running):
                return  # requeued or ended while the launch was in flight: that stands
            back = replace(
                current,
                state=JobState.PENDING,
                reason=reason,
                start_time=None,
                nodes=(),
                placement=(),
                num_cpus=0,
                backend_id=None,
            )
            await self.gw.commit_or_log([back], "launch-deferred", error=str(exc)[:200])
            return
        except Exception as exc:  # noqa: BLE001 - any other launch failure fails this job only
            await self._failed(running, exc)
            return
        self._backoff.pop(decision.cluster, None)
        self._job_backoff.pop(running.job_id, None)
        current = self.gw.jobs.get(running.job_id, running)
        if not _same_run(current, running):
            # requeued (or ended) while the launch was in flight: the requeue ended this run
            # (or will, before the next starts); its backend id must not mark the new
            # PENDING record as handed over, which would keep it from being scheduled
            log.info("job %s changed while its launch was in flight", running.job_id)
            return
        # the job runs and is stored RUNNING; without its backend id a restart finds it by
        # its job id (reconcile)
        await self.gw.commit_or_log([replace(current, backend_id=backend_id)], "backend-id")
        update = self.gw.caps[decision.cluster].time_limit
        if current.time_limit != running.time_limit and update is not None:
            # `scontrol update TimeLimit=` came while the launch was in flight (without a
            # backend id there was nothing to forward it to): the running job gets it now
            try:
                await asyncio.to_thread(update.update_time_limit, current, current.time_limit)
            except Exception as exc:  # noqa: BLE001 - the job keeps running on the old limit
                log.warning("time limit of job %s not updated: %s", current.job_id, exc)

    async def _failed(self, running: Job, exc: Exception) -> None:
        """The backend refused the job: it ends FAILED (JobLaunchFailure) with the reason."""
        log.warning("launch of job %s failed: %s", running.job_id, exc)
        current = self.gw.jobs.get(running.job_id, running)
        if not _same_run(current, running):
            return  # requeued or ended meanwhile: that decision stands
        failed = self.gw.ended(current, JobState.FAILED, 1 << 8, Reason.JOB_LAUNCH_FAILURE)
        await self.gw.commit_or_log([replace(failed, state_desc=str(exc)[:200])], "launch-failed")


def _same_run(current: Job, running: Job) -> bool:
    """Whether `current` is still the run this launch started (not requeued, not ended)."""
    if current.restart_count != running.restart_count:
        return False
    return current.state.is_active or (
        running.backend_id == HANDING and current.state is JobState.PENDING
    )


def _delay(table: dict[_K, tuple[float, float, Reason]], key: _K, reason: Reason) -> None:
    previous = table.get(key)
    delay = min(previous[1] * 2, 30.0) if previous else 0.5
    table[key] = (time.monotonic() + delay, delay, reason)
