"""The local backend's spool: one directory per job, written atomically, read defensively.

Layout, when the backend runs as root (writers: B the backend in the gateway, S the job's
supervisor, U the job's user (srun); every root file is written by `write_json` unless said):

`<spool>/` (0711) holds `bin/srun` (B, 0755: the shim first on every job's PATH) and
`jobs/` (0711), which holds `.<job_id>.lock` (B, 0600: the per-job lock and its floor, the
lowest run that may still start; containers.attempts) and one directory per run,
`<job_id>` for run 0 and `<job_id>.<run>` after a requeue (B, root 0711):

- `plan.json`         B, 0600: what the supervisor executes (JobPlan, with the environment)
- `slurm_script`      B, owned by the job's user, 0700: the batch script
- `proctrack.json`    B, 0600: the run's process group (containers.proctrack `record`);
                      absent for a job with an image (its container carries labels instead)
- `spawned`           B (plain write, the gateway's umask; holds only a time): a supervisor
                      was started for this run (submit is idempotent)
- `supervisor.log`    B creates it 0600, S writes it: the supervisor's own stdout/stderr
- `supervisor.json`   S, 0600: the supervisor's pid and process start time, the job's start
- `batch_step.json`   S, 0600: the `batch` step (RUNNING, then how it ended)
- `closed_steps.json` S, 0600: srun steps the supervisor closed (killed with the job); they
                      override srun's own records
- `ended`             B, 0600: the run was ended (requeue, fail-over, a lost supervisor); a
                      supervisor or script process that finds it never runs the script
- `result.json`       S, 0600, written once, last: how the job ended (JobResult); B writes it
                      instead (NODE_FAIL) when the supervisor died (containers.attempts)
- `ctl/`              B, 0700: requests to the supervisor (cancel, signal, time limit), one
                      0600 file each, removed by S when read
- `steps/`            owned by the job's user, 0700: one record per srun step (`N.json`, U,
                      0600), written by srun as the user

Privilege rule (slurmstepd's): root writes only into directories it owns (`write_json`
checks), and reads the user's `steps/` only through `read_owned_json` (a directory
descriptor, no symlinks, regular files of the user, bounded size) and `parse_step` (every
field checked), so nothing a user puts there makes root touch another file, block or bloat.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
import stat
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from gateway.model.job import Step
from gateway.model.state import JobState, Reason

__all__ = [
    "LOG_ONLY",
    "RECORD_LIMIT",
    "ContainerPlan",
    "JobPlan",
    "JobResult",
    "SupervisorInfo",
    "open_dir",
    "parse_step",
    "read_json",
    "read_owned_json",
    "read_step",
    "step_to_json",
    "write_json",
]

RECORD_LIMIT = 256 * 1024  # the largest step record read from a user's directory
_DOCUMENT_LIMIT = 64 * 1024 * 1024  # the largest root-owned spool document (plan.json)
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY


def write_json(path: Path, data: Any, mode: int = 0o600, durable: bool = True) -> None:
    """Write `data` as JSON to `path` atomically (temporary file, fchmod, fsync, rename).
    `durable=False` skips the fsync, for records that a machine crash makes moot anyway
    (a running supervisor's pid, a RUNNING step: its processes died with the machine); the
    rename keeps them atomic for every process that reads them.

    Precondition: `path.parent` belongs to this process's effective uid and nobody else may
    write to it (raises PermissionError otherwise). In a directory another user can write,
    that user could rename, replace or swap the temporary file; root must never do this in
    a job user's directory (srun writes those records itself, as the user).
    """
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        st = os.fstat(dir_fd)
        if st.st_uid != os.geteuid() or st.st_mode & 0o022:
            raise PermissionError(
                f"write_json: {path.parent} is not private to uid {os.geteuid()} "
                f"(owner {st.st_uid}, mode {stat.S_IMODE(st.st_mode):o})"
            )
        tmp = f".{path.name}.{secrets.token_hex(6)}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, 0o600, dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(json.dumps(data, sort_keys=True))  # dumps: the C encoder, not dump's
                fh.flush()
                os.fchmod(fh.fileno(), mode)
                if durable:
                    os.fsync(fh.fileno())
            os.replace(tmp, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
    finally:
        os.close(dir_fd)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number")


def _read_fd(fd: int, limit: int, owner: int | None) -> Any | None:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
        return None
    if owner is not None and st.st_uid != owner:
        return None
    data = os.read(fd, limit + 1)
    if len(data) > limit:
        return None
    try:
        return json.loads(data, parse_constant=_reject_constant)
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError too
        return None


def read_json(path: Path, limit: int = _DOCUMENT_LIMIT) -> Any | None:
    """The JSON document at `path`, or None when it is missing, not (yet) valid, not a
    regular file (a symlink is not followed, a FIFO does not block) or larger than `limit`."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError:
        return None
    try:
        return _read_fd(fd, limit, None)
    except OSError:
        return None
    finally:
        os.close(fd)


def open_dir(path: Path) -> int | None:
    """A descriptor of the directory `path` (its last component not followed), or None."""
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None


def read_owned_json(dir_fd: int, name: str, owner: int, limit: int = RECORD_LIMIT) -> Any | None:
    """The JSON document `name` in the directory `dir_fd` if it is a regular file of uid
    `owner` no larger than `limit` (no symlink followed, no FIFO or device opened for
    reading in blocking mode), else None. For files in directories a user controls."""
    if "/" in name or name in ("", ".", ".."):
        return None
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        return _read_fd(fd, limit, owner)
    except OSError:
        return None
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class ContainerPlan:
    """Run the batch script in this image through the Docker API at `docker_host`."""

    image: str
    docker_host: str
    mounts: tuple[tuple[str, str, bool], ...] = ()  # (source, target, read_only)
    workdir: str | None = None
    name: str | None = None
    labels: tuple[tuple[str, str], ...] = ()  # set on the container: how it is found again


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
    rlimits: tuple[tuple[str, int], ...] = ()  # the submitter's soft limits (SLURM_RLIMIT_*)
    poll_interval_s: float = 0.05
    container: ContainerPlan | None = None
    batch: bool = True  # False: salloc's holder, which slurmd would not account as a step
    # slurmctld's PERIODIC_TIMEOUT (time-scaled): its time-limit checks, which send --signal
    check_period_s: float = 30.0

    def to_json(self) -> dict[str, Any]:
        """Shallow (asdict's deep copy of the environment was most of a launch's plan cost):
        the document is only encoded, never changed."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        if self.container is not None:
            data["container"] = asdict(self.container)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> JobPlan:
        values = dict(data)
        values["groups"] = tuple(values["groups"])
        values["args"] = tuple(values["args"])
        values["rlimits"] = tuple((str(n), int(v)) for n, v in values.get("rlimits", ()))
        if values.get("signal") is not None:
            sig, lead, batch = values["signal"]
            values["signal"] = (int(sig), float(lead), bool(batch))
        if values.get("container") is not None:
            c = dict(values["container"])
            c["mounts"] = tuple((s, t, bool(ro)) for s, t, ro in c.get("mounts", ()))
            c["labels"] = tuple((str(k), str(v)) for k, v in c.get("labels", ()))
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


LOG_ONLY = "log"  # JobResult.extra: words for the gateway's log that Slurm shows nowhere else


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


_STEP_STATES = frozenset(
    {
        JobState.RUNNING,
        JobState.COMPLETED,
        JobState.FAILED,
        JobState.CANCELLED,
        JobState.TIMEOUT,
        JobState.OUT_OF_MEMORY,
        JobState.NODE_FAIL,
    }
)
_MAX_TEXT = 1024
_MAX_ITEMS = 64


def _int(value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"not an integer in [{low}, {high}]: {value!r}")
    return value


def _time(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"not a time: {value!r}")
    t = float(value)
    if not math.isfinite(t) or not 0 <= t < 1e11:
        raise ValueError(f"not a time: {value!r}")
    return t


def _text(value: Any) -> str:
    if not isinstance(value, str) or len(value) > _MAX_TEXT:
        raise ValueError("not a short string")
    return value


def parse_step(data: Any, job_id: int, step_id: str | None = None) -> Step | None:
    """A step from its record, every field type- and range-checked (srun's records are
    written by the job's user); None if anything is off. `step_id`: what the record must
    say it is (its file name), so a record cannot stand in for another step."""
    if not isinstance(data, dict):
        return None
    try:
        sid = _text(data["step_id"])
        if step_id is not None and sid != step_id:
            return None
        state = JobState.parse(_text(data["state"]))
        if state not in _STEP_STATES:
            return None
        nodes = data.get("nodes", [])
        extra = data.get("extra", {})
        if not isinstance(nodes, list) or len(nodes) > _MAX_ITEMS:
            return None
        if not isinstance(extra, dict) or len(extra) > _MAX_ITEMS:
            return None
        return Step(
            job_id=job_id,
            step_id=sid,
            name=_text(data.get("name", "")),
            state=state,
            start_time=_time(data.get("start_time")),
            end_time=_time(data.get("end_time")),
            exit_code=_int(data.get("exit_code", 0), 0, 0xFFFF),
            nodes=tuple(_text(n) for n in nodes),
            ntasks=_int(data.get("ntasks", 1), 0, 1 << 24),
            cpus=_int(data.get("cpus", 0), 0, 1 << 24),
            max_rss_kb=_int(data.get("max_rss_kb", 0), 0, 1 << 50),
            extra={_text(k): _text(v) for k, v in extra.items()},
        )
    except (TypeError, KeyError, ValueError):
        return None


def read_step(path: Path, job_id: int) -> Step | None:
    """A step record in a root-owned place (the supervisor's); None if missing or bad."""
    return parse_step(read_json(path, RECORD_LIMIT), job_id)


def now() -> float:
    """Wall-clock time (seconds since the epoch)."""
    return time.time()
