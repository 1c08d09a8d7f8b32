"""`scontrol`: show job/node/partition, hold/release/requeue, suspend/resume, update jobs,
hostlists."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Sequence
from dataclasses import replace

from gateway.cli.common import (
    GatewayError,
    call,
    fetch_jobs,
    site_from,
    write_out,
)
from gateway.cli.node_view import nodes_view, partitions_extras
from gateway.cli.opts import CmdOption, CmdUsageError, parse_command
from gateway.cli.progress import Ticker
from gateway.cli.scontrol_update import SUSPEND_STYLE, update
from gateway.cli.scontrol_update import Fail as _Fail
from gateway.cli.scontrol_update import report as _report
from gateway.compat.job_list_order import list_order
from gateway.compat.options_help import version_text
from gateway.model.job import Job

__all__ = ["main"]

_PROG = "scontrol"
OPTIONS = (
    CmdOption("all", "a", 0, "all"),
    CmdOption("details", "d", 0, "details"),
    CmdOption("federation", None, 0, "federation"),
    CmdOption("future", "F", 0, "future"),
    CmdOption("help", "h", 0, "help"),
    CmdOption("hide", None, 0, "hide"),
    CmdOption("local", None, 0, "local"),
    CmdOption("cluster", None, 1, "clusters"),
    CmdOption("clusters", "M", 1, "clusters"),
    CmdOption("oneliner", "o", 0, "oneliner"),
    CmdOption("quiet", "Q", 0, "quiet"),
    CmdOption("sibling", None, 0, "sibling"),
    CmdOption("uid", "u", 1, "uid"),
    CmdOption("usage", None, 0, "usage"),
    CmdOption("verbose", "v", 0, "verbose"),
    CmdOption("version", "V", 0, "version"),
)


def _is(word: str, command: str, minimum: int = 3) -> bool:
    """scontrol accepts unique abbreviations of its keywords."""
    w = word.lower()
    return len(w) >= min(minimum, len(command)) and command.startswith(w)


def _show(
    args: list[str], oneliner: bool, cluster: str | None = None, details: bool = False
) -> int:
    if not args:
        raise _Fail("too few arguments for keyword:show")
    if len(args) > 2:
        raise _Fail("too many arguments for keyword:show")
    what, rest = args[0], args[1:]
    if _is(what, "hostnames", 5):
        from gateway.compat.hostlist import expand

        text = rest[0] if rest else ""
        write_out("".join(f"{h}\n" for h in expand(text)))
        return 0
    if _is(what, "hostlistsorted", 9):
        from gateway.compat.hostlist import compress_sorted, expand

        write_out(compress_sorted(expand(rest[0] if rest else "")) + "\n")
        return 0
    if _is(what, "hostlist", 5):
        from gateway.compat.hostlist import compress, expand

        write_out(compress(expand(rest[0] if rest else "")) + "\n")
        return 0
    if _is(what, "job", 1) or _is(what, "jobs", 1):
        return _show_jobs(rest, oneliner, cluster, details)
    if _is(what, "nodes", 1):
        return _show_nodes(rest, oneliner, details)
    if _is(what, "partitions", 1):
        return _show_partitions(rest, oneliner)
    if _is(what, "config", 1):
        return _show_config()
    if _is(what, "licenses", 2):
        return _show_licenses(rest, oneliner)
    if _is(what, "steps", 2):
        return _show_steps(rest, oneliner)
    return _show_absent(what, rest)


def _show_absent(what: str, rest: list[str]) -> int:
    """What scontrol prints of what a Caldera site has none of: reservations, burst
    buffers; Slurm's words for an unknown entity."""
    if _is(what, "reservations", 1) or _is(what, "reservationname", 1):
        if rest:
            write_out(f"Reservation {rest[0]} not found\n")
            return 1
        write_out("No reservations in the system\n")
        return 0
    if _is(what, "topology", 1):
        return _show_topology(rest[0] if rest else None)
    if _is(what, "burstbuffer", 2):
        return 0
    raise _Fail(f"invalid entity:{what} for keyword:show ")


def _show_topology(name: str | None) -> int:
    from gateway.compat.show_topo import TopoRecord, show_topology

    try:
        data = call("GET", "/v1/topology")
    except GatewayError as exc:
        raise _Fail(f"slurm_load_topo error: {exc}") from exc
    out, err = show_topology([TopoRecord(**r) for r in data.get("switches", ())], name)
    write_out(out)
    sys.stderr.write(err)
    return 0


def _show_jobs(
    rest: list[str], oneliner: bool, cluster: str | None = None, details: bool = False
) -> int:
    from gateway.compat.clusters import on_clusters
    from gateway.compat.show_fmt import show_job

    try:
        if rest:
            head, _, task_text = rest[0].partition("_")
            if not head.isdigit() or int(head) == 0 or not (task_text.isdigit() or not task_text):
                raise _Fail("scontrol_print_job error: Invalid job id specified")
            jobs, now, data = fetch_jobs(f"/v1/jobs/{int(head)}")
        else:
            jobs, now, data = fetch_jobs()
    except GatewayError as exc:
        raise _Fail(f"slurm_load_jobs error: {exc}") from exc
    if cluster is not None:  # -M: that cluster's controller knows only its own jobs
        jobs = on_clusters(jobs, (cluster,))
    if rest and "_" in rest[0] and jobs:
        task = int(rest[0].split("_", 1)[1])
        jobs = [
            replace(j, array_task_id=task) if _pending_task(j, task) else j
            for j in jobs
            if j.array_task_id == task or _pending_task(j, task)
        ]
        if not jobs:  # the job exists, that task does not (cancelled, or never was)
            write_out(f"Job {int(rest[0].partition('_')[0])}_{task} not found\n")
            return 1
    if not jobs:
        if rest:
            raise _Fail("slurm_load_jobs error: Invalid job id specified")
        write_out("No jobs in the system\n")
        return 0
    if rest and "_" not in rest[0]:
        jobs = array_order(jobs, int(rest[0]))
    elif not rest:
        jobs = list_order(jobs)
    site = site_from(data)
    write_out(
        "".join(show_job(j, now=now, site=site, one_liner=oneliner, details=details) for j in jobs)
    )
    return 0


def array_order(jobs: list[Job], job_id: int) -> list[Job]:
    """An array's records as slurmctld packs them for its id: the record holding the
    array's id first, then the tasks newest first (each split task heads its hash chain)."""
    if not jobs or any(j.array_job_id != job_id for j in jobs):
        return jobs
    return sorted(jobs, key=lambda j: (j.job_id != job_id, -j.job_id))


def _pending_task(job: Job, task: int) -> bool:
    """Whether a task is still in an array's pending meta record: scontrol shows that
    record with the one task id (`_task_id_in_job` in scontrol's info_job.c)."""
    return job.is_array_meta and job.array_pending is not None and task in job.array_pending


def _show_nodes(rest: list[str], oneliner: bool, details: bool = False) -> int:
    from gateway.compat.show_fmt import show_node

    try:
        data = call("GET", "/v1/nodes")
    except GatewayError as exc:
        raise _Fail(f"slurm_load_node error: {exc}") from exc
    cluster, extras = nodes_view(data)
    nodes = [n for n in cluster.nodes if not rest or n.name == rest[0]]
    if not nodes:
        raise _Fail(f"Node {rest[0]} not found")
    write_out(
        "".join(
            show_node(n, extras=extras[n.name], one_liner=oneliner, details=details) for n in nodes
        )
    )
    return 0


def _show_licenses(rest: list[str], oneliner: bool) -> int:
    from gateway.compat.show_lic import show_licenses
    from gateway.scheduler.licenses import LicenseUse

    try:
        data = call("GET", "/v1/nodes")
    except GatewayError as exc:
        raise _Fail(f"slurm_load_license error: {exc}") from exc
    uses = [LicenseUse(str(n), int(t), int(u)) for n, t, u in data["site"].get("licenses", ())]
    write_out(show_licenses(uses, rest[0] if rest else None, one_liner=oneliner))
    return 0


def _show_partitions(rest: list[str], oneliner: bool) -> int:
    from gateway.compat.show_fmt import show_partition

    try:
        data = call("GET", "/v1/nodes")
    except GatewayError as exc:
        raise _Fail(f"slurm_load_partitions error: {exc}") from exc
    cluster, _ = nodes_view(data)
    extras = partitions_extras(cluster, data)
    parts = [p for p in cluster.partitions if not rest or p.name == rest[0]]
    if not parts:
        raise _Fail(f"Partition {rest[0]} not found")
    write_out(
        "".join(
            show_partition(p, cluster, extras=extras[p.name], one_liner=oneliner) for p in parts
        )
    )
    return 0


def _job_list(args: list[str]) -> list[str]:
    return [w for a in args for w in a.split(",") if w]


def _control(op: str, args: list[str]) -> int:
    ids = _job_list(args)
    if not ids:
        raise _Fail(f"too few arguments for keyword:{op}")
    for word in ids:
        if not word.split("_")[0].isdigit():
            sys.stderr.write(f"Invalid job id specified for job {word}\n")
            if op in SUSPEND_STYLE:
                sys.stderr.write("slurm_suspend error: Invalid job id specified\n")
            return 1
    url, body = {
        "hold": ("/v1/jobs/hold", {"ids": ids, "user_hold": False}),
        "uhold": ("/v1/jobs/hold", {"ids": ids, "user_hold": True}),
        "release": ("/v1/jobs/release", {"ids": ids}),
        "requeue": ("/v1/jobs/requeue", {"ids": ids}),
        "requeuehold": ("/v1/jobs/requeue", {"ids": ids, "hold_after": True}),
        "suspend": ("/v1/jobs/suspend", {"ids": ids}),
        "resume": ("/v1/jobs/resume", {"ids": ids}),
    }[op]
    # a whole array (`scontrol release 113`, thousands of tasks) can take a while
    with Ticker(f"{_PROG}: {op} {' '.join(ids)[:40]}".rstrip(), delay_s=0.5):
        data = call("POST", url, body)
    return _report(data["results"], op)


def _show_steps(rest: list[str], oneliner: bool) -> int:
    """Running steps of running jobs (`show step [job[.step]]`), as squeue -s finds them."""
    from gateway.compat.show_step import show_step
    from gateway.model.codec import step_from_dict
    from gateway.model.state import JobState

    want_job, _, want_step = (rest[0] if rest else "").partition(".")
    if want_job and not want_job.isdigit():
        raise _Fail("Job step 0.Invalid not found")
    jobs, _, _ = fetch_jobs()
    running = {
        j.job_id: j
        for j in jobs
        if j.state is JobState.RUNNING and (not want_job or str(j.job_id) == want_job)
    }
    if want_job and not any(str(j.job_id) == want_job for j in jobs):
        raise _Fail("slurm_get_job_steps error: Invalid job id specified")
    steps = []
    if running:
        data = call("GET", "/v1/accounting?" + "&".join(f"ids={i}" for i in sorted(running)))
        steps = [
            s
            for s in (step_from_dict(d) for d in data["steps"])
            if s.state is JobState.RUNNING
            and s.job_id in running
            and s.run == running[s.job_id].restart_count
            and (not want_step or s.step_id == want_step)
        ]
    if not steps:
        if want_job:
            raise _Fail(f"Job step {want_job}.{want_step} not found")
        write_out("No job steps in the system\n")
        return 0
    # the job's step list: the batch step (made at the job's start) first, then srun's
    steps.sort(
        key=lambda s: (s.job_id, s.step_id != "batch", int(s.step_id) if s.step_id.isdigit() else 0)
    )
    write_out("".join(show_step(s, running[s.job_id], one_liner=oneliner) for s in steps))
    return 0


def _show_config() -> int:
    from gateway.compat.show_config import SiteConfig, show_config

    try:
        data = call("GET", "/v1/nodes")
    except GatewayError as exc:
        raise _Fail(f"slurm_load_ctl_conf error: {exc}") from exc
    site = data["site"]
    cluster, _ = nodes_view(data)
    conf = SiteConfig(
        cluster=str(site.get("cluster") or cluster.name),
        def_mem_per_cpu_mb=site.get("def_mem_per_cpu_mb"),
        job_requeue=bool(site.get("job_requeue", True)),
        max_array_size=int(site.get("max_array_size", 1001)),
        gres_types=[str(t) for t in site.get("gres_types", ())],
        host=_host(),
    )
    write_out(show_config(conf, now=float(data["now"])))
    return 0


def _host() -> str:
    """The controller's name as scontrol prints it: the gateway runs on this machine."""
    return socket.gethostname().split(".")[0]


_STARS = "*" * 41


def _ping() -> int:
    """`Slurmctld(primary) at HOST is UP`: the gateway answers on this machine's socket."""
    host = _host()
    try:
        call("GET", "/v1/ping")
    except GatewayError:
        write_out(f"Slurmctld(primary) at {host} is DOWN\n")
        if os.getuid() == 0:
            write_out(f"{_STARS}\n** RESTORE SLURMCTLD DAEMON TO SERVICE **\n{_STARS}\n")
        return 1
    write_out(f"Slurmctld(primary) at {host} is UP\n")
    return 0


def _run(
    words: list[str], oneliner: bool, cluster: str | None = None, details: bool = False
) -> int:
    if not words:
        raise _Fail("no command given")
    cmd, rest = words[0].lower(), words[1:]
    if _is(cmd, "show", 2):
        return _show(rest, oneliner, cluster, details)
    if _is(cmd, "update", 2):
        return update(rest)
    if _is(cmd, "ping", 2):
        return _ping()
    for op in ("requeuehold", "requeue", "release", "uhold", "hold"):
        if cmd == op:
            return _control(op, rest)
    # scontrol.c's minimal abbreviations: `su[spend]`, `res[ume]`
    for op, shortest in (("suspend", 2), ("resume", 3)):
        if _is(cmd, op, shortest):
            return _control(op, rest)
    if cmd in ("version",):
        write_out(version_text())
        return 0
    raise _Fail(f"invalid keyword: {words[0]}")


def _one_cluster(text: str | None) -> str | None:
    """`-M name`: the one cluster scontrol talks to (Slurm's words for an unknown name or
    for several); None without -M."""
    if text is None:
        return None
    from gateway.compat.clusters import ClusterSelectError, choose_clusters

    pong = call("GET", "/v1/ping")
    known = pong.get("clusters") or [str(pong.get("cluster", "caldera"))]
    try:
        choice = choose_clusters(_PROG, text, known)
    except ClusterSelectError as exc:
        raise _Fail(exc.stderr.rstrip("\n")) from None
    sys.stderr.write(choice.stderr)
    if len(choice.names) > 1:
        raise _Fail(f"{_PROG}: fatal: Only one cluster can be used at a time with scontrol")
    return choice.names[0]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `scontrol` command."""
    args = [_PROG, *(sys.argv[1:] if argv is None else argv)]
    try:
        opts = parse_command(args, OPTIONS, _PROG)
    except CmdUsageError as exc:
        sys.stderr.write("\n".join(exc.lines) + "\n")
        return 1
    if opts.exit_option in ("help", "usage"):
        sys.stdout.write("Usage: scontrol [<OPTION>] [<COMMAND>]\n")
        return 0
    if opts.exit_option == "version":
        sys.stdout.write(version_text())
        return 0
    try:
        cluster = _one_cluster(opts.text("clusters"))
        return _run(opts.operands, opts.flag("oneliner"), cluster, opts.flag("details"))
    except _Fail as exc:
        sys.stderr.write("\n".join(exc.lines) + "\n")
        return 1
    except GatewayError as exc:
        sys.stderr.write(f"{_PROG}: error: {exc}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
