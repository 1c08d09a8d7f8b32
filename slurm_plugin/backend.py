"""SlurmBackend: a real Slurm cluster behind Caldera (the `Backend` protocol).

    backend = SlurmBackend(config.cluster("hpc"))       # slurm_plugin.config
    backend.describe(); backend.submit(launch); backend.poll(); backend.reconcile(jobs)

Level-triggered. Every Slurm job carries the tag `caldera:<instance>:<job id>` in its
comment; a background watcher reads Slurm's queue (`squeue -u <users>` every
`poll_interval_s`, cheap because slurmctld filters by user) and turns differences into
events that `poll()` hands out without blocking. `submit` is idempotent: a job already
known (submitted by this process, or found by its tag in Slurm's queue the first time a
user submits, or after an unanswered submission) is never submitted twice. `reconcile`
matches the gateway's running jobs with Slurm by id or tag, with slurmdbd for jobs
slurmctld has forgotten and sacct's submit lines for a submission whose answer was lost;
a job Slurm never got is reported LOST (the gateway requeues it). When the cluster cannot
be reached, jobs keep their last state with Reason.CLUSTER_UNREACHABLE, `submit` raises a
retryable error at once, and the first answer afterwards re-announces every job.

Beyond the protocol: `hold`, `release`, `end_attempt`, `update_time_limit`, `accounting`,
`native_dependency_ok`, `predict_start` (slurm_plugin.predict), `withdraw`
(slurm_plugin.withdraw), `slurm_id`, `caldera_id`, `close`. Everything is per instance (no
module state): several clusters live side by side in one gateway, each with its slurm.conf.
"""

from __future__ import annotations

import logging
import os
import pwd
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace

from gateway.model.backend import BackendError, BackendEvent, Launch
from gateway.model.cluster import ClusterState
from gateway.model.job import Job
from slurm_plugin.accounting import AccountingRecord, merge_accounting
from slurm_plugin.cli import CliClient
from slurm_plugin.client import Identity, SlurmClient, SubmitRequest
from slurm_plugin.config import RestAuth, SlurmClusterConfig, SubmitAs, Transport
from slurm_plugin.discovery import Discovery, offered_cluster, placeholder_cluster
from slurm_plugin.errors import SlurmError, SlurmRejected, SlurmUnreachable
from slurm_plugin.mapping import (
    SlurmRef,
    TargetInfo,
    marked_for_withdrawal,
    native_dependency,
    parse_backend_id,
    parse_tag,
)
from slurm_plugin.predict import SlurmPredict, StartCache
from slurm_plugin.rest import RestClient
from slurm_plugin.rest_job import RestUnsupported
from slurm_plugin.submit_args import build_request
from slurm_plugin.watch import FORGET_AFTER_S, MISSING_GRACE_S, Tracked
from slurm_plugin.withdraw import SlurmWithdraw

__all__ = ["SlurmBackend"]

log = logging.getLogger("caldera.slurm")


class SlurmBackend(SlurmWithdraw, SlurmPredict):
    """A Slurm cluster as a Caldera backend."""

    places_itself = True  # Slurm chooses the nodes; Caldera chooses cluster and partition

    def __init__(
        self,
        config: SlurmClusterConfig,
        *,
        client: SlurmClient | None = None,
        cli: CliClient | None = None,
        clock: Callable[[], float] = time.time,
        watcher: bool = True,
    ) -> None:
        self.config = config
        self.name = config.name
        self.clock = clock
        self.cli: CliClient | None = cli or (CliClient(config) if config.commands else None)
        self.client: SlurmClient = client or self._primary()
        self.rest: RestClient | None = self.client if isinstance(self.client, RestClient) else None
        self.watch: SlurmClient = self.cli or self.client
        self._lock = threading.RLock()
        self._poll_lock = threading.Lock()
        self._tracked: dict[int, Tracked] = {}
        self._events: deque[BackendEvent] = deque()
        self._indexed_users: set[str] = set()
        self._discovery: Discovery | None = None
        self._discovered_at = 0.0
        self._unreachable_since: float | None = None
        self._last_failure: float | None = None
        self._last_error = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._acct_thread: threading.Thread | None = None
        self._watcher = watcher
        self._predictions = StartCache(config.predict_ttl_s)
        try:
            self._me = pwd.getpwuid(os.geteuid()).pw_name
        except KeyError:
            self._me = str(os.geteuid())

    def _primary(self) -> SlurmClient:
        if self.config.transport is Transport.REST:
            return RestClient(self.config)
        if self.config.transport is Transport.PYSLURM:
            from slurm_plugin.pyslurm_client import PyslurmClient

            return PyslurmClient(self.config)
        assert self.cli is not None
        return self.cli

    # --- lifecycle --------------------------------------------------------------------

    def _ensure_thread(self) -> None:
        if not self._watcher or (self._thread is not None and self._thread.is_alive()):
            return
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, name=f"caldera-slurm-{self.name}", daemon=True
        )
        self._thread.start()
        # sacct is slow (slurmdbd): steps are fetched apart from the state poll
        self._acct_thread = threading.Thread(
            target=self._run_accounting, name=f"caldera-slurm-acct-{self.name}", daemon=True
        )
        self._acct_thread.start()

    def _run_accounting(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self.collect_steps_once()
            except Exception:
                log.exception("slurm accounting of %s failed", self.name)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.poll_once()
            except Exception:
                log.exception("slurm watcher of %s failed", self.name)
            interval = self.config.poll_interval_s
            if self._unreachable_since is not None:
                interval = max(interval, 1.0)
            # a round every `interval` (not `interval` after each round), at least a pause
            self._stop.wait(max(0.02, interval - (time.monotonic() - started)))

    def close(self) -> None:
        """Stop the watcher threads (jobs on Slurm keep running)."""
        self._stop.set()
        for thread in (self._thread, self._acct_thread):
            if thread is not None:
                thread.join(timeout=10)
        self._thread = self._acct_thread = None

    # --- describe -----------------------------------------------------------------------

    def discover(self) -> Discovery:
        """Read nodes and partitions from the cluster now."""
        raw = self.client.cluster() if self.cli is None else self.cli.cluster()
        found = offered_cluster(raw, self.config)
        if found.missing:
            log.warning("cluster %s has no partition(s) %s", self.name, ", ".join(found.missing))
        with self._lock:
            self._discovery = found
            self._discovered_at = time.monotonic()
        return found

    def describe(self) -> ClusterState:
        """Nodes and partitions (refreshed by the watcher every `refresh_s`)."""
        found = self._discovery
        if found is None:
            try:
                found = self.discover()
            except SlurmError as exc:
                if isinstance(exc, SlurmUnreachable):
                    self._failed(exc)
                log.warning("discovery of %s failed: %s", self.name, exc)
                return placeholder_cluster(self.config)
        state = found.state
        return state if self.reachable else replace(state, reachable=False)

    def _maybe_refresh(self) -> None:
        if time.monotonic() - self._discovered_at < self.config.refresh_s:
            return
        try:
            self.discover()
        except SlurmUnreachable as exc:
            self._failed(exc)
        except SlurmError as exc:
            log.warning("discovery of %s failed: %s", self.name, exc)

    # --- identities -------------------------------------------------------------------

    @staticmethod
    def _identity(job: Job) -> Identity:
        return Identity(job.user, job.uid, job.gid)

    def _slurm_user(self, job: Job, via_rest: bool) -> str:
        url = self.config.rest_url or ""
        if (
            via_rest
            and self.config.rest_auth is RestAuth.LOCAL
            and "{user}" not in url
            and self.config.rest_user
        ):
            return self.config.rest_user
        if not via_rest and self.config.submit_as is SubmitAs.SERVICE:
            return self._me
        return job.user

    def _control_identity(self, job: Job) -> Identity | None:
        if self.config.submit_as is SubmitAs.USER and os.geteuid() == 0:
            return self._identity(job)
        return None

    # --- ids --------------------------------------------------------------------------

    def slurm_id(self, job: Job) -> str | None:
        """The Slurm job (`123` or `123_4`) of a Caldera job, when known."""
        ref = self._ref(job)
        return ref.text if ref is not None else None

    def caldera_id(self, slurm_id: str) -> int | None:
        """The Caldera job of a Slurm job id (`123`, `123_4`), when this backend has it."""
        try:
            ref = parse_backend_id(slurm_id)
        except ValueError:
            return None
        with self._lock:
            for t in self._tracked.values():
                if t.ref is not None and (
                    t.ref == ref or (ref.task is None and t.ref.job_id == ref.job_id)
                ):
                    return t.job.job_id
        return None

    def known_jobs(self) -> dict[int, str]:
        """Caldera job id -> Slurm job id of every job this backend follows."""
        with self._lock:
            return {cid: t.ref.text for cid, t in self._tracked.items() if t.ref is not None}

    def _ref(self, job: Job) -> SlurmRef | None:
        with self._lock:
            t = self._tracked.get(job.job_id)
            if t is not None and t.ref is not None:
                return t.ref
        if job.backend_id:
            try:
                return parse_backend_id(job.backend_id)
            except ValueError:
                return None
        return None

    # --- submit -----------------------------------------------------------------------

    def _members(self, job_id: int) -> list[TargetInfo]:
        with self._lock:
            return [
                TargetInfo(t.job.job_id, t.ref, t.finished, t.job.array_job_id, t.job.array_task_id)
                for t in self._tracked.values()
                if t.job.job_id == job_id or (t.job.array_job_id == job_id and job_id)
            ]

    def _adopt_from_queue(
        self, job: Job, user: str | None, *, marked: bool = False
    ) -> SlurmRef | None:
        """The Slurm job carrying this run's tag (one being withdrawn only with `marked`:
        a withdrawn run is never the one a new submission stands for)."""
        rows = self.watch.statuses({user} if user else None, self._tag_filter())
        found: SlurmRef | None = None
        with self._lock:
            if user is not None:
                self._indexed_users.add(user)
            for row in rows:
                if parse_tag(row.comment, self.config.instance) == (
                    job.job_id,
                    job.restart_count,
                ) and (marked or not marked_for_withdrawal(row.comment)):
                    found = row.ref
        return found

    def submit(self, launch: Launch) -> str:
        """Submit to Slurm (idempotent per Caldera job id); returns `S` or `S_i`."""
        job = launch.job
        if launch.cluster != self.name:
            raise BackendError(f"job {job.job_id} is for cluster {launch.cluster}, not {self.name}")
        self._ensure_thread()
        with self._lock:
            t = self._tracked.get(job.job_id)
            if t is not None and (t.job.restart_count != job.restart_count or t.withdrawn):
                t = None  # Caldera requeued or withdrew the job: this is a new Slurm job
            if t is not None and t.ref is not None:
                return t.ref.text
        self._fail_fast()
        identity = self._identity(job)
        via_rest = self.rest is not None and self.rest.acts_as(identity)
        user = self._slurm_user(job, via_rest)
        try:
            if (t is not None and t.in_doubt) or user not in self._indexed_users:
                ref = self._adopt_from_queue(job, user)
                if ref is not None:
                    self._track(job, ref, user)
                    return ref.text
            dep = (
                native_dependency(job.spec.dependency, self._members, job.array_task_id)
                if self.config.native_dependencies
                else None
            )
            request = build_request(launch, self.config, identity, dep)
            ref, used_rest = self._submit(request, via_rest)
        except SlurmUnreachable as exc:
            self._failed(exc)
            with self._lock:
                self._tracked[job.job_id] = Tracked(
                    job, None, user, time.monotonic(), in_doubt=True
                )
            raise
        self._track(job, ref, self._slurm_user(job, used_rest))
        return ref.text

    def _submit(self, request: SubmitRequest, via_rest: bool) -> tuple[SlurmRef, bool]:
        if via_rest and self.rest is not None:
            try:
                return self.rest.submit(request), True
            except RestUnsupported as exc:
                if self.cli is None:
                    raise SlurmRejected(f"Batch job submission failed: {exc}") from exc
                log.info("job %s through the commands: %s", request.tag, exc)
        if self.cli is None:
            raise SlurmRejected(
                f"cluster {self.name}: slurmrestd acts as {self.config.rest_user}, "
                f"not {request.identity.user}, and the commands are disabled"
            )
        client = self.cli if self.client is self.rest else self.client
        return client.submit(request), False

    def _track(self, job: Job, ref: SlurmRef, user: str | None) -> None:
        with self._lock:
            self._tracked[job.job_id] = Tracked(job, ref, user, time.monotonic())

    # --- control ----------------------------------------------------------------------

    # --- events -----------------------------------------------------------------------

    def poll(self) -> list[BackendEvent]:
        """Events the watcher collected since the last call (never blocks on Slurm)."""
        self._ensure_thread()
        out: list[BackendEvent] = []
        with self._lock:
            while self._events:
                out.append(self._events.popleft())
        return out

    def poll_once(self) -> None:
        """One watcher round (the thread calls it; tests and benchmarks may too)."""
        with self._poll_lock:
            self._maybe_refresh()
            now = self.clock()
            with self._lock:
                active = [t for t in self._tracked.values() if not t.finished]
                self._prune()
            events = self._check(active, now) if active else []
            with self._lock:
                self._events.extend(events)
        if not self._watcher:
            self.collect_steps_once()

    def _prune(self) -> None:
        """Forget jobs finished (and accounted) ten minutes ago: memory stays bounded."""
        horizon = time.monotonic() - FORGET_AFTER_S
        old = [
            cid
            for cid, t in self._tracked.items()
            if t.finished and t.steps_due is None and (t.finished_at or 0) < horizon
        ]
        for cid in old:
            del self._tracked[cid]

    def collect_steps_once(self) -> None:
        """Fetch the accounting steps of jobs that finished (from slurmdbd)."""
        mono = time.monotonic()
        with self._lock:
            due = [
                t for t in self._tracked.values() if t.steps_due is not None and t.steps_due <= mono
            ]
            for t in due:
                t.steps_due = None  # taken; _collect_steps sets it again to retry
        if not due:
            return
        events = self._collect_steps(due, self.clock())
        with self._lock:
            self._events.extend(events)

    def reconcile(self, jobs: Sequence[Job]) -> list[BackendEvent]:
        """Bring jobs the gateway believes are on this cluster up to date, now."""
        mine = [j for j in jobs if j.cluster == self.name]
        with self._poll_lock:
            old = time.monotonic() - MISSING_GRACE_S - 1
            batch: list[Tracked] = []
            with self._lock:
                for job in mine:
                    ref: SlurmRef | None = None
                    if job.backend_id:
                        try:
                            ref = parse_backend_id(job.backend_id)
                        except ValueError:
                            ref = None
                    t = Tracked(job, ref, None, old)
                    self._tracked[job.job_id] = t
                    batch.append(t)
            events = self._check(batch, self.clock()) if batch else []
        self._ensure_thread()
        return events

    # --- accounting for Caldera's sacct -----------------------------------------------

    def accounting(self, jobs: Sequence[Job]) -> dict[int, AccountingRecord]:
        """slurmdbd's records of these Caldera jobs, merged (see slurm_plugin.accounting)."""
        refs: dict[int, SlurmRef] = {}
        for job in jobs:
            ref = self._ref(job)
            if ref is not None:
                refs[job.job_id] = ref
        if not refs:
            return {}
        acct = (self.cli or self.client).accounting(list(refs.values()))
        by_id = {j.job_id: j for j in acct.jobs}
        out: dict[int, AccountingRecord] = {}
        for job in jobs:
            ref = refs.get(job.job_id)
            rec = by_id.get(ref.job_id) if ref is not None else None
            if rec is None:
                continue
            # slurmdbd briefly records a just-finished job without its partition
            part = (
                (self.config.offered(rec.partition) or rec.partition)
                if rec.partition
                else job.partition
            )
            out[job.job_id] = merge_accounting(
                job,
                rec,
                acct.steps.get(rec.job_id, ()),
                acct.extras.get(rec.job_id),
                partition=part,
                node_prefix=self.config.node_prefix,
            )
        return out
