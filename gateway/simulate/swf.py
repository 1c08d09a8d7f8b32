"""Standard Workload Format (SWF) traces, as the Parallel Workloads Archive ships them.

SWF (Chapin, Cirne, Feitelson et al., "Benchmarks and Standards for the Evaluation of
Parallel Job Schedulers", JSSPP 1999; https://www.cs.huji.ac.il/labs/parallel/workload/swf.html)
is one job per line, 18 whitespace-separated numeric fields, -1 for unknown, and header
comments starting with ';'. The whole file is read and checked before anything is
simulated, so a malformed line stops the run with its line number and nothing half-applied.

Which jobs are replayed is the usual convention of trace-driven scheduling studies: jobs
that never ran (run time <= 0) or asked for no processors are skipped and counted; the
requested processors are used, or the allocated ones where the request is unknown; a job
whose run exceeded its request keeps running (its limit becomes its run time), as most
simulators do, so no job is killed by the replay.
"""

from __future__ import annotations

import gzip
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SwfError", "SwfJob", "Trace", "parse_lines", "read_trace"]

_FIELDS = 18


class SwfError(ValueError):
    """A trace that cannot be read; the message names the file and line."""


@dataclass(frozen=True, slots=True)
class SwfJob:
    """One job to replay."""

    job_id: int
    submit: float  # seconds since the trace's start
    run: float  # seconds it actually ran
    procs: int
    limit_min: int  # the time limit the scheduler sees, in whole minutes (Slurm's unit)
    user: int


@dataclass(frozen=True, slots=True)
class Trace:
    """A trace's jobs (by submit time) and what its header says about the machine."""

    jobs: tuple[SwfJob, ...]
    max_procs: int | None  # `; MaxProcs:` (else `; MaxNodes:`), when given
    skipped: int  # jobs that never ran or asked for nothing


def _number(text: str, where: str, field: int) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SwfError(f"{where}: field {field} is not a number: {text!r}") from None
    if not math.isfinite(value):
        raise SwfError(f"{where}: field {field} is not a finite number: {text!r}")
    return value


def _header_int(line: str) -> tuple[str, int] | None:
    key, sep, value = line.lstrip("; \t").partition(":")
    if not sep:
        return None
    value = value.strip()
    return (key.strip(), int(value)) if value.isdigit() else None


def parse_lines(lines: Iterable[str], name: str = "<trace>") -> Trace:
    """The jobs of an SWF text; raises SwfError naming the first bad line."""
    jobs: list[SwfJob] = []
    header: dict[str, int] = {}
    skipped = 0
    for lineno, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith(";"):
            found = _header_int(line)
            if found is not None:
                header.setdefault(*found)
            continue
        where = f"{name}:{lineno}"
        parts = line.split()
        if len(parts) != _FIELDS:
            raise SwfError(f"{where}: expected {_FIELDS} fields, found {len(parts)}")
        values = [_number(p, where, i) for i, p in enumerate(parts, 1)]
        job_id, submit, run = int(values[0]), values[1], values[3]
        alloc, req_procs, req_time, user = int(values[4]), int(values[7]), values[8], values[11]
        if submit < 0:
            raise SwfError(f"{where}: field 2 (submit time) is negative: {parts[1]}")
        procs = req_procs if req_procs > 0 else alloc
        if run <= 0 or procs <= 0:
            skipped += 1
            continue
        limit_s = max(req_time, run)
        jobs.append(SwfJob(job_id, submit, run, procs, max(1, math.ceil(limit_s / 60)), int(user)))
    jobs.sort(key=lambda j: (j.submit, j.job_id))
    procs_hdr = header.get("MaxProcs") or header.get("MaxNodes")
    return Trace(tuple(jobs), procs_hdr, skipped)


def read_trace(path: Path) -> Trace:
    """A trace file, plain or gzipped (by its magic bytes, not its name)."""
    try:
        with path.open("rb") as fh:
            gz = fh.read(2) == b"\x1f\x8b"
        if gz:
            with gzip.open(path, "rt", encoding="utf-8", errors="replace") as text:
                return parse_lines(text, str(path))
        with path.open(encoding="utf-8", errors="replace") as text:
            return parse_lines(text, str(path))
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise SwfError(f"{path}: cannot read: {exc}") from exc
