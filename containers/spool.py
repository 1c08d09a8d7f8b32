"""The local backend's spool: one directory per job, written atomically, read by anyone.

Layout of `<spool>/jobs/<job_id>/` (root-owned 0711 when the backend runs as root):

- `plan.json`       what the supervisor executes (JobPlan), written before it starts
- `slurm_script`    the batch script, owned by the job's user
- `spawned`         marker: a supervisor was started for this job (submit is idempotent)
- `supervisor.json` the supervisor's pid and process start time, and the job's start time
- `result.json`     how the job ended (JobResult), written once, last
- `ctl/`            requests to the supervisor (cancel, signal), one file each
- `steps/`          one JSON record per step (`batch` by the supervisor, `N` by srun);
                    owned by the job's user so that srun, running as the user, can write

Every write goes to a temporary name in the same directory and is renamed into place.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gateway.model.job import Step
from gateway.model.state import JobState, Reason

__all__ = [
    "ContainerPlan",
    "JobPlan",
    "JobResult",
    "SupervisorInfo",
    "read_json",
    "read_step",
    "step_to_json",
    "write_json",
]


def write_json(path: Path, data: Any, mode: int = 0o644) -> None:
    """Write `data` as JSON to `path` atomically (temporary file, fsync, rename)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json(path: Path) -> Any | None:
    """The JSON document at `path`, or None when it is missing or not (yet) valid."""
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError, UnicodeDecodeError):
        return None


@dataclass(frozen=True, slots=True)
class ContainerPlan:
    """Run the batch script in this image through the Docker API at `docker_host`."""

    image: str
    docker_host: str
    mounts: tuple[tuple[str, str, bool], ...] = ()  # (source, target, read_only)
    workdir: str | None = None
    name: str | None = None


@dataclass(frozen=True, slots=True)
class JobPlan:
    """Everything the per-job supervisor needs, resolved by the backend."""

    job_id: int
    name: str
    node: str
    user: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    workdir: str
    script: str  # path of the script file
    args: tuple[str, ...]
    env: dict[str, str]
    stdin: str
    stdout: str
    stderr: str | None  # None: into stdout
    open_append: bool
    time_limit_s: float | None
    kill_wait_s: float
    signal: tuple[int, float, bool] | None  # (signal, seconds before the limit, batch only)
    memory_limit_mb: int  # 0: none
    cpus: int
    ntasks: int
    umask: int = 0o022
    poll_interval_s: float = 0.05
    container: ContainerPlan | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> JobPlan:
        values = dict(data)
        values["groups"] = tuple(values["groups"])
        values["args"] = tuple(values["args"])
        if values.get("signal") is not None:
            sig, lead, batch = values["signal"]
            values["signal"] = (int(sig), float(lead), bool(batch))
        if values.get("container") is not None:
            c = dict(values["container"])
            c["mounts"] = tuple((s, t, bool(ro)) for s, t, ro in c.get("mounts", ()))
            values["container"] = ContainerPlan(**c)
        return cls(**values)


@dataclass(frozen=True, slots=True)
class SupervisorInfo:
    """Who supervises a job: pid plus process start time (pids are reused)."""

    pid: int
    create_time: float
    start_time: float

    @classmethod
    def from_json(cls, data: Any) -> SupervisorInfo | None:
        try:
            return cls(int(data["pid"]), float(data["create_time"]), float(data["start_time"]))
        except (TypeError, KeyError, ValueError):
            return None


@dataclass(frozen=True, slots=True)
class JobResult:
    """How a job ended, as Slurm records it."""

    state: JobState
    exit_code: int  # wait status (SIG_OOM: 253)
    derived_exit_code: int
    reason: Reason
    start_time: float
    end_time: float
    message: str | None = None
    max_rss_kb: int = 0
    extra: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state.long,
            "exit_code": self.exit_code,
            "derived_exit_code": self.derived_exit_code,
            "reason": self.reason.value,
            "start_time": self.start_time,
            "end_time": self.end_time,
            "message": self.message,
            "max_rss_kb": self.max_rss_kb,
            "extra": self.extra,
        }

    @classmethod
    def from_json(cls, data: Any) -> JobResult | None:
        try:
            return cls(
                state=JobState.parse(data["state"]),
                exit_code=int(data["exit_code"]),
                derived_exit_code=int(data.get("derived_exit_code", 0)),
                reason=Reason.parse(data.get("reason", "None")),
                start_time=float(data["start_time"]),
                end_time=float(data["end_time"]),
                message=data.get("message"),
                max_rss_kb=int(data.get("max_rss_kb", 0)),
                extra={str(k): str(v) for k, v in dict(data.get("extra", {})).items()},
            )
        except (TypeError, KeyError, ValueError):
            return None


def step_to_json(step: Step) -> dict[str, Any]:
    """A step record as stored in `steps/`."""
    return {
        "job_id": step.job_id,
        "step_id": step.step_id,
        "name": step.name,
        "state": step.state.long,
        "start_time": step.start_time,
        "end_time": step.end_time,
        "exit_code": step.exit_code,
        "nodes": list(step.nodes),
        "ntasks": step.ntasks,
        "cpus": step.cpus,
        "max_rss_kb": step.max_rss_kb,
        "extra": dict(step.extra),
    }


def read_step(path: Path, job_id: int) -> Step | None:
    """A step record (written by the supervisor or, as the job's user, by srun); None if bad."""
    data = read_json(path)
    if not isinstance(data, dict):
        return None
    try:
        return Step(
            job_id=job_id,
            step_id=str(data["step_id"]),
            name=str(data.get("name", "")),
            state=JobState.parse(str(data["state"])),
            start_time=_opt_float(data.get("start_time")),
            end_time=_opt_float(data.get("end_time")),
            exit_code=int(data.get("exit_code", 0)),
            nodes=tuple(str(n) for n in data.get("nodes", ())),
            ntasks=int(data.get("ntasks", 1)),
            cpus=int(data.get("cpus", 0)),
            max_rss_kb=int(data.get("max_rss_kb", 0)),
            extra={str(k): str(v) for k, v in dict(data.get("extra", {})).items()},
        )
    except (TypeError, KeyError, ValueError):
        return None


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def now() -> float:
    """Wall-clock time (seconds since the epoch)."""
    return time.time()
