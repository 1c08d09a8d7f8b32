"""Stopping and continuing a running job's processes (scontrol suspend/resume, preemption
in SUSPEND mode), as slurmstepd does with proctrack/linuxproc: SIGSTOP to every process of
the job, SIGCONT to resume.

The gateway asks the job's supervisor through its `ctl/` directory (never by a path the
job's user names); the supervisor signals the job's own process group (its cgroup or
session marker, its process group and its descendants: `BatchRunner.signal_all`), twice, so
that a process forked during the first pass is stopped by the second. It then records the
outcome in `suspend.json` with the request's token, which the backend waits for: the call
returns only once the processes are stopped (or continued). The supervisor also stops the
time limit clock while the job is suspended (`Pause.shift`).
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

from containers.runner import BatchRunner
from containers.spool import read_json, write_json
from gateway.model.backend import BackendError

__all__ = ["SUSPEND_FILE", "Pause", "request_pause"]

SUSPEND_FILE = "suspend.json"
_ACTIONS = ("suspend", "resume")
_WAIT_S = 10.0
_ALREADY_DONE = 2021  # ESLURM_ALREADY_DONE


class Pause:
    """The supervisor's side: whether the job is stopped, and since when."""

    def __init__(self, jobdir: Path) -> None:
        self.file = jobdir / SUSPEND_FILE
        self.since: float | None = None

    @property
    def stopped(self) -> bool:
        """Whether the job's processes are stopped now."""
        return self.since is not None

    def apply(self, runner: BatchRunner, action: str, token: object, now: float) -> float:
        """Carry out one request; the seconds the job was stopped when it resumes (to move
        its deadline by), else 0."""
        shift = 0.0
        if action == "suspend" and self.since is None:
            for _ in range(2):
                runner.signal_all(signal.SIGSTOP)
            self.since = now
        elif action == "resume" and self.since is not None:
            runner.signal_all(signal.SIGCONT)
            shift, self.since = now - self.since, None
        write_json(self.file, {"token": token, "stopped": self.stopped, "since": self.since})
        return shift


def request_pause(jobdir: Path, action: str, wait_s: float = _WAIT_S) -> None:
    """The backend's side: ask the supervisor to stop (`suspend`) or continue (`resume`)
    the job and return once it has; BackendError (retryable) when it does not answer in
    time, not retryable when the run has ended."""
    if action not in _ACTIONS:
        raise ValueError(f"action must be one of {_ACTIONS}, not {action!r}")
    if not (jobdir / "spawned").exists():
        raise BackendError(f"{jobdir.name}: not started on the local backend")
    token = time.time_ns()
    write_json(jobdir / "ctl" / f"{token}.json", {"action": action, "token": token}, mode=0o600)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if (jobdir / "result.json").exists():
            raise BackendError(f"{jobdir.name}: the run has ended", errno=_ALREADY_DONE)
        data = read_json(jobdir / SUSPEND_FILE)
        if isinstance(data, dict) and data.get("token") == token:
            return
        time.sleep(0.02)
    raise BackendError(f"{jobdir.name}: the supervisor did not {action} the job", retryable=True)
