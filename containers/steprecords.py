"""A job's steps as its spool records them, read safely by root (supervisor and gateway).

Three sources, merged: `batch_step.json` (the supervisor's, root-owned), `steps/N.json`
(srun's, written by the job's user: read through a directory descriptor, only regular files
of that user, size-capped, every field checked) and `closed_steps.json` (the supervisor's
verdict on srun steps still running when the job ended, which wins over srun's own).
`cancelled_steps.json` (the supervisor's) names who cancelled a step (`scancel ID.STEP`):
only it, never a user's record, sets sacct's `CANCELLED by`.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import replace
from pathlib import Path
from typing import Any

from containers.spool import open_dir, parse_step, read_json, read_owned_json, read_step
from gateway.model.job import Step
from gateway.model.state import JobState

__all__ = [
    "BATCH_STEP",
    "CANCELLED_STEPS",
    "CLOSED_STEPS",
    "MAX_STEP_RECORDS",
    "read_steps",
    "srun_record",
    "srun_records",
    "step_order",
]

BATCH_STEP = "batch_step.json"
CLOSED_STEPS = "closed_steps.json"
CANCELLED_STEPS = "cancelled_steps.json"
MAX_STEP_RECORDS = 40000  # Slurm's default MaxStepCount
_MAX_SCAN = 4 * MAX_STEP_RECORDS  # directory entries looked at (junk included)


def srun_records(
    jobdir: Path, uid: int | None = None, skip: Collection[str] = ()
) -> dict[str, dict[str, Any]]:
    """srun's step records by step id: regular files `N.json` owned by `uid` (default: the
    owner of `steps/`, that is the job's user) in the job's `steps/` directory (but not
    those of the steps in `skip`)."""
    fd = open_dir(jobdir / "steps")
    if fd is None:
        return {}
    try:
        owner = os.fstat(fd).st_uid if uid is None else uid
        ids: list[int] = []
        with os.scandir(fd) as entries:
            for n, entry in enumerate(entries):
                if n >= _MAX_SCAN:
                    break
                stem, dot, ext = entry.name.partition(".")
                if dot and ext == "json" and stem.isascii() and stem.isdigit() and len(stem) < 10:
                    ids.append(int(stem))
        out: dict[str, dict[str, Any]] = {}
        for step in sorted(ids)[:MAX_STEP_RECORDS]:
            if skip and str(step) in skip:
                continue
            data = read_owned_json(fd, f"{step}.json", owner)
            if isinstance(data, dict):
                out[str(step)] = data
        return out
    finally:
        os.close(fd)


def srun_record(jobdir: Path, step: int, uid: int | None = None) -> dict[str, Any] | None:
    """srun's record of one step, read as `srun_records` reads each (None: none such)."""
    fd = open_dir(jobdir / "steps")
    if fd is None:
        return None
    try:
        owner = os.fstat(fd).st_uid if uid is None else uid
        data = read_owned_json(fd, f"{step}.json", owner)
        return data if isinstance(data, dict) else None
    finally:
        os.close(fd)


def read_steps(jobdir: Path, job_id: int, uid: int | None = None) -> list[Step]:
    """Every step recorded for one run of a job (batch first, then srun steps in order)."""
    steps: dict[str, Step] = {}
    batch = read_step(jobdir / BATCH_STEP, job_id)
    if batch is not None and batch.step_id == "batch":
        steps["batch"] = batch
    for sid, data in srun_records(jobdir, uid).items():
        step = parse_step(data, job_id, sid)
        if step is not None:  # the user's own record cannot say who cancelled
            steps[sid] = replace(step, extra={k: v for k, v in step.extra.items() if k != "requid"})
    closed = read_json(jobdir / CLOSED_STEPS)
    if isinstance(closed, dict):
        for sid, data in closed.items():
            step = parse_step(data, job_id, str(sid))
            if step is not None:
                steps[sid] = step
    cancelled = read_json(jobdir / CANCELLED_STEPS)
    for sid, by in cancelled.items() if isinstance(cancelled, dict) else ():
        step = steps.get(sid)
        if step is not None and step.state is JobState.CANCELLED and isinstance(by, int):
            steps[sid] = replace(step, extra={**step.extra, "requid": str(by)})
    return sorted(steps.values(), key=lambda s: step_order(s.step_id))


def step_order(step_id: str) -> tuple[int, int, str]:
    """batch first, then numbered steps in numeric order, then anything else."""
    if step_id == "batch":
        return (0, 0, "")
    return (1, int(step_id), "") if step_id.isdigit() else (2, 0, step_id)
