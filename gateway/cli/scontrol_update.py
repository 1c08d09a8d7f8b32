"""`scontrol update`: a job's fields (JobId=...) or nodes' state (NodeName=...), parsed as
scontrol parses them before one request to the gateway.

`TimeLimit=+N`/`-N` is scontrol's own arithmetic (update_job.c): it reads the job's limit
first (JobId must come before), adds in uint32 as scontrol does (so `+5` on an UNLIMITED
job wraps to 4 minutes there too), and refuses a decrement larger than the limit.
"""

from __future__ import annotations

import sys
import time

from gateway.cli.common import GatewayError, call, fetch_jobs
from gateway.compat.begin import TimeSpecError, parse_time
from gateway.compat.cnum import parse_uint32, strtol
from gateway.compat.duration import time_str_to_mins
from gateway.compat.quantity import parse_mail_type
from gateway.model.values import NO_VAL

__all__ = ["SUSPEND_STYLE", "Fail", "report", "update"]

_PROG = "scontrol"

_UPDATE_KEYS = {
    "timelimit",
    "partition",
    "dependency",
    "nice",
    "priority",
    "jobname",
    "name",
    "comment",
    "timemin",
    "reqnodelist",
    "excnodelist",
    "requeue",
    "features",
    "workdir",
    "stdout",
    "minmemorynode",
    "minmemorycpu",
    "licenses",
    "mailtype",
    "mailuser",
}
SUSPEND_STYLE = {"hold", "uhold", "release"}  # Slurm adds a `slurm_suspend error:` line


class Fail(Exception):
    """Lines for stderr, and exit code 1."""

    def __init__(self, *lines: str) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


def report(results: list[dict[str, object]], op: str) -> int:
    """Slurm's line per refused job; 1 if any was refused."""
    rc = 0
    for r in results:
        err = r["error"]
        if err is None:
            continue
        assert isinstance(err, dict)
        msg = str(err["message"])
        sys.stderr.write(f"{msg} for job {r['id']}\n")
        if op in SUSPEND_STYLE:
            sys.stderr.write(f"slurm_suspend error: {msg}\n")
        rc = 1
    return rc


def _update_node(args: list[str]) -> int:
    """NodeName=<hostlist> State=DRAIN|UNDRAIN|RESUME [Reason=...]: operators only."""
    fields: dict[str, str] = {}
    for arg in args:
        key, eq, value = arg.partition("=")
        k = key.lower()
        if not eq:
            raise Fail(f"Invalid input: {arg}", "Request aborted")
        if k in ("nodename", "state", "reason"):
            fields[k] = value
        else:
            raise Fail(f"Update of this parameter is not supported: {arg}", "Request aborted")
    state = fields.get("state")
    if state is None:
        raise Fail("No changes specified")
    if state.upper() == "DRAIN" and not fields.get("reason"):
        raise Fail("You must specify a reason when DOWNING or DRAINING a node. Request denied")
    body = {"nodes": fields["nodename"], "state": state, "reason": fields.get("reason")}
    try:
        call("POST", "/v1/nodes/update", body)
    except GatewayError as exc:
        raise Fail(f"slurm_update error: {exc}") from exc
    return 0


def _begin(text: str) -> int | None:
    """StartTime=/EligibleTime= as scontrol reads it: parse_time, never before now; an
    invalid time is reported and the field left out (then "No changes specified")."""
    now = time.time()
    try:
        begin = parse_time(text, now)
    except TimeSpecError as exc:
        sys.stderr.write(f"{exc}\n")
        return None
    return max(begin, int(now)) if begin else None


def update(args: list[str]) -> int:
    """`scontrol update ...`: its exit code."""
    if args and args[0].lower().startswith("nodename="):
        return _update_node(args)
    job: str | None = None
    fields: dict[str, str] = {}
    for arg in args:
        key, eq, value = arg.partition("=")
        if not eq:
            raise Fail(f"Invalid input: {arg}", "Request aborted")
        k = key.lower()
        if len(k) >= 10 and "arraytaskthrottle".startswith(k):
            if strtol(value)[0] < 0:
                raise Fail(f"{_PROG}: error: Invalid ArrayTaskThrottle value")
            fields["ArrayTaskThrottle"] = value
        elif k in ("jobid", "job"):
            job = value
        elif len(k) >= 2 and ("eligibletime".startswith(k) or "starttime".startswith(k)):
            begin = _begin(value)
            if begin is not None:
                fields["StartTime"] = str(begin)
        elif k in _UPDATE_KEYS:
            if k == "timelimit":
                value = _time_limit(value, job)
            if k in ("minmemorynode", "minmemorycpu") and parse_uint32(value) is None:
                name = "MinMemoryNode" if k == "minmemorynode" else "MinMemoryCPU"
                raise Fail(f"{_PROG}: error: Invalid {name} value: {value}")
            if k == "mailtype" and parse_mail_type(value) is None:
                raise Fail(f"Invalid MailType: {value}")
            if k == "priority" and parse_uint32(value) is None:
                raise Fail(f"{_PROG}: error: Invalid Priority value: {value}")
            fields[key] = value
        else:
            raise Fail(f"Update of this parameter is not supported: {arg}", "Request aborted")
    if job is None:
        raise Fail(
            "No valid entity in update command",
            'Input line must include "NodeName", "PartitionName", '
            '"Reservation=", "JobId", "StepId", "FrontendName" or '
            '"SuspendExcNodes"',
        )
    if not job.split("_")[0].isdigit():
        raise Fail(f"Invalid job id specified for job {job}")
    if not fields:
        raise Fail("No changes specified")
    data = call("POST", "/v1/jobs/update", {"id": job, "fields": fields})
    return report(data["results"], "update")


_UINT32 = 0xFFFF_FFFF


def _time_limit(text: str, job: str | None) -> str:
    """TimeLimit's value as scontrol sends it: minutes, with `+N`/`-N` applied to the
    job's current limit."""
    sign = text[:1] if text[:1] in ("+", "-") else ""
    minutes = time_str_to_mins(text[len(sign) :])
    if minutes == NO_VAL:
        raise Fail(f"{_PROG}: error: Invalid TimeLimit value")
    if not sign:
        return text
    if job is None:
        raise Fail(f"{_PROG}: error: JobId must precede TimeLimit increment or decrement")
    current = _current_limit(job)
    if sign == "+":
        return str((current + minutes) & _UINT32)
    if minutes > current:
        raise Fail(
            f"{_PROG}: error: TimeLimit decrement larger than current time limit "
            f"({minutes & _UINT32} > {current})"
        )
    return str(current - minutes)


def _current_limit(job: str) -> int:
    """_get_job_time: the limit of a job, of an array task (pending or not) or of an array
    that is still one record; Slurm's errors otherwise."""
    head, _, task = job.partition("_")
    if not head.isdigit() or (task and not task.isdigit()):
        raise Fail(f"{_PROG}: error: Invalid job ID {job}")
    try:
        records, _, _ = fetch_jobs(f"/v1/jobs/{int(head)}")
    except GatewayError as exc:
        raise Fail(
            f"{_PROG}: error: Could not load state information for job {job}: {exc}"
        ) from None
    if not records:
        raise Fail(f"{_PROG}: error: Job ID {job} not found")
    if len(records) > 1 and not task:
        raise Fail(f"{_PROG}: error: TimeLimit increment/decrement not supported for job arrays")
    for r in records:
        pending = r.array_pending
        if not task or r.array_task_id == int(task) or (pending and int(task) in pending):
            return r.time_limit
    raise Fail(f"{_PROG}: error: Job ID {job} not found")
