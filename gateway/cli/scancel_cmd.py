"""`scancel`: cancel or signal jobs, array tasks and ranges, or every job matching filters."""

from __future__ import annotations

import os
import pwd
import sys
from collections.abc import Sequence
from typing import Any

from gateway.cli.client import ApiError, Client, GatewayUnavailable
from gateway.cli.opts import CmdOption, CmdUsageError, ParsedCmd, parse_command
from gateway.cli.progress import Ticker
from gateway.compat.cnum import to_uint16
from gateway.compat.options_help import version_text
from gateway.compat.quantity import signal_name_to_num
from gateway.compat.slurm_errors import SlurmErrno

__all__ = ["main"]

_PROG = "scancel"
_NO_VAL16 = 0xFFFE
OPTIONS = (
    CmdOption("account", "A", 1, "account"),
    CmdOption("batch", "b", 0, "batch"),
    CmdOption("full", "f", 0, "full"),
    CmdOption("help", None, 0, "help"),
    CmdOption("hurry", "H", 0, "hurry"),
    CmdOption("interactive", "i", 0, "interactive"),
    CmdOption("cluster", None, 1, "clusters"),
    CmdOption("ctld", None, 0, "ctld"),
    CmdOption("clusters", "M", 1, "clusters"),
    CmdOption("jobname", None, 1, "name"),
    CmdOption("me", None, 0, "me"),
    CmdOption("name", "n", 1, "name"),
    CmdOption("nodelist", "w", 1, "nodelist"),
    CmdOption("partition", "p", 1, "partition"),
    CmdOption("qos", "q", 1, "qos"),
    CmdOption("quiet", "Q", 0, "quiet"),
    CmdOption("reservation", "R", 1, "reservation"),
    CmdOption("sibling", None, 1, "sibling"),
    CmdOption("signal", "s", 1, "signal"),
    CmdOption("state", "t", 1, "state"),
    CmdOption("usage", None, 0, "usage"),
    CmdOption("user", "u", 1, "user"),
    CmdOption("verbose", "v", 0, "verbose"),
    CmdOption("version", "V", 0, "version"),
    CmdOption("wckey", None, 1, "wckey"),
)
_USAGE = (
    "Usage: scancel [-A account] [--batch] [--full] [--interactive] [-n job_name]\n"
    "               [-p partition] [-Q] [-q qos] [-R reservation][-s signal | integer]\n"
    "               [-t PENDING | RUNNING | SUSPENDED] [--usage] [-u user_name]\n"
    "               [--hurry] [-V] [-v] [-w hosts...] [--wckey=wckey]\n"
    "               [job_id[_array_id][.step_id]]\n"
)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `scancel` command."""
    args = [_PROG, *(sys.argv[1:] if argv is None else argv)]
    try:
        opts = parse_command(args, OPTIONS, _PROG)
    except CmdUsageError as exc:
        sys.stderr.write("\n".join(exc.lines) + "\n")
        return 1
    if opts.exit_option in ("help", "usage"):
        sys.stdout.write(_USAGE)
        return 0
    if opts.exit_option == "version":
        sys.stdout.write(version_text())
        return 0
    signal: int | None = None
    if opts.text("signal") is not None:
        # scancel keeps the number in a uint16_t: 65536 is 0 (unknown) and 65534 is NO_VAL16,
        # "no signal given", a cancel (both as the test cluster answers)
        signal = to_uint16(signal_name_to_num(opts.text("signal") or ""))
        if signal == 0:
            sys.stderr.write(f"Unknown job signal: {opts.text('signal')}\n")  # 22.05's words
            return 1
        if signal == _NO_VAL16:
            signal = None
    user = opts.text("user")
    if opts.flag("me"):
        user = pwd.getpwuid(os.getuid()).pw_name
    ids: list[str] = []
    steps: list[str] = []  # `ID.STEP`: the step alone, never its whole job
    for word in opts.operands:
        head, dot, step = word.partition(".")
        if not head or not head.split("_", 1)[0].isdigit() or (dot and not step.isdigit()):
            sys.stderr.write(f"{_PROG}: error: Invalid job id {word}\n")
            return 1
        (steps if dot else ids).append(word)
    filters = any((user, opts.text("name"), opts.text("state"), opts.text("partition")))
    if not ids and not steps and not filters:
        sys.stderr.write(f"{_PROG}: error: No job identification provided\n")
        return 1
    states = [s for s in (opts.text("state") or "").split(",") if s] or None
    if opts.text("clusters") is not None:
        scoped = _on_clusters(opts.text("clusters") or "", ids, filters)
        if isinstance(scoped, int):
            return scoped
        ids = scoped
        if not ids:  # nothing of the list is on those clusters: Slurm says nothing
            return 0
    body = {
        "ids": ids,
        "signal": signal,
        "batch_only": opts.flag("batch"),
        "user": user,
        "name": opts.text("name"),
        "states": states,
        "partition": opts.text("partition"),
        "verify": _verifies(opts, signal is not None, filters) or bool(steps),
        "steps": steps,
    }
    try:
        what = "signalling" if signal is not None else "cancelling"
        with Ticker(f"{_PROG}: {what} {' '.join(ids)[:40]}".rstrip(), delay_s=0.5):
            data = Client().post("/v1/jobs/signal", body)
    except GatewayUnavailable as exc:
        sys.stderr.write(f"{_PROG}: error: Unable to contact slurm controller ({exc})\n")
        return 1
    except ApiError as exc:
        sys.stderr.write(f"{_PROG}: error: {exc.message}\n")
        return 1
    return _report(data, body["verify"] is True, opts, signal)


def _verifies(opts: ParsedCmd, signalled: bool, filters: bool) -> bool:
    """scancel's `!has_default_opt()`: ids are checked first, unknown ones reported."""
    others = any(opts.text(k) for k in ("account", "qos", "reservation", "nodelist"))
    return signalled or filters or others or opts.flag("batch") or opts.flag("interactive")


def _report(data: dict[str, Any], verified: bool, opts: ParsedCmd, signal: int | None) -> int:
    """Print the refusals as scancel does and answer its exit code: the highest errno seen
    (as `exit()` truncates it), 1 for an id its check did not find."""
    rc = 0
    verbose, quiet = opts.flag("verbose"), opts.flag("quiet")
    unknown, done = SlurmErrno.INVALID_JOB_ID.code, SlurmErrno.ALREADY_DONE.code
    kill = signal in (None, 9)

    def say(what: str, name: str, message: str) -> None:
        sys.stderr.write(f"{_PROG}: error: Kill job error on {what} {name}: {message}\n")

    for r in data["results"]:  # `_cancel_job_id`
        err = r["error"]
        if err is None:
            continue
        code = int(err["code"])
        if verified and code in (unknown, done):  # `_verify_job_ids` found no unfinished job
            if not quiet:
                say("job id", r["id"], SlurmErrno.INVALID_JOB_ID.text)
            rc = max(rc, 1)
            continue
        if verbose or code not in (unknown, done):
            say("job id", r["id"], err["message"])
        if code not in (unknown, done) or not kill:
            rc = max(rc, code)
    for r in data.get("steps", []):  # `_cancel_step_id`: the job named without its step
        err = r["error"]
        if err is None:
            continue
        code = int(err["code"])
        if "." in r["id"]:  # not found by the check: named in full
            if not quiet:
                say("job step id", r["id"], SlurmErrno.INVALID_JOB_ID.text)
            rc = max(rc, 1)
            continue
        if verbose or code != done:
            say("job step id", r["id"], err["message"])
        if code != done or not kill:
            rc = max(rc, code)
    return rc & 0xFF  # exit() keeps the low byte of the errno


def _on_clusters(text: str, ids: list[str], filters: bool) -> list[str] | int:
    """scancel -M: only jobs on the named clusters (Slurm asks only their controllers, so an
    id that is elsewhere is silently not found). With filters and no ids: every job there,
    for the gateway to filter. An int is the exit code (no such cluster: Slurm's words)."""
    from gateway.cli.common import GatewayError, fetch_jobs
    from gateway.compat.clusters import ClusterSelectError, choose_clusters, on_clusters

    try:
        jobs, _, data = fetch_jobs()
    except GatewayError as exc:
        sys.stderr.write(f"{_PROG}: error: Unable to contact slurm controller ({exc})\n")
        return 1
    site = data.get("site") or {}
    try:
        choice = choose_clusters(
            _PROG, text, site.get("clusters") or [str(data.get("cluster", "caldera"))]
        )
    except ClusterSelectError as exc:
        sys.stderr.write(exc.stderr)
        return exc.exit_code
    sys.stderr.write(choice.stderr)
    there = on_clusters(jobs, choice.names)
    if not ids:
        return [str(j.job_id) for j in there if not j.state.is_finished] if filters else []
    known = {str(j.job_id) for j in there} | {str(j.array_job_id) for j in there}
    return [i for i in ids if i.split("_", 1)[0] in known]


if __name__ == "__main__":
    sys.exit(main())
