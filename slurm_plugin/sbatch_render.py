"""JobSpec -> sbatch long options, for passing a request through to a real sbatch.

`render_options` uses the project's renderer (`gateway.compat.render.render_argv`) when it
exists and this module's own otherwise; both emit the options sbatch would need to record
the same job (`scontrol show job` fields). Pure: no IO.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gateway.compat.duration import INFINITE, secs_to_str
from gateway.compat.gres import GresItem
from gateway.compat.quantity import mail_type_str
from gateway.model.jobspec import JobSpec, Sharing

__all__ = ["render_options", "sbatch_options"]


def _gpus(items: tuple[GresItem, ...]) -> str:
    return ",".join(f"{i.type}:{i.count}" if i.type else str(i.count) for i in items)


def _when(epoch: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch))


def _minutes(value: int) -> str:
    return "UNLIMITED" if value == INFINITE else str(value)


def sbatch_options(spec: JobSpec) -> list[str]:
    """The long options that make sbatch submit `spec` (not its script or arguments)."""
    out: list[str] = []

    def opt(name: str, value: object | None) -> None:
        if value is not None and value is not False:
            out.append(f"--{name}" if value is True else f"--{name}={value}")

    opt("job-name", spec.name or None)
    opt("chdir", spec.workdir or None)
    opt("partition", ",".join(spec.partitions) or None)
    opt("clusters", ",".join(spec.clusters) or None)
    opt("account", spec.account)
    opt("qos", spec.qos)
    opt("reservation", spec.reservation)
    opt("wckey", spec.wckey)
    opt("comment", spec.comment)
    if spec.nodes_min is not None:
        nmax = spec.nodes_max
        opt("nodes", f"{spec.nodes_min}-{nmax}" if nmax else spec.nodes_min)
    opt("ntasks", spec.ntasks)
    opt("ntasks-per-node", spec.ntasks_per_node)
    opt("ntasks-per-socket", spec.ntasks_per_socket)
    opt("ntasks-per-core", spec.ntasks_per_core)
    opt("ntasks-per-gpu", spec.ntasks_per_gpu)
    opt("cpus-per-task", spec.cpus_per_task)
    opt("cpus-per-gpu", spec.cpus_per_gpu)
    opt("mincpus", spec.mincpus)
    opt("sockets-per-node", spec.sockets_per_node)
    opt("cores-per-socket", spec.cores_per_socket)
    opt("threads-per-core", spec.threads_per_core)
    opt("overcommit", spec.overcommit)
    opt("mem", f"{spec.mem_per_node_mb}M" if spec.mem_per_node_mb is not None else None)
    opt("mem-per-cpu", f"{spec.mem_per_cpu_mb}M" if spec.mem_per_cpu_mb is not None else None)
    opt("mem-per-gpu", f"{spec.mem_per_gpu_mb}M" if spec.mem_per_gpu_mb is not None else None)
    opt("tmp", f"{spec.tmp_mb}M" if spec.tmp_mb is not None else None)
    opt("gres", ",".join(i.render() for i in spec.gres) or None)
    opt("gpus", _gpus(spec.gpus) or None)
    opt("gpus-per-node", _gpus(spec.gpus_per_node) or None)
    opt("gpus-per-socket", _gpus(spec.gpus_per_socket) or None)
    opt("gpus-per-task", _gpus(spec.gpus_per_task) or None)
    opt("licenses", spec.licenses)
    opt("constraint", spec.constraint)
    opt("nodelist", spec.nodelist)
    opt("exclude", spec.exclude)
    sharing = {
        Sharing.EXCLUSIVE: "exclusive",
        Sharing.USER: "exclusive=user",
        Sharing.MCS: "exclusive=mcs",
        Sharing.OVERSUBSCRIBE: "oversubscribe",
    }
    if spec.sharing is not None:
        out.append(f"--{sharing[spec.sharing]}")
    opt("contiguous", spec.contiguous)
    if spec.switches is not None:
        wait = f"@{secs_to_str(spec.switches_wait_s)}" if spec.switches_wait_s else ""
        opt("switches", f"{spec.switches}{wait}")
    opt("hint", spec.hint)
    opt("distribution", spec.distribution)
    opt("time", _minutes(spec.time_limit) if spec.time_limit is not None else None)
    opt("time-min", _minutes(spec.time_min) if spec.time_min is not None else None)
    opt("begin", _when(spec.begin) if spec.begin is not None else None)
    opt("deadline", _when(spec.deadline) if spec.deadline is not None else None)
    opt("array", spec.array.render() if spec.array is not None else None)
    opt("dependency", spec.dependency.render() if spec.dependency is not None else None)
    if spec.kill_on_invalid_dep is not None:
        opt("kill-on-invalid-dep", "yes" if spec.kill_on_invalid_dep else "no")
    opt("hold", spec.hold)
    opt("nice", spec.nice)
    opt("priority", spec.priority)
    if spec.requeue is not None:
        out.append("--requeue" if spec.requeue else "--no-requeue")
    opt("signal", spec.signal.render() if spec.signal is not None else None)
    opt("open-mode", spec.open_mode)
    opt("mail-type", mail_type_str(spec.mail_type) if spec.mail_type else None)
    opt("mail-user", spec.mail_user)
    opt("output", spec.stdout)
    opt("error", spec.stderr)
    opt("input", spec.stdin)
    opt("export", spec.export)
    opt("export-file", spec.export_file)
    if spec.get_user_env is not None:
        out.append(f"--get-user-env={spec.get_user_env}" if spec.get_user_env else "--get-user-env")
    opt("uid", spec.uid)
    opt("gid", spec.gid)
    opt("container", spec.container)
    opt("bb", spec.burst)
    for key, value in spec.extra:
        name = key.lstrip("-")
        out.append(f"--{name}" if value is None else f"--{name}={value}")
    return out


def _project_renderer() -> Callable[[JobSpec], list[str]] | None:
    try:
        from gateway.compat import render  # type: ignore[attr-defined,unused-ignore]
    except ImportError:
        return None
    fn = getattr(render, "render_argv", None)
    return fn if callable(fn) else None


def render_options(spec: JobSpec) -> list[str]:
    """sbatch's options for `spec`: the project renderer's when present, else ours."""
    fn = _project_renderer()
    if fn is None:
        return sbatch_options(spec)
    return [str(a) for a in fn(spec)]
