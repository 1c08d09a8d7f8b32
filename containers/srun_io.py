"""What a step of the local backend reads and writes: its record in the job's spool (for
sacct), per-task output names (`-o out-%t`), labelled output, and srun's lines about failed
tasks (`--multi-prog` files: containers/multi_prog.py).

srun runs as the job's user: everything here touches only the user's own files.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from containers.srun_layout import Step
from containers.step_rules import recorded_status, task_file_name

__all__ = [
    "KILL_WAIT_VAR",
    "describe_failures",
    "kill_on_bad_exit",
    "record_step",
    "relay",
    "srun_status",
    "step_status",
    "task_file",
]

# KillWait in seconds, in every job's environment (containers.planning): how long srun
# --kill-on-bad-exit waits between SIGTERM and SIGKILL
KILL_WAIT_VAR = "CALDERA_KILL_WAIT"

_SIGNAL_NAMES = {
    signal.SIGKILL: "Killed",
    signal.SIGTERM: "Terminated",
    signal.SIGSEGV: "Segmentation fault",
    signal.SIGABRT: "Aborted",
    signal.SIGINT: "Interrupt",
    signal.SIGBUS: "Bus error",
}


def record_step(path: Path | None, data: dict[str, Any]) -> None:
    """Replace the step's record atomically. srun runs as the job's user in the user's own
    `steps/`; the supervisor and gateway read it as root (containers.steprecords)."""
    if path is None:
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with os.fdopen(os.open(tmp, flags, 0o600), "w") as fh:
        fh.write(json.dumps(data, sort_keys=True))
    os.replace(tmp, path)


# how much of one line a relay holds before writing it out unfinished (bounds memory)
_LINE_LIMIT = 1 << 20


def relay(stream: IO[bytes], sink: int, prefix: bytes, lock: threading.Lock) -> None:
    """Copy a task's output to srun's own `sink` in whole lines, as srun relays its tasks'
    output (each line with its `-l` label, if any), so that tasks writing at the same
    moment never split each other's lines. Reads what is there (big outputs go through
    in large writes); the last unfinished line is written at the end of the stream."""
    fd, held = stream.fileno(), b""
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except InterruptedError:
            continue
        if not chunk:
            break
        held += chunk
        cut = held.rfind(b"\n") + 1
        if not cut and len(held) < _LINE_LIMIT:
            continue
        cut = cut or len(held)
        lines, held = held[:cut], held[cut:]
        _write(sink, _labelled(lines, prefix), lock)
    if held:
        _write(sink, _labelled(held, prefix), lock)
    stream.close()


def _labelled(data: bytes, prefix: bytes) -> bytes:
    if not prefix:
        return data
    lines = data.splitlines(keepends=True)
    return b"".join(prefix + line for line in lines)


def _write(sink: int, data: bytes, lock: threading.Lock) -> None:
    """All of `data` at once (no other task's line in between); a closed sink drops it,
    the task still ends as it would."""
    with lock:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(sink, view) :]
            except InterruptedError:
                continue
            except OSError:
                return


def task_file(
    pattern: str | None, step: Step, step_id: int, rank: int, env: Mapping[str, str]
) -> str | None:
    """srun's -o/-e/-i name for one task of this step (containers/step_rules.py's rule);
    None: srun's own stream."""
    node_index, _ = step.node_of(rank)
    return task_file_name(
        pattern,
        rank=rank,
        node_index=node_index,
        node=step.nodes[node_index],
        job=env.get("SLURM_JOB_ID", "0"),
        step_id=step_id,
        user=env.get("USER", ""),
    )


def describe_failures(node: str, statuses: Mapping[int, int]) -> list[str]:
    """srun's `error: NODE: task(s) X: ...` lines for one node, grouped as srun groups them."""
    groups: dict[str, list[int]] = {}
    for rank, status in statuses.items():
        if status & 0x7F:
            text = _SIGNAL_NAMES.get(signal.Signals(status & 0x7F), f"Signal {status & 0x7F}")
        elif status:
            text = f"Exited with exit code {(status >> 8) & 0xFF}"
        else:
            continue
        groups.setdefault(text, []).append(rank)
    lines = []
    for text, ranks in groups.items():
        label = "task" if len(ranks) == 1 else "tasks"
        lines.append(f"srun: error: {node}: {label} {_ranks(ranks)}: {text}")
    return lines


def _ranks(ranks: list[int]) -> str:
    if len(ranks) > 1 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    return ",".join(map(str, ranks))


def kill_on_bad_exit(options: Mapping[str, str | None], env: Mapping[str, str]) -> bool:
    """srun's -K[0|1]: the option (no value: 1), else SLURM_KILL_BAD_EXIT, else slurm.conf's
    KillOnBadExit (0 on the sites Caldera runs: it has no such setting)."""
    if "kill-on-bad-exit" in options:
        value = options["kill-on-bad-exit"]
        return value is None or _c_int(value) != 0
    return _c_int(env.get("SLURM_KILL_BAD_EXIT", "0")) != 0


def _c_int(text: str) -> int:
    """strtol's reading: the leading digits (none: 0)."""
    m = re.match(r"\s*[-+]?\d+", text)
    return int(m.group()) if m else 0


def step_status(step: Step, statuses: Mapping[int, int]) -> int:
    """The step's exit status as slurmctld records it (containers/step_rules.py)."""
    return recorded_status(statuses, [step.node_of(r)[0] for r in range(step.ntasks)])


def srun_status(statuses: Mapping[int, int]) -> int:
    """srun's own exit status: 128 + the highest signal that killed a task, else the
    highest exit code (a signal outranks any code, as launch/slurm keeps it)."""
    signals = [s & 0x7F for s in statuses.values() if s & 0x7F]
    if signals:
        return 128 + max(signals)
    return max(((s >> 8) & 0xFF for s in statuses.values()), default=0)
