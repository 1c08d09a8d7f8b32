"""The optional pyslurm transport: slurmctld's C API in-process, where pyslurm fits the site.

pyslurm is built against one Slurm release (its version is `<slurm major>.<minor>.N`, e.g.
22.5.1 for Slurm 22.05). PyPI only carries pyslurm 25.11, which does not build against
Debian 12's Slurm 22.05 (libslurm 38), so pyslurm is an optional extra, never imported on
the default path: `transport = "pyslurm"` must be chosen, and `pyslurm_status()` says at
run time whether it is usable. Install a matching build from source (`git clone
--branch v22.5.x https://github.com/PySlurm/pyslurm; pip install .` with libslurm-dev).

What it does in-process: the status poll (`pyslurm.job().get()`) and signalling
(`pyslurm.slurm_kill_job`). Everything else (submission, control, accounting, discovery)
goes through the commands, which stay exact for every sbatch option.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from gateway.compat.fmt_common import hostlist_expand
from gateway.model.job import wait_status
from slurm_plugin.cli import CliClient
from slurm_plugin.client import Identity, JobStatus, RowFilter
from slurm_plugin.config import SlurmClusterConfig
from slurm_plugin.errors import SlurmError, SlurmRejected, SlurmUnreachable
from slurm_plugin.mapping import SlurmRef, slurm_state

__all__ = ["PyslurmClient", "PyslurmStatus", "pyslurm_status"]


@dataclass(frozen=True, slots=True)
class PyslurmStatus:
    """Whether pyslurm can be used with a site's Slurm, and why not."""

    usable: bool
    detail: str
    version: str | None = None


def _release(text: str) -> tuple[int, int] | None:
    parts = text.strip().split(".")
    if len(parts) < 2 or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    return int(parts[0]), int(parts[1])


def pyslurm_status(site_version: str, module: ModuleType | None = None) -> PyslurmStatus:
    """Is pyslurm installed and built for this Slurm release (`22.05.8` -> 22.5.x)?"""
    if module is None:
        if importlib.util.find_spec("pyslurm") is None:
            return PyslurmStatus(False, "pyslurm is not installed (optional extra)")
        try:
            module = importlib.import_module("pyslurm")
        except ImportError as exc:  # built against another libslurm
            return PyslurmStatus(False, f"pyslurm does not load: {exc}")
    version_fn = getattr(module, "version", None)
    version = str(version_fn() if callable(version_fn) else getattr(module, "__version__", ""))
    mine, site = _release(version), _release(site_version)
    if mine is None or site is None:
        return PyslurmStatus(False, f"cannot compare pyslurm {version!r} with {site_version!r}")
    if mine != site:
        return PyslurmStatus(
            False,
            f"pyslurm {version} is for Slurm {mine[0]}.{mine[1]:02d}, the site runs {site_version}",
            version,
        )
    return PyslurmStatus(True, f"pyslurm {version} matches Slurm {site_version}", version)


def _time(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and value > 0 else None


def _exit(value: Any) -> int | None:
    if isinstance(value, int):
        return value
    if isinstance(value, str) and ":" in value:
        code, sig = value.split(":", 1)
        if code.isdigit() and sig.isdigit():
            return wait_status(int(code), int(sig))
    return None


def status_from_pyslurm(job_id: int, rec: dict[str, Any]) -> JobStatus:
    """One record of `pyslurm.job().get()` (22.5 API) as a JobStatus."""
    task = rec.get("array_task_id")
    array_job = rec.get("array_job_id") or 0
    ref = SlurmRef(job_id, None)
    is_task = isinstance(task, int) and isinstance(array_job, int) and array_job > 0
    if isinstance(task, int) and isinstance(array_job, int) and array_job > 0:
        ref = SlurmRef(array_job, task)
    return JobStatus(
        ref=ref,
        state=slurm_state(str(rec.get("job_state") or "")),
        reason=str(rec.get("state_reason") or "None"),
        user=str(rec.get("user_name") or rec.get("user_id") or ""),
        name=str(rec.get("name") or ""),
        partition=str(rec.get("partition") or ""),
        comment=str(rec.get("comment") or ""),
        nodes=hostlist_expand(rec.get("nodes") or None),
        submit_time=_time(rec.get("submit_time")),
        start_time=_time(rec.get("start_time")),
        end_time=_time(rec.get("end_time")),
        exit_code=_exit(rec.get("exit_code")),
        derived_exit_code=_exit(rec.get("derived_ec")),
        restart_count=rec.get("restart_cnt") if isinstance(rec.get("restart_cnt"), int) else None,
        array_job_id=int(array_job) if is_task else 0,
        extra={"job_id": str(job_id)},
    )


class PyslurmClient(CliClient):
    """The commands transport with the status poll and signals done by pyslurm."""

    def __init__(self, config: SlurmClusterConfig, module: ModuleType | None = None) -> None:
        super().__init__(config)
        site = self.version()
        state = pyslurm_status(site, module)
        if not state.usable:
            raise SlurmError(f"cluster {config.name}: transport 'pyslurm': {state.detail}")
        self._py: Any = module or importlib.import_module("pyslurm")

    def _jobs(self) -> dict[int, dict[str, Any]]:
        try:
            got = self._py.job().get()
        except ValueError as exc:  # pyslurm raises ValueError(slurm_strerror) on failure
            text = str(exc)
            if "Unable to contact" in text or "timed out" in text:
                raise SlurmUnreachable(text) from exc
            raise SlurmRejected(text) from exc
        return {int(k): v for k, v in dict(got).items()}

    def statuses(
        self, users: Collection[str] | None = None, keep: RowFilter | None = None
    ) -> list[JobStatus]:
        """Every job, in-process."""
        rows = [status_from_pyslurm(k, v) for k, v in self._jobs().items()]
        if users:
            rows = [r for r in rows if r.user in users]
        if keep is not None:
            rows = [
                r
                for r in rows
                if keep.keeps(int(r.extra.get("job_id", r.ref.job_id)), r.array_job_id, r.comment)
            ]
        return rows

    def status(self, refs: Sequence[SlurmRef]) -> list[JobStatus]:
        """These jobs, in-process."""
        wanted = {r.text for r in refs}
        return [r for r in self.statuses() if r.ref.text in wanted]

    def signal(
        self,
        ref: SlurmRef,
        signal: int | None,
        *,
        batch_only: bool = False,
        step: int | None = None,
        identity: Identity | None = None,
    ) -> None:
        """slurm_kill_job (the gateway's identity: it already checked the caller)."""
        if identity is not None or ref.task is not None or signal is None or step is not None:
            super().signal(ref, signal, batch_only=batch_only, step=step, identity=identity)
            return
        try:
            self._py.slurm_kill_job(
                ref.job_id, signal if signal is not None else 9, 1 if batch_only else 0
            )
        except ValueError as exc:
            raise SlurmRejected(str(exc)) from exc
