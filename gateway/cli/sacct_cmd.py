"""`sacct`: accounting records of jobs and their steps, as Slurm prints them."""

from __future__ import annotations

import os
import pwd
import sys
import time
from collections.abc import Sequence

from gateway.cli.common import GatewayError, call, site_from, write_out
from gateway.cli.opts import CmdOption, CmdUsageError, ParsedCmd, parse_command
from gateway.compat.begin import TimeSpecError, parse_time
from gateway.compat.options_help import version_text
from gateway.compat.sacct_fmt import SacctFieldError, SacctOptions, render_sacct
from gateway.model.codec import job_from_dict, step_from_dict
from gateway.model.job import Job, Step
from gateway.model.state import JobState

__all__ = ["main"]

_PROG = "sacct"
OPTIONS = (
    CmdOption("allusers", "a", 0, "allusers"),
    CmdOption("accounts", "A", 1, "accounts"),
    CmdOption("allocations", "X", 0, "allocations"),
    CmdOption("brief", "b", 0, "brief"),
    CmdOption("batch-script", "B", 0, "batch_script"),
    CmdOption("completion", "c", 0, "completion"),
    CmdOption("constraints", "C", 1, "constraints"),
    CmdOption("delimiter", None, 1, "delimiter"),
    CmdOption("duplicates", "D", 0, "duplicates"),
    CmdOption("federation", None, 0, "federation"),
    CmdOption("helpformat", "e", 0, "helpformat"),
    CmdOption("help-fields", None, 0, "helpformat"),
    CmdOption("endtime", "E", 1, "endtime"),
    CmdOption("env-vars", None, 0, "env_vars"),
    CmdOption("file", "f", 1, "file"),
    CmdOption("flags", "F", 1, "flags"),
    CmdOption("gid", None, 1, "groups"),
    CmdOption("group", "g", 1, "groups"),
    CmdOption("help", "h", 0, "help"),
    CmdOption("local", None, 0, "local"),
    CmdOption("name", None, 1, "name"),
    CmdOption("nnodes", "i", 1, "nnodes"),
    CmdOption("ncpus", "I", 1, "ncpus"),
    CmdOption("jobs", "j", 1, "jobs", repeat=True),
    CmdOption("timelimit-min", "k", 1, "timelimit_min"),
    CmdOption("timelimit-max", "K", 1, "timelimit_max"),
    CmdOption("long", "l", 0, "long"),
    CmdOption("allclusters", "L", 0, "allclusters"),
    CmdOption("cluster", None, 1, "clusters"),
    CmdOption("clusters", "M", 1, "clusters"),
    CmdOption("nodelist", "N", 1, "nodelist"),
    CmdOption("noconvert", None, 0, "noconvert"),
    CmdOption("units", None, 1, "units"),
    CmdOption("noheader", "n", 0, "noheader"),
    CmdOption("fields", None, 1, "format"),
    CmdOption("format", "o", 1, "format"),
    CmdOption("parsable", "p", 0, "parsable"),
    CmdOption("parsable2", "P", 0, "parsable2"),
    CmdOption("qos", "q", 1, "qos"),
    CmdOption("partition", "r", 1, "partition"),
    CmdOption("reason", None, 1, "reason"),
    CmdOption("state", "s", 1, "state"),
    CmdOption("starttime", "S", 1, "starttime"),
    CmdOption("truncate", "T", 0, "truncate"),
    CmdOption(None, "t", 0, "t"),  # in the optstring, without a handler
    CmdOption("uid", None, 1, "users"),
    CmdOption("use-local-uid", None, 0, "use_local_uid"),
    CmdOption("usage", "U", 0, "usage"),
    CmdOption("user", "u", 1, "users"),
    CmdOption("verbose", "v", 0, "verbose"),
    CmdOption("version", "V", 0, "version"),
    CmdOption("wckeys", "W", 1, "wckeys"),
    CmdOption("whole-hetjob", None, 2, "whole_hetjob"),
    CmdOption("associations", "x", 1, "associations"),
    CmdOption("json", None, 0, "json"),
    CmdOption("yaml", None, 0, "yaml"),
)


def _midnight(now: float) -> float:
    t = time.localtime(now)
    return time.mktime((t.tm_year, t.tm_mon, t.tm_mday, 0, 0, 0, 0, 0, -1))


def _time(text: str, now: float) -> float:
    try:
        value = parse_time(text, now, past=True)
    except TimeSpecError as exc:
        raise CmdUsageError(exc.line(), f"{_PROG}: error: Invalid time specification") from exc
    return float(value)


def _uids(text: str) -> list[int]:
    out = []
    for word in (w for w in text.split(",") if w):
        if word.isdigit():
            out.append(int(word))
            continue
        try:
            out.append(pwd.getpwnam(word).pw_uid)
        except KeyError:
            raise CmdUsageError(f"{_PROG}: error: Invalid user id: {word}") from None
    return out


def _job_ids(opts: ParsedCmd) -> list[int]:
    out: list[int] = []
    raw = opts.get("jobs") or []
    assert isinstance(raw, list)
    for text in raw:
        out.extend(_check_jobs(str(text)))
    return out


def _check_jobs(text: str | None) -> list[int]:
    """sacct's -j handler: every id of the list must be JOB[_TASK][.STEP]."""
    out = []
    for word in (w for w in (text or "").split(",") if w):
        head = word.split(".")[0].split("_")[0]
        if not head.isdigit():
            raise CmdUsageError(f"{_PROG}: fatal: Bad job/step specified: {word}")
        out.append(int(head))
    return out


def _query(opts: ParsedCmd, now: float) -> dict[str, object]:
    ids = _job_ids(opts)
    query: dict[str, object] = {}
    if ids:
        query["ids"] = ids
    users = opts.text("users")
    if users is not None:
        query["uids"] = _uids(users)
    elif not (opts.flag("allusers") or ids or os.getuid() == 0):
        query["uids"] = [os.getuid()]
    start = opts.text("starttime")
    end = opts.text("endtime")
    start_t = _time(start, now) if start else (None if ids else _midnight(now))
    end_t = _time(end, now) if end else None
    if start_t is not None and end_t is not None and start_t > end_t:
        fmt = "%Y-%m-%dT%H:%M:%S"
        first, last = time.localtime(start_t), time.localtime(end_t)
        raise CmdUsageError(
            f"{_PROG}: error: Start time ({time.strftime(fmt, first)}) requested is after end "
            f"time ({time.strftime(fmt, last)})."
        )
    if start_t is not None:
        query["start"] = start_t
    if end_t is not None:
        query["end"] = end_t
    state = opts.text("state")
    if state:
        try:
            query["states"] = [JobState.parse(s).long for s in state.split(",") if s]
        except ValueError:
            raise CmdUsageError(f"{_PROG}: error: Invalid state: {state}") from None
    if opts.text("name"):
        query["names"] = [n for n in (opts.text("name") or "").split(",") if n]
    if opts.text("partition"):
        query["partitions"] = [p for p in (opts.text("partition") or "").split(",") if p]
    # a requeued job's earlier runs: -D, and --json/--yaml, which print every record as
    # slurmdbd returns them (sacct 22.05 filters duplicates only in its text output)
    if opts.flag("duplicates") or opts.flag("json") or opts.flag("yaml"):
        query["duplicates"] = "true"
    return query


def _on_clusters(jobs: list[Job], text: str | None, every: bool) -> list[Job]:
    """sacct -M list: the records of those clusters (names compared without regard to case,
    as slurmdbd does; a name it does not know matches nothing, without a word); -L or -M all:
    every cluster's. Without either, every cluster of the site too: a Caldera site is one
    queue over its clusters."""
    if every or text is None or text.lower() == "all":
        return jobs
    from gateway.compat.clusters import on_clusters

    return on_clusters(jobs, [w for w in text.split(",") if w])


def _url(query: dict[str, object]) -> str:
    from urllib.parse import urlencode

    return "/v1/accounting?" + urlencode(query, doseq=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `sacct` command."""
    args = [_PROG, *(sys.argv[1:] if argv is None else argv)]
    now = time.time()
    try:
        opts = parse_command(
            args,
            OPTIONS,
            _PROG,
            check={"jobs": _check_jobs},
            try_help=False,
            exits=frozenset({"version"}),
        )
        if opts.exit_option == "version":
            sys.stdout.write(version_text())
            return 0
        if opts.flag("help") or opts.flag("usage") or opts.flag("helpformat"):
            sys.stdout.write("Usage: sacct [OPTIONS]\n")
            return 0
        if opts.flag("long") and opts.text("format"):
            raise CmdUsageError(
                f"{_PROG}: fatal: Options -o(--format) and -l(--long) are mutually exclusive. "
                "Please remove one and retry."
            )
        if opts.operands:  # sacct takes no operands: each is named on a line of its own
            raise CmdUsageError(
                f"{_PROG}: error: Unknown arguments:",
                *(f"{_PROG}: error:  {word}" for word in opts.operands),
            )
        query = _query(opts, now)
    except CmdUsageError as exc:
        sys.stderr.write("\n".join(exc.lines) + "\n")
        return 1
    try:
        data = call("GET", _url(query))
    except GatewayError as exc:
        sys.stderr.write(f"{_PROG}: error: {exc}\n")
        return 1
    jobs: list[Job] = _on_clusters(
        [job_from_dict(j) for j in data["jobs"]], opts.text("clusters"), opts.flag("allclusters")
    )
    steps: dict[int, list[Step]] = {}
    for s in data["steps"]:
        step = step_from_dict(s)
        steps.setdefault(step.job_id, []).append(step)
    site = site_from(data)
    if opts.flag("json") or opts.flag("yaml"):
        from gateway.compat.sacct_fmt_json import sacct_json

        write_out(
            sacct_json(jobs, steps, now=float(data["now"]), site=site, faithful_exit_codes=False)
            + "\n"
        )
        return 0
    options = SacctOptions(
        fields=opts.text("format"),
        brief=opts.flag("brief"),
        long=opts.flag("long"),
        allocations=opts.flag("allocations"),
        duplicates=opts.flag("duplicates"),
        parsable=opts.flag("parsable"),
        parsable2=opts.flag("parsable2"),
        delimiter=opts.text("delimiter"),
        noheader=opts.flag("noheader"),
        site=site,
    )
    from gateway.compat.fmt_common import JobExtras

    extras = {
        j.job_id: JobExtras(requid=j.cancelled_by) for j in jobs if j.cancelled_by is not None
    }
    try:
        write_out(render_sacct(jobs, steps, options, now=float(data["now"]), extras=extras))
    except SacctFieldError as exc:
        sys.stderr.write(f"{_PROG}: error: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
