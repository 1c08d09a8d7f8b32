"""`scancel`: cancel or signal jobs, array tasks and ranges, or every job matching filters."""

from __future__ import annotations

import os
import pwd
import sys
from collections.abc import Sequence

from gateway.cli.client import ApiError, Client, GatewayUnavailable
from gateway.cli.opts import CmdOption, CmdUsageError, parse_command
from gateway.cli.progress import Ticker
from gateway.compat.options_help import SLURM_COMPAT_VERSION
from gateway.compat.quantity import signal_name_to_num

__all__ = ["main"]

_PROG = "scancel"
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
        sys.stdout.write(f"slurm {SLURM_COMPAT_VERSION}\n")
        return 0
    signal: int | None = None
    if opts.text("signal") is not None:
        signal = signal_name_to_num(opts.text("signal") or "")
        if signal <= 0:
            sys.stderr.write(f"Unknown job signal: {opts.text('signal')}\n")  # 22.05's words
            return 1
    user = opts.text("user")
    if opts.flag("me"):
        user = pwd.getpwuid(os.getuid()).pw_name
    ids: list[str] = []
    for word in opts.operands:
        head = word.split(".", 1)[0]
        if not head or not head.split("_", 1)[0].isdigit():
            sys.stderr.write(f"{_PROG}: error: Invalid job id {word}\n")
            return 1
        ids.append(head)
    filters = any((user, opts.text("name"), opts.text("state"), opts.text("partition")))
    if not ids and not filters:
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
    rc = 0
    verbose = opts.flag("verbose")
    for r in data["results"]:
        err = r["error"]
        if err is None:
            continue
        code = int(err["code"])
        quiet_codes = (2017, 2021)  # invalid job id, already done: silent unless -v
        if verbose or code not in quiet_codes:
            sys.stderr.write(
                f"{_PROG}: error: Kill job error on job id {r['id']}: {err['message']}\n"
            )
        if code not in quiet_codes or signal not in (None, 9):
            rc = code & 0xFF
    return rc


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
