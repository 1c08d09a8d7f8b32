"""The gateway's core: job records in memory and in the store, the scheduling loop, and the
translation of backend events into job states.

All mutations happen on the asyncio loop thread; durability goes through the group
committer (a write is acknowledged only once committed). After a restart, `start()`
reloads unfinished jobs and reconciles running ones with their backend, so nothing is lost
and nothing runs twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from gateway.backend import Capabilities, capabilities_of
from gateway.compat.errors import CompatError
from gateway.compat.optypes import EarlyExit
from gateway.compat.slurm_errors import SlurmErrno
from gateway.compat.verify import SubmitError
from gateway.control.arraytasks import split_task
from gateway.control.config import GatewayConfig
from gateway.control.jobtable import JobTable
from gateway.control.launcher import Launcher
from gateway.control.polling import describe_all, poll_all, watch_all
from gateway.control.reload import reload_jobs
from gateway.control.routing import router_for
from gateway.control.site import gres_types_of
from gateway.control.snapshots import build_snapshot, free_resources
from gateway.control.submissions import SubmissionLedger
from gateway.control.submit import (
    Caller,
    NeedScript,
    RecordedRefusal,
    SbatchCall,
    build_job,
    parse_call,
    submit_message,
    test_only_message,
)
from gateway.control.transitions import after_event, ended, requeued
from gateway.logutil import RateLimitedLogger
from gateway.metrics.observe import GatewayMetrics
from gateway.model.backend import Backend, BackendEvent, EventKind
from gateway.model.cluster import ClusterState
from gateway.model.job import HANDING, Job
from gateway.model.state import JobState, Reason
from gateway.policy.service import policy_of
from gateway.scheduler.bf_params import parse_scheduler_parameters
from gateway.scheduler.catalog import DEFAULT_PLUGINS, FACTORIES
from gateway.scheduler.cycle import run_cycle
from gateway.scheduler.plan import apply_plan
from gateway.scheduler.plugins import Registry
from gateway.scheduler.snapshot import NodeFree, Snapshot
from gateway.store.base import JobQuery, StoredEvent, StoreError, Submission
from gateway.store.committer import GroupCommitter
from gateway.store.node_admin import NodeAdmin, drain_overlay
from gateway.store.sqlite import Batch, SqliteStore

__all__ = ["Gateway", "SubmitOutcome"]

log = logging.getLogger("caldera.gateway")
_cycle_log = RateLimitedLogger(log)


@dataclass(frozen=True, slots=True)
class SubmitOutcome:
    """What the sbatch client prints and returns."""

    job_id: int | None
    stdout: str
    stderr: str
    exit_code: int
    wait: bool = False  # sbatch --wait: the client waits for the job to end
    need_script: NeedScript | None = None  # the client guessed the script wrong: retry


class Gateway:
    """Jobs, their scheduling, and their backends."""

    def __init__(
        self,
        config: GatewayConfig,
        store: SqliteStore,
        backends: dict[str, Backend],
        clock: Callable[[], float] = time.time,
        sites: dict[str, ClusterState] | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.committer = GroupCommitter(store)
        self.backends = backends
        self.caps = {name: capabilities_of(b) for name, b in backends.items()}
        # (job id, run) the gateway is ending (requeue, fail-over, preemption): not its own end
        self._ending: set[tuple[int, int]] = set()
        self.clock = clock
        self.jobs = JobTable()
        self._finished_at: dict[int, float] = {}
        self.next_id = store.max_job_id() + 1
        self.registry = Registry.build(config.plugins or DEFAULT_PLUGINS, FACTORIES)
        self.registry.backfill = parse_scheduler_parameters(config.scheduler_parameters)
        self.clusters: dict[str, ClusterState] = {n: b.describe() for n, b in backends.items()}
        self.sites = dict(sites or {})  # clusters described by configuration, not backends
        self.clusters.update(self.sites)
        self.drained: dict[str, NodeAdmin] = store.node_admin()  # scontrol update State=DRAIN
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self.cycles = 0
        self.metrics = GatewayMetrics()  # cycle and submit timings, starts and ends (/metrics)
        self._gres_types: tuple[tuple[ClusterState, ...], tuple[str, ...]] | None = None
        self.launcher = Launcher(self)
        self.router = router_for(self)  # multi-cluster routing, when [routing] is configured
        self.submissions = SubmissionLedger(store, self.committer)
        # test hook for a fault nothing else produces on demand: die between the commit of
        # a submission and its answer (tests/e2e/test_storage_faults.py)
        self._crash_after_commit = os.environ.get("CALDERA_TEST_CRASH_AFTER_COMMIT") == "1"

    # --- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        """Reload unfinished jobs and those within MinJobAge (gateway/control/reload.py),
        reconcile running ones, start the scheduling loop."""
        self._wake = watch_all(self.caps.values())  # set by a cycle's cause, or a backend
        active, recent = await reload_jobs(self.store, self.clock() - self.config.min_job_age_s)
        for job in (*active, *recent):
            self.jobs[job.job_id] = job
        self._finished_at.update((j.job_id, j.end_time or 0.0) for j in recent)
        running = [j for j in self.jobs.values() if j.state.is_active or j.backend_id == HANDING]
        for name, backend in self.backends.items():
            mine = [j for j in running if j.cluster == name]
            events = await asyncio.to_thread(backend.reconcile, mine)
            await self._apply_events(events, name)
        self._task = asyncio.create_task(self._loop(), name="caldera-scheduler")

    async def stop(self) -> None:
        """Stop the loop (running jobs keep running) and flush the store."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await asyncio.to_thread(self.committer.close)
        for caps in self.caps.values():
            if caps.closes is not None:
                await asyncio.to_thread(caps.closes.close)

    def wake(self) -> None:
        """Ask for a scheduling cycle soon."""
        if self._wake is not None:
            self._wake.set()

    async def _loop(self) -> None:
        """Cycle when woken (a submission, a finished job) or every cycle_interval_s, but
        at most every min_cycle_gap_s: a burst of submissions shares one cycle."""
        assert self._wake is not None
        last = 0.0
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.config.cycle_interval_s)
            gap = self.config.min_cycle_gap_s - (time.monotonic() - last)
            if gap > 0:
                await asyncio.sleep(gap)
            self._wake.clear()
            last = time.monotonic()
            try:
                await self.cycle_once()
            except Exception as exc:  # noqa: BLE001 - logged once a minute per kind, not per cycle
                _cycle_log.log(
                    logging.ERROR,
                    "scheduler",
                    type(exc).__name__,
                    "scheduling cycle failed",
                    exc_info=True,
                )
            else:
                _cycle_log.flush()  # "N similar messages suppressed" once cycles succeed again

    # --- ids and persistence --------------------------------------------------------

    def _alloc_id(self) -> int:
        job_id = self.next_id
        self.next_id += 1
        return job_id

    def remember(self, job: Job) -> None:
        """Make a record current in memory (not stored)."""
        self.metrics.job_changed(self.jobs.get(job.job_id), job)
        self.jobs[job.job_id] = job
        if job.state.is_finished:
            self._finished_at.setdefault(job.job_id, self.clock())

    def _forget_old(self) -> None:
        horizon = self.clock() - self.config.min_job_age_s
        for job_id, at in list(self._finished_at.items()):
            if at < horizon:
                self._finished_at.pop(job_id, None)
                self.jobs.pop(job_id, None)

    async def _commit(self, jobs: Iterable[Job], kind: str, **detail: object) -> None:
        """Make job changes current now (in call order, on the loop thread) and durable
        before returning; the committer keeps the same order, so store and memory agree."""
        now = self.clock()
        updates = list(jobs)
        if not updates:
            return
        events = [
            StoredEvent(j.job_id, now, kind, {"state": j.state.long, **detail}) for j in updates
        ]
        for job in updates:
            self.remember(job)
        await self.committer.commit(Batch(updates=updates, events=events))

    # --- submission -----------------------------------------------------------------

    async def sbatch(self, call: SbatchCall, caller: Caller) -> SubmitOutcome:
        """Parse, check, store durably, then answer with sbatch's output. An id is used
        where slurmctld uses one: by a job it accepts, a --test-only, a job it fails at
        once (`RecordedRefusal`) and an invalid feature; other refusals use none."""
        now = self.clock()
        job_id = self.next_id  # taken (`_alloc_id`) before the first await below
        try:
            request = parse_call(call, caller, now, self.config.max_array_size, self.gres_types())
            job = build_job(
                job_id,
                request,
                call,
                caller,
                now,
                self.clusters,
                self.config.def_mem_per_cpu_mb,
                None if self.config.accept_any_qos else frozenset(self.config.qos),
                self._job_exists,
            )
            job = policy_of(self).admit(job, call.retry, caller.operator)  # MaxSubmitJobs: refused
        except RecordedRefusal as refused:
            self._alloc_id()
            try:  # no token: a retry is refused again, as a second sbatch would be
                sub = Submission(refused.job, request.script, dict(call.env))
                await self.submissions.store_once(sub, caller.uid, False, now)
                self.remember(refused.job)
            except StoreError as exc:
                log.error("job %s (refused) not stored: %s", refused.job.job_id, exc)
            return SubmitOutcome(None, "", refused.error.render("sbatch"), 1)
        except CompatError as exc:
            if isinstance(exc, SubmitError) and exc.errno is SlurmErrno.INVALID_FEATURE:
                self._alloc_id()
            return SubmitOutcome(None, "", exc.render("sbatch"), exc.exit_code)
        except EarlyExit as done:  # --help, --usage, --version, --gres=help
            return SubmitOutcome(None, done.stdout, "", done.code)
        except NeedScript as need:
            return SubmitOutcome(None, "", "", 0, need_script=need)
        self._alloc_id()
        if request.test_only:
            return self._test_only(job)
        try:
            sub = Submission(job, request.script, dict(call.env), call.token)
            stored = await self.submissions.store_once(sub, caller.uid, call.retry, now)
        except StoreError as exc:  # nothing is acknowledged that is not stored
            log.error("job %s not stored: %s", job.job_id, exc)
            msg = f"sbatch: error: Batch job submission failed: {exc.cause}\n"
            return SubmitOutcome(None, "", msg, 1)
        if stored == job.job_id:
            if self._crash_after_commit:
                os.kill(os.getpid(), signal.SIGKILL)
            self.remember(job)
            self.wake()
        out, err = submit_message(stored, request)
        return SubmitOutcome(stored, out, err, 0, request.wait)

    def _test_only(self, job: Job) -> SubmitOutcome:
        result = run_cycle(self._snapshot([job]), self.registry, estimates=False)
        return SubmitOutcome(None, "", test_only_message(job, result.starts, self.clock()), 0)

    def gres_types(self) -> tuple[str, ...]:
        """Slurm's GresTypes: slurm.conf's, in its order, then any generic resource some
        node of some cluster has; read on every submission, so recomputed only when a
        cluster's description changes."""
        key = tuple(self.clusters.values())  # held, so that identity means "unchanged"
        cached = self._gres_types
        if cached is None or cached[0] != key:  # element identity first: cheap if unchanged
            declared = self.config.gres_types  # slurm.conf's GresTypes, in its order
            found = gres_types_of(key)
            names = (*declared, *(n for n in found if n not in declared))
            cached = self._gres_types = (key, names)
        return cached[1]

    # --- queries --------------------------------------------------------------------

    def visible_jobs(self) -> list[Job]:
        """Every job squeue shows (unfinished, and finished within MinJobAge)."""
        return sorted(self.jobs.values(), key=lambda j: j.job_id)

    async def find(self, job_id: int) -> Job | None:
        """A job by id, from memory or the store."""
        job = self.jobs.get(job_id)
        if job is not None:
            return job
        return await asyncio.to_thread(self.store.get, job_id)

    async def array_members(self, array_job_id: int) -> list[Job]:
        """Every record of an array (its pending meta record and its tasks)."""
        q = JobQuery(job_ids=[array_job_id])
        stored = {j.job_id: j for j in await asyncio.to_thread(self.store.query, q)}
        for job in self.jobs.job_or_array(array_job_id):
            stored[job.job_id] = job
        return sorted(stored.values(), key=lambda j: (j.array_task_id or -1, j.job_id))

    # --- scheduling -----------------------------------------------------------------

    def self_placing(self) -> frozenset[str]:  # clusters that queue their own jobs (Slurm)
        return frozenset(n for n, c in self.caps.items() if c.places_itself)

    def free_resources(self) -> dict[str, NodeFree]:
        """What is free on every node now (cpus, memory, GPU indices)."""
        return free_resources(self.jobs, self.schedulable(), self.self_placing())

    def schedulable(self) -> Mapping[str, ClusterState]:
        """The clusters with drained nodes shown drained (the scheduler skips them)."""
        return drain_overlay(self.clusters, self.drained)

    def _job_exists(self, job_id: int) -> bool:
        """Whether a dependency may name this job (as the snapshot's targets are found)."""
        return bool(self.jobs.job_or_array(job_id) or self.store.query(JobQuery(job_ids=[job_id])))

    def _snapshot(self, extra: Iterable[Job] = ()) -> Snapshot:
        return build_snapshot(
            self.jobs,
            self.schedulable(),
            self.caps,
            self.self_placing(),
            self.clock(),
            self.config.def_mem_per_cpu_mb,
            lambda job_id: self.store.query(JobQuery(job_ids=[job_id])),
            extra,
        )

    async def cycle_once(self) -> None:
        """Poll backends, then run one scheduling cycle and apply its decisions."""
        self.clusters.update(await describe_all(self.backends, self.sites))
        for name, events in zip(self.backends, await poll_all(self.backends), strict=True):
            if events:
                await self._apply_events(events, name)
        self._forget_old()
        await policy_of(self).each_cycle()  # preemption's grace, priorities (policy/service.py)
        began = time.perf_counter()
        snap = self._snapshot()
        if self.router is not None and await self.router.before_cycle(snap):
            snap = self._snapshot()  # with the routes just decided
        if not snap.pending:
            return
        result = run_cycle(snap, self.registry, policy_of(self).preempter.rules(snap))
        self.cycles += 1
        self.metrics.observe_cycle(time.perf_counter() - began, len(snap.pending), result.starts)
        changed: list[Job] = []
        for job_id, reason in result.reasons.items():
            job = self.jobs.get(job_id)
            desc = result.descs.get(job_id)
            if job is None or job.state is not JobState.PENDING:
                continue
            if job.reason is not reason or job.state_desc != desc:
                changed.append(replace(job, reason=reason, state_desc=desc))
        for job_id, reason in result.never.items():
            job = self.jobs.get(job_id)
            if job is None or job.state is not JobState.PENDING:
                continue
            if job.spec.kill_on_invalid_dep:
                changed.append(self.ended(job, JobState.CANCELLED, reason=reason))
            elif job.reason is not reason:
                changed.append(replace(job, reason=reason))
        changed, replanned = apply_plan(changed, snap.pending, self.jobs.get, result)
        for job in replanned:  # in memory only: the plan is recomputed every cycle
            self.remember(job)
        starts = self.launcher.not_backed_off(result.starts, changed)
        await self.commit_or_log(changed, "reason")
        prepared = [(d, self.launcher.prepare(d)) for d in starts]
        # launches block (a supervisor process starts): run them off the loop, in parallel
        await asyncio.gather(*(self.launcher.launch(*p, d) for d, p in prepared if p is not None))
        await policy_of(self).preempter.after_cycle(result)  # victims chosen, signalled, ended

    async def commit_or_log(self, jobs: list[Job], kind: str, **detail: object) -> None:
        """Commit a change that memory must keep even when the store fails (the job has
        no process, or runs already): the store is behind until the next write, and a
        restart reconciles it with the backend."""
        try:
            await self._commit(jobs, kind, **detail)
        except StoreError as exc:
            ids = ",".join(str(j.job_id) for j in jobs)
            log.error("job %s: %s not stored: %s", ids, kind, exc)

    async def _apply_events(self, events: Iterable[BackendEvent], cluster: str = "") -> None:
        """Job records after their backend's events (`cluster`: whose; an event about a job
        that has since moved to another cluster is that cluster's past, not the job's)."""
        events = list(events)
        steps = [replace(ev.step, run=ev.run) for ev in events if ev.step is not None]
        if steps:  # kept per run (sacct -D)
            try:
                await self.committer.commit(Batch(steps=steps))
            except StoreError as exc:
                log.error("%d step record(s) not stored: %s", len(steps), exc)
        # read the records only now, with no await until they are made current below: a
        # control operation that changed a job meanwhile (scancel marks who cancelled it)
        # is never overwritten by a stale copy
        updates: dict[int, Job] = {}
        for ev in events:
            job = updates.get(ev.job_id) or self.jobs.get(ev.job_id)
            if job is None or ev.run != job.restart_count or cluster not in ("", job.cluster):
                continue  # unknown, a run from before a requeue, or from another cluster
            if (ev.job_id, ev.run) in self._ending and ev.kind is not EventKind.STEP:
                continue  # a run being requeued: the requeue records how it ends
            out = after_event(job, ev, self.config.job_requeue, self.clock())
            if out is not None:
                updates[job.job_id] = out
        # what the backend reports has happened: memory takes it even when the store fails
        # (a finished job must not stay RUNNING); a restart reconciles the store
        await self.commit_or_log(list(updates.values()), "backend")
        if updates:
            self.wake()

    # --- helpers for control operations (ops.py) --------------------------------------

    def backend_for(self, job: Job) -> Backend | None:
        """The backend a job runs on."""
        return self.backends.get(job.cluster)

    def ending_run(self, job: Job) -> tuple[int, int]:
        """Mark the job's current run as being ended by the gateway (requeue, fail-over);
        `ended_runs` lifts the mark once the outcome is committed."""
        key = (job.job_id, job.restart_count)
        self._ending.add(key)
        return key

    def ended_runs(self, keys: Iterable[tuple[int, int]]) -> None:
        """Lift `ending_run` marks."""
        self._ending.difference_update(keys)

    def capabilities(self, job: Job) -> Capabilities:
        """What the backend a job runs on can do (nothing optional for an unknown one)."""
        return self.caps.get(job.cluster) or Capabilities()

    async def commit(self, jobs: Iterable[Job], kind: str, **detail: object) -> None:
        """Persist changed jobs (used by control operations). When the store fails, a
        change to a job no backend holds yet (pending: held, released, cancelled, updated)
        is undone in memory too, so that what the caller is told failed did not happen;
        a change the backend has already made (a running job cancelled) stays."""
        updates = list(jobs)
        before = {j.job_id: self.jobs.get(j.job_id) for j in updates}
        try:
            await self._commit(updates, kind, **detail)
        except StoreError:
            for job in updates:
                old = before[job.job_id]
                if old is None or old.state is not JobState.PENDING or old.backend_id:
                    continue
                if self.jobs.get(job.job_id) is job:
                    self.remember(old)  # (the /metrics counts follow)
                    self._finished_at.pop(job.job_id, None)
            raise
        self.wake()

    def ended(
        self,
        job: Job,
        state: JobState,
        exit_code: int = 0,
        reason: Reason = Reason.NONE,
        by: int | None = None,
    ) -> Job:
        """A finished copy of a job (`by`: the uid that cancelled it)."""
        return replace(ended(job, state, self.clock(), exit_code, reason), cancelled_by=by)

    def requeued(self, job: Job, wait: bool = False) -> Job:
        """A requeued copy of a job; `wait` (scontrol requeue, a preemption): eligible only
        cred_expire + 1 s later, as slurmctld's batch_requeue_fini makes every requeue wait
        (a fault's requeue does not: see docs/compatibility.md)."""
        cfg = self.config
        return requeued(job, self.clock(), (cfg.cred_expire_s + 1) * cfg.time_scale if wait else 0)

    def split_task(self, meta: Job, index: int) -> tuple[Job, Job | None]:
        """Take one pending task out of an array meta record: (task record, new meta)."""
        return split_task(meta, index, self._alloc_id)
