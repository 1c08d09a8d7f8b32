"""`squeue`: Slurm's job queue view, with its options and exact output."""

from __future__ import annotations

import os
import pwd
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gateway.cli.opts import CmdOption, CmdUsageError, ParsedCmd, parse_command
from gateway.compat.options_help import version_text
from gateway.model.state import JobState

if TYPE_CHECKING:
    from gateway.compat.squeue_fmt import SqueueOptions
    from gateway.model.job import Job

# The gateway renders (POST /v1/squeue/render): the job model, its codec and the
# formatters are imported only to render here, when the gateway cannot.

__all__ = ["main"]

_PROG = "squeue"
OPTIONS = (
    CmdOption("accounts", "A", 1, "accounts"),
    CmdOption("all", "a", 0, "all"),
    CmdOption("array", "r", 0, "array"),
    CmdOption("array-unique", None, 0, "array_unique"),
    CmdOption("Format", "O", 1, "format_long"),
    CmdOption("format", "o", 1, "format"),
    CmdOption("federation", None, 0, "federation"),
    CmdOption("help", None, 0, "help"),
    CmdOption("hide", None, 0, "hide"),
    CmdOption("iterate", "i", 1, "iterate"),
    CmdOption("jobs", "j", 2, "jobs"),
    CmdOption("local", None, 0, "local"),
    CmdOption("long", "l", 0, "long"),
    CmdOption("licenses", "L", 1, "licenses"),
    CmdOption("cluster", None, 1, "clusters"),
    CmdOption("clusters", "M", 1, "clusters"),
    CmdOption("me", None, 0, "me"),
    CmdOption("name", "n", 1, "name"),
    CmdOption("noconvert", None, 0, "noconvert"),
    CmdOption("node", None, 1, "nodelist"),
    CmdOption("nodes", None, 1, "nodelist"),
    CmdOption("nodelist", "w", 1, "nodelist"),
    CmdOption("noheader", "h", 0, "noheader"),
    CmdOption("partitions", "p", 1, "partitions"),
    CmdOption("priority", "P", 0, "priority"),
    CmdOption("qos", "q", 1, "qos"),
    CmdOption("reservation", "R", 1, "reservation"),
    CmdOption("sib", None, 0, "sibling"),
    CmdOption("sibling", None, 0, "sibling"),
    CmdOption("sort", "S", 1, "sort"),
    CmdOption("start", None, 0, "start"),
    CmdOption("steps", "s", 2, "steps"),
    CmdOption("states", "t", 1, "states"),
    CmdOption("usage", None, 0, "usage"),
    CmdOption("user", "u", 1, "users"),
    CmdOption(None, "U", 1, "accounts"),
    CmdOption("users", None, 1, "users"),
    CmdOption("verbose", "v", 0, "verbose"),
    CmdOption("version", "V", 0, "version"),
    CmdOption("json", None, 0, "json"),
    CmdOption("yaml", None, 0, "yaml"),
)
_USAGE = (
    "Usage: squeue [-A account] [--clusters names] [-i seconds] [--job jobid]\n"
    "              [-n name] [-o format] [-p partitions] [--qos qos]\n"
    "              [--reservation reservation] [--sort fields] [--start]\n"
    "              [--step step_id] [-t states] [-u user_name] [--usage]\n"
    "              [-L licenses] [-w nodes] [--federation] [--local] [--sibling]\n"
    "\t      [-ahjlrsv]\n"
)


def _split(text: str | None) -> tuple[str, ...]:
    return tuple(p for p in (text or "").split(",") if p)


_VALID_STATES = (
    "PENDING,RUNNING,SUSPENDED,COMPLETED,CANCELLED,FAILED,TIMEOUT,NODE_FAIL,PREEMPTED,"
    "BOOT_FAIL,DEADLINE,OUT_OF_MEMORY,COMPLETING,CONFIGURING,RESIZING,RESV_DEL_HOLD,"
    "REQUEUED,REQUEUE_FED,REQUEUE_HOLD,REVOKED,SIGNALING,SPECIAL_EXIT,STAGE_OUT,STOPPED"
)


def _states(text: str | None) -> tuple[tuple[JobState, ...] | None, bool]:
    if text is None:
        return None, False
    words = _split(text)
    if any(w.lower() == "all" for w in words):
        return (), True
    out = []
    for word in words:
        try:
            out.append(JobState.parse(word))
        except ValueError:
            raise CmdUsageError(
                f"{_PROG}: error: Invalid job state specified: {word}",
                f"{_PROG}: error: Valid job states include: {_VALID_STATES}\n",
            ) from None
    return tuple(out), False


def _users(text: str | None, report: bool = False) -> tuple[str, ...]:
    """squeue's _build_user_list: an unknown name or uid is reported (`report`: when the
    option is read) and left out; the filter stays on, so an all-unknown list shows no job."""
    out = []
    for word in _split(text):
        try:
            name = pwd.getpwuid(int(word)).pw_name if word.isdigit() else pwd.getpwnam(word)[0]
        except KeyError:
            if report:
                sys.stderr.write(f"{_PROG}: error: Invalid user: {word}\n\n")
            continue
        out.append(name)
    return tuple(out) if out or not text else ("",)  # "": no job's user


def _report_users(text: str | None) -> None:
    _users(text, report=True)


def _check_jobs(text: str | None) -> None:
    """squeue's _build_job_list: each id must start with a positive number."""
    for word in _split(text):
        digits = word[: len(word) - len(word.lstrip("0123456789"))]
        if not digits or int(digits) == 0:
            raise CmdUsageError(f"{_PROG}: error: Invalid job id: {word}")


def _operands(opts: ParsedCmd) -> None:
    """After getopt, squeue reads the job list (after -j) then the step list (after -s)."""
    rest = list(opts.operands)
    for dest in ("jobs", "steps"):
        if rest and dest in opts.values:
            opts.values[dest] = rest.pop(0)
            if dest == "jobs":
                _check_jobs(opts.text("jobs"))
    if rest:
        sys.stdout.write(_USAGE)
        raise CmdUsageError(f"{_PROG}: error: Unrecognized option: {rest[0]}")


def _steps(jobs: list[Job], now: float, opts: ParsedCmd) -> int:
    """squeue -s [step list]: the running steps of running jobs (from the step records the
    backends report while jobs run)."""
    from gateway.cli.common import GatewayError, call, write_out
    from gateway.compat.squeue_steps import render_steps
    from gateway.model.codec import step_from_dict
    from gateway.model.job import Step

    ids = {w.split("_")[0] for w in _split(opts.text("jobs"))}
    users = set(_users(opts.text("users"))) if opts.text("users") else None
    parts = set(_split(opts.text("partitions")))
    running = {
        j.job_id: j
        for j in jobs
        if j.state is JobState.RUNNING
        and (not ids or str(j.job_id) in ids or str(j.array_job_id) in ids)
        and (users is None or j.user in users)
        and (not parts or j.partition in parts)
    }
    wanted = _split(opts.text("steps"))
    steps: list[Step] = []
    if running:
        query = "&".join(f"ids={i}" for i in sorted(running))
        try:
            data = call("GET", f"/v1/accounting?{query}")
        except GatewayError as exc:
            sys.stderr.write(f"slurm_load_job_steps error: {exc}\n")
            return 1
        steps = [
            s
            for s in (step_from_dict(d) for d in data["steps"])
            if s.job_id in running and s.run == running[s.job_id].restart_count
        ]
    if wanted:
        steps = [s for s in steps if f"{s.job_id}.{s.step_id}" in wanted or str(s.job_id) in wanted]
    write_out(
        render_steps(
            steps, running, now=now, fmt=opts.text("format"), noheader=opts.flag("noheader")
        )
    )
    return 0


def _remote(body: dict[str, Any]) -> tuple[str, str, int] | None:
    """(stdout, stderr, exit code) as the gateway rendered them; None: render here (the
    gateway is unreachable or too old, or asks for it), which also says what failed."""
    from gateway.cli.fastclient import FastClient, FastClientError
    from gateway.cli.paths import socket_path

    client = FastClient(socket_path())
    try:
        status, data = client.request("POST", "/v1/squeue/render", body)
    except FastClientError:
        return None
    finally:
        client.close()
    if status != 200 or not isinstance(data, dict) or data.get("fallback"):
        return None
    return str(data["stdout"]), str(data["stderr"]), int(data["exit_code"])


def _plain(value: object) -> bool:
    """Whether the request can carry `value` (argv words undecodable as UTF-8 cannot)."""
    texts = value if isinstance(value, list) else [value]
    try:
        for text in texts:
            if isinstance(text, str):
                text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _write(text: str, stream: Any) -> None:
    """Write as Slurm does: bytes, with names cut mid-character kept as they are."""
    stream.buffer.write(text.encode("utf-8", errors="surrogateescape"))
    stream.flush()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `squeue` command."""
    args = [_PROG, *(sys.argv[1:] if argv is None else argv)]
    try:
        opts = parse_command(
            args,
            OPTIONS,
            _PROG,
            check={"jobs": _check_jobs, "states": _states, "users": _report_users},
        )
        if opts.exit_option in ("help", "usage"):
            sys.stdout.write(_USAGE)
            return 0
        if opts.exit_option == "version":
            sys.stdout.write(version_text())
            return 0
        _operands(opts)
        states, all_states = _states(opts.text("states"))
        users = _users(opts.text("users"))
        if opts.flag("me"):
            users = (*users, pwd.getpwuid(os.getuid()).pw_name)
        job_ids = _split(opts.text("jobs"))
    except CmdUsageError as exc:
        sys.stderr.write("\n".join(exc.lines) + "\n")
        return 1
    json_out = opts.flag("json") or opts.flag("yaml")
    if (fmt := opts.text("format")) and not json_out:
        _format_errors(fmt, "steps" in opts.values)
    if opts.text("clusters") is not None and not json_out and "steps" not in opts.values:
        return _render_clusters(opts, states, all_states, users, job_ids)
    if json_out or "steps" not in opts.values:
        body: dict[str, Any] = {
            "format": opts.text("format"),
            "format_long": opts.text("format_long"),
            "long": opts.flag("long"),
            "start": opts.flag("start"),
            "array": opts.flag("array"),
            "array_unique": opts.flag("array_unique"),
            "noheader": opts.flag("noheader"),
            "sort": opts.text("sort"),
            "states": None if states is None else [s.name for s in states],
            "all_states": all_states,
            "job_ids": list(job_ids),
            "users": list(users),
            "partitions": list(_split(opts.text("partitions"))),
            "names": list(_split(opts.text("name"))),
            "json_out": json_out,
            "tz": os.environ.get("TZ"),
        }
        answer = _remote(body) if all(_plain(v) for v in body.values()) else None
        if answer is not None:
            _write(answer[0], sys.stdout)
            if answer[1]:
                _write(answer[1], sys.stderr)
            return answer[2]
    return _render_here(opts, states, all_states, users, job_ids)


def _format_errors(fmt: str, steps: bool) -> None:
    """squeue's line for each letter its format does not know, said while parsing."""
    if "%" not in fmt:
        return
    from gateway.compat.squeue_fmt import format_errors
    from gateway.compat.squeue_steps import STEP_LETTERS

    said = format_errors(fmt, STEP_LETTERS, "job step") if steps else format_errors(fmt)
    for line in said:
        sys.stderr.write(line + "\n")


def _render_here(
    opts: ParsedCmd,
    states: tuple[JobState, ...] | None,
    all_states: bool,
    users: tuple[str, ...],
    job_ids: tuple[str, ...],
) -> int:
    """squeue from the GET /v1/jobs document (the gateway did not render)."""
    from gateway.cli.common import GatewayError, fetch_jobs, site_from, write_out
    from gateway.compat.job_list_order import list_order
    from gateway.compat.squeue_fmt import render_squeue

    try:
        jobs, now, data = fetch_jobs()
    except GatewayError as exc:
        sys.stderr.write(f"slurm_load_jobs error: {exc}\n")
        return 1
    jobs = list_order(jobs)  # slurmctld's list order, as the gateway's rendering has it
    site = site_from(data)
    if "steps" in opts.values and not (opts.flag("json") or opts.flag("yaml")):
        return _steps(jobs, now, opts)
    if opts.flag("json") or opts.flag("yaml"):
        from gateway.compat.squeue_fmt_json import squeue_json

        write_out(squeue_json(jobs, site=site) + "\n")
        return 0
    if job_ids:
        known = {str(j.job_id) for j in jobs} | {str(j.array_job_id) for j in jobs}
        unknown = [j for j in job_ids if j.split("_")[0] not in known]
        if unknown and len(unknown) == len(job_ids) and not all_states:
            sys.stderr.write("slurm_load_jobs error: Invalid job id specified\n")
            return 1
    write_out(
        render_squeue(jobs, _options(opts, states, all_states, users, job_ids, data), now=now)
    )
    return 0


def _options(
    opts: ParsedCmd,
    states: tuple[JobState, ...] | None,
    all_states: bool,
    users: tuple[str, ...],
    job_ids: tuple[str, ...],
    data: dict[str, Any],
) -> SqueueOptions:
    from gateway.cli.common import site_from
    from gateway.compat.squeue_fmt import SqueueOptions

    return SqueueOptions(
        format=opts.text("format"),
        format_long=opts.text("format_long"),
        long=opts.flag("long"),
        start=opts.flag("start"),
        array=opts.flag("array"),
        array_unique=opts.flag("array_unique"),
        noheader=opts.flag("noheader"),
        sort=opts.text("sort"),
        states=states,
        all_states=all_states,
        job_ids=job_ids,
        users=users,
        partitions=_split(opts.text("partitions")),
        names=_split(opts.text("name")),
        max_array_size=int(data.get("site", {}).get("max_array_size", 1001)),
        site=site_from(data),
    )


# squeue -h over several clusters with its own formats: each line starts with the cluster
_CLUSTER_PREFIX = 10


def _render_clusters(
    opts: ParsedCmd,
    states: tuple[JobState, ...] | None,
    all_states: bool,
    users: tuple[str, ...],
    job_ids: tuple[str, ...],
) -> int:
    """squeue -M list|all: each cluster's jobs under its `CLUSTER: name` line."""
    from gateway.cli.common import GatewayError, fetch_jobs, write_out
    from gateway.compat.clusters import ClusterSelectError, blocks, choose_clusters, on_clusters
    from gateway.compat.job_list_order import list_order
    from gateway.compat.squeue_fmt import render_squeue

    try:
        jobs, now, data = fetch_jobs()
    except GatewayError as exc:
        sys.stderr.write(f"slurm_load_jobs error: {exc}\n")
        return 1
    jobs = list_order(jobs)  # slurmctld's list order, as the gateway's rendering has it
    site = data.get("site") or {}
    known = site.get("clusters") or [data.get("cluster", "caldera")]
    try:
        choice = choose_clusters(_PROG, opts.text("clusters") or "", known)
    except ClusterSelectError as exc:
        sys.stderr.write(exc.stderr)
        return exc.exit_code
    sys.stderr.write(choice.stderr)
    options = _options(opts, states, all_states, users, job_ids, data)
    noheader = opts.flag("noheader")
    prefix = noheader and len(choice.names) > 1 and not (options.format or options.format_long)
    dated = options.long and not noheader  # -l: the date once, above the first cluster
    parts = []
    date = ""
    for name in choice.names:
        text = render_squeue(on_clusters(jobs, [name]), options, now=now)
        if dated:
            date, _, text = text.partition("\n")
        if prefix:
            text = "".join(f"{name:<{_CLUSTER_PREFIX}} {line}" for line in text.splitlines(True))
        parts.append((name, text))
    write_out((f"{date}\n" if dated else "") + blocks(parts, noheader))
    return 0


if __name__ == "__main__":
    sys.exit(main())
