"""Job control of SlurmBackend: what the gateway asks of a job Slurm already holds.

scancel and signals, scontrol hold/release and `update TimeLimit=`, ending a run for the
gateway's requeue (`end_attempt`, confirmed by Slurm before it returns), and whether a job
may be handed over with its dependency left to Slurm. Each finds the job's Slurm id first
(adopting it from Slurm's queue by its tag when the submission's answer was lost). Mixed
into SlurmBackend, which holds the state.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from gateway.model.backend import BackendError
from gateway.model.job import Job
from slurm_plugin.client import Identity, SlurmClient
from slurm_plugin.errors import SlurmRejected, SlurmUnreachable
from slurm_plugin.mapping import SlurmRef
from slurm_plugin.watch import Watcher

__all__ = ["END_ATTEMPT_WAIT_S", "SlurmJobControl"]

# how long end_attempt waits for slurmctld to confirm a cancelled job gone (its epilog and
# the steps' ends; Slurm's KillWait is 30 s by default)
END_ATTEMPT_WAIT_S = 60.0


class SlurmJobControl(Watcher):
    """The job-control half of SlurmBackend (which provides the lookups declared here)."""

    def _ref(self, job: Job) -> SlurmRef | None:
        raise NotImplementedError

    def _adopt_from_queue(
        self, job: Job, user: str | None, *, marked: bool = False
    ) -> SlurmRef | None:
        raise NotImplementedError

    def _track(self, job: Job, ref: SlurmRef, user: str | None) -> None:
        raise NotImplementedError

    def _control_identity(self, job: Job) -> Identity | None:
        raise NotImplementedError

    def _control(self) -> SlurmClient:
        return self.cli or self.client

    def _require_ref(self, job: Job) -> SlurmRef | None:
        ref = self._ref(job)
        if ref is None:
            with self._lock:
                t = self._tracked.get(job.job_id)
            if t is not None and t.in_doubt:
                ref = self._adopt_from_queue(job, t.slurm_user)
                if ref is not None:
                    self._track(job, ref, t.slurm_user)
        return ref

    def cancel(self, job: Job, signal: int | None = None, batch_only: bool = False) -> None:
        """scancel, or send a signal (to the batch shell only with `batch_only`)."""
        ref = self._require_ref(job)
        if ref is None:
            return  # never reached Slurm
        try:
            self._control().signal(
                ref, signal, batch_only=batch_only, identity=self._control_identity(job)
            )
        except SlurmRejected as exc:
            if exc.errno in (2017, 2021) or "already completing" in str(exc):
                return
            raise
        except SlurmUnreachable as exc:
            self._failed(exc)
            raise

    def signal_step(self, job: Job, step: int, signal: int | None, by: int) -> None:
        """scancel [-s SIG] ID.STEP: Slurm signals the step and records who cancelled it."""
        ref = self._require_ref(job)
        if ref is None:
            raise SlurmRejected(f"job {job.job_id} is not on cluster {self.name}", errno=2017)
        try:
            self._control().signal(ref, signal, step=step, identity=self._control_identity(job))
        except SlurmUnreachable as exc:
            self._failed(exc)
            raise

    def _act(self, job: Job, action: str) -> None:
        ref = self._require_ref(job)
        if ref is None:
            raise SlurmRejected(f"job {job.job_id} is not on cluster {self.name}", errno=2017)
        try:
            self._control().control(ref, action)
        except SlurmUnreachable as exc:
            self._failed(exc)
            raise

    def hold(self, job: Job, admin: bool = False) -> None:
        """scontrol uhold (JobHeldUser) or hold (JobHeldAdmin) of a job Slurm queues."""
        self._act(job, "hold" if admin else "uhold")

    def release(self, job: Job) -> None:
        """scontrol release."""
        self._act(job, "release")

    def end_attempt(self, job: Job, requeue: bool = False) -> None:
        """The first half of the gateway's requeue: scancel the run's Slurm job and return
        once Slurm reports it ended (not COMPLETING: every step is gone), so the next run,
        a new Slurm job, never overlaps it. Slurm's own `scontrol requeue` is not used: it
        keeps one Slurm job over several runs, while a run here is one tagged Slurm job
        (so its output says scancel's `CANCELLED AT`, not `DUE TO JOB REQUEUE`: `requeue`
        changes nothing here)."""
        ref = self._require_ref(job)
        if ref is None:
            with self._lock:
                t = self._tracked.get(job.job_id)
            if t is not None and t.in_doubt:
                raise BackendError(
                    f"job {job.job_id}: its submission to {self.name} is in doubt",
                    retryable=True,
                )
            return  # never reached Slurm
        self.cancel(job)
        deadline = time.monotonic() + END_ATTEMPT_WAIT_S
        while True:
            try:
                rows = self._control().status([ref])
            except SlurmUnreachable as exc:
                self._failed(exc)
                raise BackendError(str(exc), retryable=True) from exc
            if all(r.state.is_finished for r in rows):
                return
            if time.monotonic() > deadline:
                states = ",".join(r.state.long for r in rows)
                raise BackendError(
                    f"Slurm job {ref.text} still {states} after scancel", retryable=True
                )
            time.sleep(0.2)

    def update_time_limit(self, job: Job, minutes: int) -> None:
        """scontrol update TimeLimit (minutes; Slurm checks partition limits)."""
        from gateway.model.values import INFINITE

        ref = self._require_ref(job)
        if ref is None:
            raise SlurmRejected(f"job {job.job_id} is not on cluster {self.name}", errno=2017)
        value = "UNLIMITED" if minutes == INFINITE else str(minutes)
        self._control().update(ref, {"TimeLimit": value})

    def native_dependency_ok(self, job: Job, targets: Sequence[Job]) -> bool:
        """May the gateway hand `job` to this cluster before its dependencies are met?

        Yes when native dependencies are on and every target is a job of this cluster
        that reached Slurm (or finished): Slurm then holds the job (Reason=Dependency).
        `targets` are all of the gateway's records of the ids the dependency names."""
        dep = job.spec.dependency
        if not self.config.native_dependencies or dep is None:
            return False
        named = {i.job_id for i in dep.items if i.job_id}
        if any(i.kind.value == "afterburstbuffer" for i in dep.items):
            return False
        for target_id in named:
            records = [t for t in targets if t.job_id == target_id or t.array_job_id == target_id]
            if not records:
                return False
            for t in records:
                if t.is_array_meta and t.array_pending is not None:
                    return False
                if t.state.is_finished:
                    continue
                if t.cluster != self.name or not t.backend_id:
                    return False
        return True
