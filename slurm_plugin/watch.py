"""The watcher half of SlurmBackend: it reads Slurm's queue, turns what changed into
events, resolves jobs that left the queue (slurmctld by id, slurmdbd, sacct's submit
lines) and fetches accounting steps. A mixin: SlurmBackend holds the state it works on.

A job Caldera withdraws (slurm_plugin.withdraw) is never reported CANCELLED: while held it
is no news, and once gone nothing is reported when `withdraw` answered the gateway, else
(a withdrawal the watcher finished, or one found after a restart) it is reported WITHDRAWN.
A job marked for withdrawal that no withdrawal of this process is working on (a gateway
killed half-way) is withdrawn when it still pends, and unmarked when it started.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import Any

from gateway.model.backend import BackendEvent, EventKind, step_event
from gateway.model.job import Job
from gateway.model.state import JobState
from slurm_plugin.cli import CliClient
from slurm_plugin.client import JobStatus, RowFilter, SlurmClient
from slurm_plugin.config import SlurmClusterConfig
from slurm_plugin.errors import SlurmError, SlurmUnreachable
from slurm_plugin.events import (
    finished_event,
    lost_event,
    state_event,
    submitted_event,
    unreachable_event,
    withdrawn_event,
)
from slurm_plugin.mapping import SlurmRef, make_tag, marked_for_withdrawal, parse_tag
from slurm_plugin.statuses import event_kind

__all__ = ["FORGET_AFTER_S", "MISSING_GRACE_S", "Tracked", "Watcher"]

log = logging.getLogger("caldera.slurm")

MISSING_GRACE_S = 3.0  # a job just submitted is in slurmctld; after this, absence counts
_LOST_AFTER = 3  # absent from slurmctld and slurmdbd this many checks: LOST
_UNREACHABLE = ("unreachable",)
FORGET_AFTER_S = 600.0


@dataclass(slots=True)
class Tracked:
    """One Caldera job on this cluster, as the backend follows it."""

    job: Job
    ref: SlurmRef | None
    slurm_user: str | None  # whose queue to read (None: unknown, read every job)
    since: float  # monotonic time of submit/adoption
    in_doubt: bool = False  # a submission whose answer was lost
    announced: tuple[Any, ...] | None = None
    last_state: JobState | None = None  # Slurm's, once seen
    finished: bool = False
    finished_row: JobStatus | None = None
    steps_due: float | None = None
    steps_tries: int = 0
    missing_tries: int = 0
    first_missing: float | None = None
    finished_at: float | None = None  # monotonic
    withdrawing: bool = False  # a withdrawal of this process works on it now
    withdrawn: bool = False  # `withdraw` answered the gateway: gone, never to start


def withdrawn_row(row: JobStatus) -> bool:
    """A Slurm job cancelled by a withdrawal before it started (no nodes ever)."""
    return row.state is JobState.CANCELLED and not row.nodes and marked_for_withdrawal(row.comment)


class Watcher:
    """State polling, reachability and resolution of vanished jobs (mixed into
    SlurmBackend, which sets these attributes)."""

    name: str
    config: SlurmClusterConfig
    cli: CliClient | None
    client: SlurmClient
    watch: SlurmClient
    clock: Any
    _lock: threading.RLock
    _tracked: dict[int, Tracked]
    _events: deque[BackendEvent]
    _me: str
    _unreachable_since: float | None
    _last_failure: float | None
    _last_error: str

    def _resume_withdrawal(self, t: Tracked) -> None:
        """Finish the withdrawal of a marked job that still pends (slurm_plugin.withdraw)."""
        raise NotImplementedError

    def _drop_mark(self, t: Tracked) -> None:
        """Unmark a marked job that started (its withdrawal lost the race)."""
        raise NotImplementedError

    # --- reachability -----------------------------------------------------------------

    def _failed(self, exc: SlurmError) -> None:
        now = time.monotonic()
        with self._lock:
            self._last_failure = now
            self._last_error = str(exc)
            if self._unreachable_since is None:
                self._unreachable_since = now
                log.warning("cluster %s unreachable: %s", self.name, exc)

    def _fail_fast(self) -> None:
        """Raise at once while the cluster is known to be unreachable (a cheap ping after
        the back-off: a submission to a dead controller would hang for seconds)."""
        with self._lock:
            last = self._last_failure
            why = self._last_error
        if last is None:
            return
        if time.monotonic() - last < self.config.unreachable_backoff_s:
            raise SlurmUnreachable(f"cluster {self.name} is unreachable: {why}")
        try:
            self.watch.ping()
        except SlurmUnreachable as exc:
            self._failed(exc)
            raise SlurmUnreachable(f"cluster {self.name} is unreachable: {exc}") from exc

    @property
    def reachable(self) -> bool:
        """Whether the last contact with the cluster worked."""
        return self._unreachable_since is None

    def _tag_filter(self, ids: frozenset[int] = frozenset()) -> RowFilter:
        """Rows of these Slurm jobs or with this instance's tag."""
        return RowFilter(ids, f"caldera:{self.config.instance}:")

    def _check(self, active: list[Tracked], now: float) -> list[BackendEvent]:
        users = {t.slurm_user for t in active}
        wanted = None if None in users or len(users) > 4 else {u for u in users if u}
        try:
            if not self.reachable:
                self.watch.ping()  # fails fast, where squeue would retry for seconds
            ids = frozenset(t.ref.job_id for t in active if t.ref is not None)
            rows = self.watch.statuses(wanted, self._tag_filter(ids))
        except SlurmUnreachable as exc:
            return self._went_unreachable(active, exc, now)
        except SlurmError as exc:
            log.warning("squeue on %s failed: %s", self.name, exc)
            return []
        self._came_back(active)
        by_ref = {r.ref.text: r for r in rows}
        by_raw = {r.extra.get("job_id", ""): r for r in rows}
        by_tag: dict[tuple[int, int], JobStatus] = {}
        for r in rows:
            key = parse_tag(r.comment, self.config.instance)
            if key is not None and not withdrawn_row(r):  # a withdrawn run is no later one
                by_tag[key] = r
        events: list[BackendEvent] = []
        finished: list[tuple[Tracked, JobStatus]] = []
        missing: list[Tracked] = []
        resume: list[Tracked] = []
        unmark: list[Tracked] = []
        mono = time.monotonic()
        for t in active:
            tag = (t.job.job_id, t.job.restart_count)
            row = by_ref.get(t.ref.text) if t.ref is not None else by_tag.get(tag)
            if row is None and t.ref is not None:  # a one-task array still pending: `S`
                row = by_raw.get(str(t.ref.job_id))
                if row is not None and row.ref.task not in (None, t.ref.task):
                    row = None
            if row is None and t.ref is not None:
                row = by_tag.get(tag)
                if row is not None and row.ref.job_id != t.ref.job_id:
                    row = None
            if row is None:
                if t.ref is None and t.in_doubt:
                    continue
                if mono - t.since > MISSING_GRACE_S:
                    missing.append(t)
                continue
            t.first_missing = None
            if t.ref is None:
                t.ref, t.in_doubt = row.ref, False
                if t.job.array_task_id is not None and row.ref.task is None:
                    t.ref = SlurmRef(row.ref.job_id, t.job.array_task_id)
                events.append(submitted_event(t.job.job_id, row, now, t.job.restart_count))
            if t.slurm_user is None and row.user:
                t.slurm_user = row.user
            kind = event_kind(row.state)
            if kind is EventKind.FINISHED:
                finished.append((t, row))
                continue
            marked = marked_for_withdrawal(row.comment) and not t.withdrawing
            if marked:
                (resume if kind is EventKind.PENDING else unmark).append(t)
            if kind is EventKind.PENDING and (t.withdrawing or marked):
                continue  # the withdrawal's hold is no news for the gateway
            seen = (row.state, row.reason, row.nodes)
            if seen != t.announced:
                t.announced, t.last_state = seen, row.state
                events.append(
                    state_event(
                        t.job.job_id, row, self.config.node_prefix, now, t.job.restart_count
                    )
                )
        if finished:
            events += self._finish(finished, now)
        if missing:
            events += self._resolve_missing(missing, now)
        for t in resume:
            self._resume_withdrawal(t)
        for t in unmark:
            self._drop_mark(t)
        return events

    def _went_unreachable(
        self, active: list[Tracked], exc: SlurmUnreachable, now: float
    ) -> list[BackendEvent]:
        self._failed(exc)
        events: list[BackendEvent] = []
        for t in active:
            if t.announced != _UNREACHABLE:
                t.announced = _UNREACHABLE
                events.append(
                    unreachable_event(
                        t.job.job_id,
                        t.last_state or t.job.state,
                        t.ref.text if t.ref else None,
                        now,
                        str(exc),
                        t.job.restart_count,
                    )
                )
        return events

    def _came_back(self, active: list[Tracked]) -> None:
        with self._lock:
            was = self._unreachable_since
            self._unreachable_since = None
            self._last_failure = None
        if was is not None:
            log.warning("cluster %s reachable again", self.name)
            for t in active:
                t.announced = None

    def _finish(self, pairs: list[tuple[Tracked, JobStatus]], now: float) -> list[BackendEvent]:
        need = [row.ref for _, row in pairs if row.exit_code is None]
        exact: dict[str, JobStatus] = {}
        if need:
            try:
                exact = {r.ref.text: r for r in self.watch.status(need)}
            except SlurmError as exc:
                log.warning("exit codes from %s: %s", self.name, exc)
                return []  # seen again next round
        events: list[BackendEvent] = []
        mono = time.monotonic()
        for t, row in pairs:
            final = exact.get(row.ref.text, row)
            if final.exit_code is None or not final.state.is_finished:
                final = replace(
                    row, exit_code=final.exit_code, derived_exit_code=(final.derived_exit_code)
                )
            if withdrawn_row(final) or (t.withdrawn and not final.nodes):
                if not (t.withdrawn or t.withdrawing):  # the gateway got no answer
                    events.append(
                        withdrawn_event(t.job.job_id, final, self.name, now, t.job.restart_count)
                    )
                t.finished, t.finished_row, t.last_state = True, final, final.state
                t.finished_at = mono
                continue
            events.append(
                finished_event(
                    t.job.job_id, final, self.config.node_prefix, now, t.job.restart_count
                )
            )
            t.finished, t.finished_row, t.last_state = True, final, final.state
            t.steps_due, t.finished_at = mono + 1.0, mono
        return events

    def _resolve_missing(self, missing: list[Tracked], now: float) -> list[BackendEvent]:
        """Jobs absent from the queue: slurmctld by id, then slurmdbd, then submit lines."""
        events: list[BackendEvent] = []
        with_ref = [t for t in missing if t.ref is not None]
        try:
            if with_ref:
                found = {
                    r.ref.text: r
                    for r in self.watch.status([t.ref for t in with_ref if t.ref is not None])
                }
                rest: list[Tracked] = []
                for t in with_ref:
                    assert t.ref is not None
                    row = found.get(t.ref.text)
                    if row is not None and row.state.is_finished:
                        events += self._finish([(t, row)], now)
                    elif row is not None:
                        t.announced, t.last_state = (row.state, row.reason, row.nodes), row.state
                        events.append(
                            state_event(
                                t.job.job_id, row, self.config.node_prefix, now, t.job.restart_count
                            )
                        )
                    else:
                        rest.append(t)
                if rest:
                    events += self._from_accounting(rest, now)
            for t in missing:
                if t.ref is None:
                    events += self._from_submit_lines(t, now)
        except SlurmUnreachable as exc:
            events += self._went_unreachable(missing, exc, now)
        return events

    def _from_accounting(self, ts: list[Tracked], now: float) -> list[BackendEvent]:
        acct = (self.cli or self.client).accounting([t.ref for t in ts if t.ref is not None])
        by_id = {j.job_id: j for j in acct.jobs}
        events: list[BackendEvent] = []
        for t in ts:
            assert t.ref is not None
            rec = by_id.get(t.ref.job_id)
            if rec is not None and rec.state.is_finished:
                row = JobStatus(
                    ref=t.ref,
                    state=rec.state,
                    reason=rec.reason.value,
                    nodes=rec.nodes,
                    start_time=rec.start_time,
                    end_time=rec.end_time,
                    exit_code=rec.exit_code,
                    derived_exit_code=rec.derived_exit_code,
                )
                if not (t.withdrawn and not rec.nodes):  # else the gateway has its answer
                    events.append(
                        finished_event(
                            t.job.job_id, row, self.config.node_prefix, now, t.job.restart_count
                        )
                    )
                t.finished, t.finished_row, t.last_state = True, row, rec.state
                t.finished_at = time.monotonic()
                events += [
                    step_event(
                        t.job.job_id, replace(s, job_id=t.job.job_id), now, t.job.restart_count
                    )
                    for s in acct.steps.get(rec.job_id, ())
                ]
                continue
            events += self._maybe_lost(
                t, now, f"neither slurmctld nor slurmdbd knows Slurm job {t.ref.text}"
            )
        return events

    def _maybe_lost(self, t: Tracked, now: float, why: str) -> list[BackendEvent]:
        mono = time.monotonic()
        t.missing_tries += 1
        t.first_missing = t.first_missing or mono
        if t.missing_tries < _LOST_AFTER or mono - t.first_missing < 1.0:
            return []
        with self._lock:
            self._tracked.pop(t.job.job_id, None)
        return [
            lost_event(t.job.job_id, t.ref.text if t.ref else None, now, why, t.job.restart_count)
        ]

    def _from_submit_lines(self, t: Tracked, now: float) -> list[BackendEvent]:
        tag = make_tag(self.config.instance, t.job.job_id, t.job.restart_count)
        since = (t.job.start_time or t.job.submit_time or now) - 120
        users = [u for u in {t.slurm_user, t.job.user, self._me, self.config.rest_user} if u]
        pattern = re.compile(rf"--comment[= ]['\"]?{re.escape(tag)}(?:\s|['\"]|$)")
        for user in users:
            lines = (self.cli or self.client).submit_lines(user, since)
            for job_id, line in lines.items():
                if pattern.search(line):
                    t.ref = SlurmRef(job_id, t.job.array_task_id)
                    t.since = time.monotonic() - MISSING_GRACE_S - 1
                    return self._resolve_missing([t], now)
        t.missing_tries = _LOST_AFTER
        t.first_missing = time.monotonic() - 2
        return self._maybe_lost(t, now, f"no Slurm job carries the tag {tag}")

    def _collect_steps(self, due: list[Tracked], now: float) -> list[BackendEvent]:
        refs = [t.ref for t in due if t.ref is not None]
        try:
            acct = (self.cli or self.client).accounting(refs)
        except SlurmError as exc:
            log.info("sacct on %s: %s", self.name, exc)
            for t in due:
                t.steps_tries += 1
                t.steps_due = None if t.steps_tries > 8 else time.monotonic() + 2.0
            return []
        by_id = {j.job_id: j for j in acct.jobs}
        events: list[BackendEvent] = []
        for t in due:
            rec = by_id.get(t.ref.job_id) if t.ref is not None else None
            steps = acct.steps.get(rec.job_id, ()) if rec is not None else ()
            ran = bool(t.finished_row and t.finished_row.nodes)
            complete = (
                rec is not None
                and rec.state.is_finished
                and (not ran or any(s.step_id == "batch" and s.end_time for s in steps))
            )
            if complete or t.steps_tries >= 8:
                events += [
                    step_event(
                        t.job.job_id, replace(s, job_id=t.job.job_id), now, t.job.restart_count
                    )
                    for s in steps
                ]
                t.steps_due = None
            else:
                t.steps_tries += 1
                t.steps_due = time.monotonic() + 1.5
        return events
