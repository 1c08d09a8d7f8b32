"""Withdrawing a job Slurm still queues, safe against the race with its start.

The gateway moves a pending job to another cluster (or revokes a sibling) only once the
run here is gone for good. The sequence, each step answered by slurmctld itself:

1. mark: the comment gets `caldera-withdraw` after the tag (slurm_plugin.mapping), so the
   intent survives the gateway being killed here; the cancelled job is recognisably a
   withdrawn run (the watcher reports WITHDRAWN, not CANCELLED);
2. `scontrol hold`: priority 0, so a job still pending can no longer start. It also
   succeeds on a job that already started (22.05 does not refuse), so it proves nothing;
3. `scontrol show job`: still PENDING (held) -> step 4; anything else: it started before
   the hold, so it is kept: released (its priority back) and unmarked -> False;
4. scancel, then `scontrol show job` until it is CANCELLED -> True.

A job still pending that could not be marked and held is never cancelled (BackendError).
Unreachable at any step: BackendError(retryable) and no answer. A marked job left behind
(a gateway killed between steps, or unreachable half-way) is finished by the watcher: a
pending one is withdrawn and reported WITHDRAWN (the gateway places the run again; nothing
of it ever ran), a started one is unmarked and kept. Withdrawing is thus always completed
or undone, never left half-way, and a started job is never cancelled.
"""

from __future__ import annotations

import logging
import os
import signal
import time

from gateway.model.backend import BackendError
from gateway.model.job import Job
from gateway.model.state import JobState
from slurm_plugin.client import JobStatus
from slurm_plugin.errors import SlurmError, SlurmRejected, SlurmUnreachable
from slurm_plugin.job_control import SlurmJobControl
from slurm_plugin.mapping import SlurmRef, tagged_comment, withdrawal_comment
from slurm_plugin.watch import Tracked

__all__ = ["WITHDRAW_CONFIRM_S", "SlurmWithdraw"]

log = logging.getLogger("caldera.slurm")

WITHDRAW_CONFIRM_S = 10.0  # scancel of a held pending job is immediate in slurmctld
# tests/e2e/test_gateway_federation.py: the gateway dies between hold and check, as a
# kill -9 at that instant would (which cannot be timed from outside)
_CRASH_AFTER_HOLD = os.environ.get("CALDERA_TEST_CRASH_IN_WITHDRAW") == "1"
_QUEUED = frozenset({JobState.PENDING, JobState.REQUEUED, JobState.REQUEUE_HOLD})


def never_started(row: JobStatus) -> bool:
    """A Slurm job that ended without ever having had nodes."""
    return row.state.is_finished and not row.nodes


class SlurmWithdraw(SlurmJobControl):
    """The withdrawal half of SlurmBackend."""

    def withdraw(self, job: Job) -> bool:
        """Take back a run Slurm holds but has not started: True when it is gone and will
        never start, False when it started (it is kept). BackendError(retryable) when
        slurmctld cannot answer now. Nothing is reported for a run withdrawn here: the
        gateway has the answer."""
        ref = self._require_ref(job)
        if ref is None:
            self._reachable_now()
            try:  # not known here (e.g. after a restart): Slurm's queue by the job's tag
                ref = self._adopt_from_queue(job, None, marked=True)
            except SlurmUnreachable as exc:
                self._failed(exc)
                raise
            if ref is None:
                return True  # never reached Slurm: nothing there can start
        return self._withdraw_tracked(job, ref, answered=True)

    def _withdraw_tracked(self, job: Job, ref: SlurmRef, *, answered: bool) -> bool:
        """Withdraw with the watcher told (`answered`: the gateway gets the answer, so the
        watcher reports nothing; else it reports WITHDRAWN)."""
        self._reachable_now()
        with self._lock:
            t = self._tracked.get(job.job_id)
            if t is not None:
                t.withdrawing = True
        done = False
        try:
            done = self._withdraw(job, ref)
        except SlurmUnreachable as exc:
            self._failed(exc)
            raise
        finally:
            if t is not None:
                with self._lock:
                    t.withdrawn = t.withdrawn or (done and answered)
                    t.withdrawing = False
        return done

    def _reachable_now(self) -> None:
        """SlurmUnreachable at once unless slurmctld answers `scontrol ping` now (scontrol
        update and show would retry a dead controller for 9-18 s)."""
        self._fail_fast()
        try:
            self._control().ping()
        except SlurmUnreachable as exc:
            self._failed(exc)
            raise

    def _withdraw(self, job: Job, ref: SlurmRef) -> bool:
        ctl = self._control()
        instance = self.config.instance
        marked = withdrawal_comment(instance, job.job_id, job.spec.comment, job.restart_count)
        refused: SlurmRejected | None = None
        try:
            ctl.update(ref, {"Comment": marked})
            ctl.control(ref, "hold")
            if _CRASH_AFTER_HOLD:  # test hook: a gateway killed half-way (marked and held)
                os.kill(os.getpid(), signal.SIGKILL)
        except SlurmRejected as exc:  # finished, or gone from slurmctld: decided below
            log.info("withdrawal of Slurm job %s: %s", ref.text, exc)
            refused = exc
        row = self._row(ref)
        if row is not None and row.state in _QUEUED:
            if refused is not None:  # pending but not held: never cancel it so
                self._keep(job, ref, release=False)
                raise BackendError(f"Slurm job {ref.text} not withdrawn: {refused}")
            row = self._cancel_held(job, ref)
        if row is None:  # slurmctld forgot it (MinJobAge): did it ever run?
            records = (self.cli or self.client).accounting([ref]).jobs
            return not any(r.nodes for r in records)
        if never_started(row):
            return True
        self._keep(job, ref, release=row.state.is_active)  # it started before the hold
        return False

    def _keep(self, job: Job, ref: SlurmRef, *, release: bool) -> None:
        """Undo the hold (its priority back) and the mark of a job that stays."""
        ctl = self._control()
        plain = tagged_comment(
            self.config.instance, job.job_id, job.spec.comment, job.restart_count
        )
        try:
            if release:
                ctl.control(ref, "release")
            ctl.update(ref, {"Comment": plain})
        except SlurmError as exc:  # ended meanwhile, or unreachable: the watcher unmarks it
            log.info("Slurm job %s kept: %s", ref.text, exc)

    def _row(self, ref: SlurmRef) -> JobStatus | None:
        """The job as slurmctld has it now (never a cached row)."""
        rows = self._control().status([ref])
        return rows[0] if rows else None

    def _cancel_held(self, job: Job, ref: SlurmRef) -> JobStatus | None:
        """scancel a held pending job, and its row once slurmctld says it ended."""
        try:
            self._control().signal(ref, None, identity=self._control_identity(job))
        except SlurmRejected as exc:  # ended meanwhile (by someone else)
            log.info("scancel of withdrawn Slurm job %s: %s", ref.text, exc)
        deadline = time.monotonic() + WITHDRAW_CONFIRM_S
        while True:
            row = self._row(ref)
            if row is None or row.state.is_finished:
                return row
            if time.monotonic() > deadline:
                raise SlurmUnreachable(f"Slurm job {ref.text} still {row.state.long} after scancel")
            time.sleep(0.05)

    def _resume_withdrawal(self, t: Tracked) -> None:
        if t.ref is None:
            return
        log.warning("finishing the withdrawal of Slurm job %s (job %s)", t.ref.text, t.job.job_id)
        try:
            self._withdraw_tracked(t.job, t.ref, answered=False)
        except SlurmError as exc:
            log.warning("withdrawal of Slurm job %s: %s", t.ref.text, exc)

    def _drop_mark(self, t: Tracked) -> None:
        if t.ref is None:
            return
        job = t.job
        instance = self.config.instance
        comment = tagged_comment(instance, job.job_id, job.spec.comment, job.restart_count)
        try:
            self._control().update(t.ref, {"Comment": comment})
        except SlurmError as exc:
            log.info("unmarking Slurm job %s: %s", t.ref.text, exc)
