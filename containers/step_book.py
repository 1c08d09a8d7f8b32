"""The book of a local job's running steps: what each holds, kept where srun can see it.

Slurm's slurmctld keeps every step's CPUs and memory and answers each new step from them
(containers/step_alloc.py is that answer). A local job has no slurmctld: its sruns run as
the job's user, side by side, so they keep the book themselves in the job's `steps/`
directory. A step's record (`N.json`, which sacct reads) carries its hold, and srun keeps
an flock on `.N.lock` while the step runs and removes it after: a lock nobody holds is
left by an srun that is gone (even by SIGKILL), whose step holds nothing. Only the locks
are read, so a job of thousands of steps does not make each srun read every record. New
steps are decided one at a time under `.alloc.lock`: two sruns never take the same CPUs.
A step refused after slurmctld would have numbered it leaves `.N.spent`: its id is used.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from containers.step_alloc import Grant, Hold, JobShare, Refused, Spent, StepAsk, pick_step

__all__ = ["Claimed", "StepBook"]

_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
_RECORD_LIMIT = 1 << 16


class Claimed:
    """A step that got its resources: its id, record path and hold, and the lock that
    says it runs (released by `close`, or by the process ending)."""

    def __init__(self, step_id: int, record: Path, grant: Grant, lock_fd: int) -> None:
        self.step_id, self.record, self.grant, self._fd = step_id, record, grant, lock_fd

    @property
    def lock_fd(self) -> int:
        """The lock, made inheritable: the step's tasks keep it held while they run."""
        os.set_inheritable(self._fd, True)
        return self._fd

    def close(self) -> None:
        """The step ended: its hold is free for the steps waiting."""
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.unlink(self.record.with_name(f".{self.step_id}.lock"))
            os.close(self._fd)
            self._fd = -1


class StepBook:
    """The running steps of one job, as its `steps/` directory records them."""

    def __init__(self, step_dir: Path) -> None:
        self.dir = step_dir

    @contextlib.contextmanager
    def _deciding(self) -> Iterator[None]:
        fd = os.open(self.dir / ".alloc.lock", _FLAGS, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _scan(self) -> tuple[dict[int, Hold], int]:
        """The holds of the steps whose srun still runs, by step id (a lock left by an srun
        that is gone is removed), and the next free step id (past every record)."""
        out: dict[int, Hold] = {}
        locks: list[int] = []
        last = -1
        with os.scandir(self.dir) as entries:
            for entry in entries:
                stem, _, ext = entry.name.lstrip(".").partition(".")
                if not (stem.isdigit() and len(stem) < 10):
                    continue
                if ext == "json" or ext == "spent":
                    last = max(last, int(stem))
                elif ext == "lock" and entry.name.startswith("."):
                    locks.append(int(stem))
        for step_id in locks:
            if not self._alive(step_id):
                with contextlib.suppress(OSError):
                    os.unlink(self.dir / f".{step_id}.lock")
                continue
            hold = _hold(_read(self.dir / f"{step_id}.json"))
            if hold is not None:
                out[step_id] = hold
        return out, last + 1

    def _alive(self, step_id: int) -> bool:
        """Whether the step's srun holds its lock (a running srun holds it exclusively)."""
        try:
            fd = os.open(self.dir / f".{step_id}.lock", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    def claim(
        self, job: JobShare, ask: StepAsk, record: Callable[[int, Grant], dict[str, Any]]
    ) -> Claimed | tuple[Refused, frozenset[int]]:
        """Decide the step against the running ones; on a grant, take the next step id, its
        lock, and write its first record (`record(step_id, grant)`, given the hold) before
        anyone else decides. A refusal comes with the ids of the steps it saw running."""
        with self._deciding():
            running, step_id = self._scan()
            answer = pick_step(job, list(running.values()), ask)
            if isinstance(answer, Refused):
                return answer, frozenset(running)
            step_id, fd = self._number(step_id, "json" if isinstance(answer, Grant) else "spent")
            if isinstance(answer, Spent):
                os.close(fd)
                return answer.reason, frozenset(running)
            lock_fd = os.open(self.dir / f".{step_id}.lock", _FLAGS, 0o600)
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
            data = record(step_id, answer)
            data["hold"] = {
                "nodes": list(answer.hold.nodes),
                "cpus": list(answer.hold.cpus),
                "mem": list(answer.hold.mem_mb),
                "gpus": [list(g) for g in answer.hold.gpus],
            }
            with os.fdopen(fd, "w") as fh:
                fh.write(json.dumps(data, sort_keys=True))
            return Claimed(step_id, self.dir / f"{step_id}.json", answer, lock_fd)

    def _number(self, step_id: int, ext: str) -> tuple[int, int]:
        """The first free step id from `step_id` on, taken by creating `N.<ext>` (`.N.spent`
        for an id used by a refusal); returns it and the open file."""
        while True:
            name = f"{step_id}.json" if ext == "json" else f".{step_id}.{ext}"
            try:
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                return step_id, os.open(self.dir / name, flags, 0o600)
            except FileExistsError:
                step_id += 1

    def snapshot(self) -> frozenset[int]:
        """The ids of the running steps (a change is what wakes a waiting srun)."""
        with self._deciding():
            return frozenset(self._scan()[0])


def _read(path: Path) -> Any:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        raw = fh.read(_RECORD_LIMIT)
    try:
        return json.loads(raw)
    except ValueError:
        return None


def _hold(data: Any) -> Hold | None:
    """A running record's hold; None for ended, unheld or malformed records."""
    if not isinstance(data, dict) or data.get("state") != "RUNNING":
        return None
    hold = data.get("hold")
    if not isinstance(hold, dict):
        return None
    nodes, cpus, mem = hold.get("nodes"), hold.get("cpus"), hold.get("mem")
    gpus = hold.get("gpus", [])
    if not (
        isinstance(nodes, list)
        and isinstance(cpus, list)
        and isinstance(mem, list)
        and isinstance(gpus, list)
    ):
        return None
    if not all(isinstance(n, str) for n in nodes) or not all(isinstance(g, list) for g in gpus):
        return None
    numbers = (*cpus, *mem, *(i for g in gpus for i in g))
    if not all(isinstance(v, int) and v >= 0 for v in numbers):
        return None
    return Hold(tuple(nodes), tuple(cpus), tuple(mem), tuple(tuple(g) for g in gpus))
