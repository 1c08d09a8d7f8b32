"""From option values to a JobSpec: sbatch's `_opt_verify` and job-descriptor derivations.

Mirrors what Slurm 22.05 derives before a job reaches slurmctld (task counts from node
counts, mutually exclusive memory options, --hint, absolute I/O paths, default names,
the GRES check) and, separately, the checks slurmctld makes on the request alone
(array and dependency syntax, time-min, deadline, TRES strings). sbatch prints its own
errors as soon as a component is read; slurmctld's come after every component, so the
second are returned, not raised. Site checks (partitions, limits, accounts) belong to
the gateway, not here.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any, NamedTuple

from gateway.compat.arrays import parse_array
from gateway.compat.cnum import to_int32, to_uint32
from gateway.compat.dependency import DependencyError, parse_dependency
from gateway.compat.errors import CompatError, Diagnostic, Level
from gateway.compat.gres import gres_tres, parse_gpus, parse_gres
from gateway.compat.gres_check import GresCounts, GresRequest, check_gres, check_tres_strings
from gateway.compat.option_checks import check_options
from gateway.compat.option_values import is_arbitrary
from gateway.compat.optypes import Draft, ParseContext
from gateway.compat.slurm_errors import SlurmErrno
from gateway.model.jobspec import JobSpec
from gateway.model.values import Burst, GresItem

if TYPE_CHECKING:
    from gateway.compat.sbatch import FirstPass

__all__ = ["SubmitError", "Verified", "verify_component"]

_INVALID_GRES = "Invalid generic resource (gres) specification"
_NO_GRES = GresRequest()


class SubmitError(CompatError):
    """What slurmctld refuses: `sbatch: error: Batch job submission failed: <text>`."""

    def __init__(self, errno: SlurmErrno, detail: str | None = None) -> None:
        last = Diagnostic(Level.ERROR, f"Batch job submission failed: {errno.text}")
        lines = (last,) if detail is None else (Diagnostic(Level.ERROR, detail), last)
        super().__init__(*lines, exit_code=1)
        self.errno = errno


class Verified(NamedTuple):
    """One component: its JobSpec, what sbatch printed, and slurmctld's refusal if any."""

    spec: JobSpec
    warnings: tuple[Diagnostic, ...]
    refusal: CompatError | None  # raised once every component is read, as slurmctld does


def _full(path: str | None, workdir: str) -> str | None:
    if path is None or path.startswith("/"):
        return path
    return f"{workdir}/{path}"


def _hostfile(ctx: ParseContext, path: str) -> str:
    if ctx.read_file is None:
        raise CompatError.error("Invalid --nodefile node file")
    try:
        text = ctx.read_file(path)
    except OSError:
        raise CompatError.error("Invalid --nodefile node file") from None
    hosts = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    return ",".join(h for h in hosts if h)


def _sizes(d: Draft, hosts: list[str] | None, warnings: list[Diagnostic]) -> dict[str, Any]:
    """The node/task arithmetic of `_opt_verify` (C `int`s)."""
    nodes = d.get("nodes")
    nodes_set = nodes is not None
    lo = nodes.min if nodes else 1  # Slurm's reset value for -N
    hi = nodes.max if nodes else 0
    if hosts is not None:
        lo = max(len(hosts), lo) if nodes_set else len(hosts)
        nodes_set = True
    ntasks = d.get("ntasks")
    ntasks_set = ntasks is not None
    per_node = d.get("ntasks_per_node")
    if per_node is not None and per_node > 0 and not ntasks_set and (hi == 0 or lo == hi):
        ntasks, ntasks_set = to_int32(lo * per_node), True
    cpt = d.get("cpus_per_task")
    mincpus = d.get("mincpus")
    if cpt is not None and (mincpus is None or mincpus < cpt):
        mincpus = cpt
    if ntasks is not None and ntasks < 0:
        raise CompatError.error(f"invalid number of tasks (-n {ntasks})", exit_code=1)
    if lo < 0 or hi < 0 or (hi and lo > hi):
        raise CompatError.error(f"invalid number of nodes (-N {lo}-{hi})", exit_code=1)
    extra_set = bool(d.get("extra_node_info"))
    if (nodes_set or extra_set) and (lo == hi or hi == 0) and not ntasks_set:
        count = max(lo, 1)
        for key in ("sockets_per_node", "cores_per_socket", "threads_per_core"):
            factor = d.get(key)
            if factor is not None:
                count = to_int32(count * factor)
                ntasks_set = True
        if ntasks_set:
            ntasks = count
    elif nodes_set and ntasks_set and ntasks is not None:
        if ntasks < hi:
            hi = ntasks
        if ntasks < lo:
            warnings.append(
                Diagnostic(
                    Level.INFO,
                    f"Warning: can't run {ntasks} processes on {lo} nodes, "
                    f"setting nnodes to {ntasks}",
                )
            )
            lo = hi = ntasks
            if hosts is not None and len(hosts) > lo:
                del hosts[max(lo, 0) :]
    if is_arbitrary(d.get("distribution")) and not (nodes_set and ntasks_set):
        count = len(hosts) if hosts is not None else 0
        if not ntasks_set:
            ntasks, ntasks_set = count, True
        if not nodes_set:
            nodes_set, lo, hi = True, count, count
    return {
        "nodes_min": lo if nodes_set else (0 if ntasks_set and ntasks == 0 else None),
        "nodes_max": (hi or None) if nodes_set else None,
        "ntasks": ntasks if ntasks_set else None,
        "mincpus": mincpus,
    }


def _extras(d: Draft) -> tuple[tuple[str, str | None], ...]:
    found = [(k[6:], v if v != "" else None) for k, v in d.values.items() if k[:6] == "extra:"]
    found.sort()
    return tuple(found)


_GRES_KEYS = (
    "gpus",
    "gpus_per_node",
    "gres",
    "gpus_per_socket",
    "gpus_per_task",
    "cpus_per_gpu",
    "mem_per_gpu_mb",
    "ntasks_per_gpu",
)


def _gres(d: Draft, ctx: ParseContext, sizes: dict[str, Any]) -> dict[str, Any]:
    """The GRES request, checked as sbatch (or, with --clusters, slurmctld) checks it."""
    values = d.values
    if not any(k in values for k in _GRES_KEYS):  # nothing to check
        return {
            **dict.fromkeys(("gpus", "gpus_per_node", "gres", "gpus_per_socket"), ()),
            "gpus_per_task": (),
            "request": _NO_GRES,
            "ntasks": sizes["ntasks"],
            "nodes_min": sizes["nodes_min"],
            "nodes_max": sizes["nodes_max"],
            "ntasks_per_node": values.get("ntasks_per_node"),
            "ntasks_per_socket": values.get("ntasks_per_socket"),
            "sockets_per_node": values.get("sockets_per_node"),
            "cpus_per_task": values.get("cpus_per_task"),
        }
    g = values.get
    texts = (g("gpus"), g("gpus_per_node"), g("gres"), g("gpus_per_socket"), g("gpus_per_task"))
    counts = (
        sizes["ntasks"],
        sizes["nodes_min"],
        sizes["nodes_max"],
        g("ntasks_per_node"),
        g("ntasks_per_socket"),
        g("sockets_per_node"),
        g("cpus_per_task"),
        g("ntasks_per_gpu"),
    )
    return _checked_gres(
        texts,
        g("cpus_per_gpu"),
        g("mem_per_gpu_mb"),
        counts,
        ctx.gres_names,
        bool(g("clusters")),
    )


_GRES_FIELDS = ("gpus", "gpus_per_node", "gres", "gpus_per_socket", "gpus_per_task")


@lru_cache(maxsize=1024)
def _checked_gres(
    texts: tuple[str | None, ...],
    cpus_per_gpu: int | None,
    mem_per_gpu_mb: int | None,
    counts: tuple[int | None, ...],
    names: tuple[str, ...] | None,
    by_controller: bool,
) -> dict[str, Any]:
    """The GRES items and the counts the GRES check leaves (a pure function of its input,
    so kept for requests seen before; callers must not change the result)."""
    items: dict[str, tuple[GresItem, ...]] = {}
    for key, text in zip(_GRES_FIELDS, texts, strict=True):
        parsed = () if text is None else parse_gres(text) if key == "gres" else parse_gpus(text)
        if parsed is None:
            if by_controller:
                raise CompatError.error(f"Batch job submission failed: {_INVALID_GRES}", 1)
            raise CompatError.error(_INVALID_GRES, 1)
        items[key] = parsed
    gres_text = texts[2]
    tokens = gres_tres(gres_text) if gres_text is not None else None
    req = GresRequest(
        per_job=items["gpus"],
        per_node=(*items["gpus_per_node"], *items["gres"]),
        per_socket=items["gpus_per_socket"],
        per_task=items["gpus_per_task"],
        cpus_per_gpu=cpus_per_gpu,
        mem_per_gpu_mb=mem_per_gpu_mb,
        per_node_has_empty_item=tokens is not None and "" in tokens,
    )
    out = check_gres(req, GresCounts(*counts), names, by_controller=by_controller)
    return {
        **items,
        "request": req,
        "ntasks": out.num_tasks,
        "nodes_min": out.min_nodes,
        "nodes_max": out.max_nodes,
        "ntasks_per_node": out.ntasks_per_node,
        "ntasks_per_socket": out.ntasks_per_socket,
        "sockets_per_node": out.sockets_per_node,
        "cpus_per_task": out.cpus_per_task,
    }


def _controller(
    d: Draft,
    ctx: ParseContext,
    spec: JobSpec,
    req: GresRequest,
    array_text: str | None,
    dependency_refusal: CompatError | None,
) -> CompatError | None:
    """What slurmctld refuses in the request alone, in the order it looks."""
    try:
        check_tres_strings(req)
    except CompatError as exc:
        return exc
    if array_text and array_text.strip(",") and spec.array is None:
        return SubmitError(SlurmErrno.INVALID_ARRAY)
    if (
        spec.time_min is not None
        and spec.time_limit is not None
        and to_uint32(spec.time_min) > to_uint32(spec.time_limit)
    ):
        return SubmitError(SlurmErrno.INVALID_TIME_MIN_LIMIT)
    if spec.deadline:
        if spec.deadline < ctx.now:
            return SubmitError(SlurmErrno.INVALID_TIME_LIMIT)
        if spec.time_min and spec.deadline < ctx.now + spec.time_min * 60:
            return SubmitError(SlurmErrno.INVALID_TIME_MIN_LIMIT)
    return dependency_refusal


def _name(d: Draft, first: FirstPass) -> str:
    name: str | None = d.get("name")
    if name is not None:
        return name
    if first.wrap is not None:
        return "wrap"
    if first.script_path is not None:
        return first.script_path.rsplit("/", 1)[-1]
    return "sbatch"


def verify_component(
    d: Draft, ctx: ParseContext, script_name: str, first: FirstPass, is_het: bool
) -> Verified:
    """One component's JobSpec; raises CompatError as sbatch would."""
    warnings: list[Diagnostic] = []
    g = d.values.get  # Draft.get without the method call (this is the hot path)
    check_options(d, ctx, warnings)
    workdir: str = g("workdir", ctx.cwd)
    exclude: str | None = g("exclude")
    if exclude is not None and "/" in exclude:
        exclude = _hostfile(ctx, exclude)
    nodelist: str | None = g("nodelist")
    if d.isset("nodefile"):
        nodelist = _hostfile(ctx, d.values["nodefile"])
    elif nodelist is not None and "/" in nodelist:
        nodelist = _hostfile(ctx, nodelist)
    hosts: list[str] | None = None
    if nodelist:
        from gateway.compat.hostlist import expand, uniq

        hosts = uniq(expand(nodelist))
    sizes = _sizes(d, hosts, warnings)
    if hosts is not None:
        from gateway.compat.hostlist import compress

        nodelist = compress(hosts)
    begin, deadline = g("begin"), g("deadline")
    if begin and deadline and deadline < begin:
        raise CompatError.error("Incompatible begin and deadline time specification", 1)
    if is_arbitrary(g("distribution")) and not nodelist:
        raise CompatError.error(
            "With Arbitrary distribution you need to specify a nodelist or hostfile with the "
            "-w option",
            1,
        )
    gres = _gres(d, ctx, sizes)
    array_text: str | None = g("array")
    array = None
    if array_text is not None and array_text.strip(","):  # no item at all: not an array
        array = parse_array(array_text, ctx.max_array_size)
    dependency = None
    refusal: CompatError | None = None
    if "dependency" in d.values:
        try:
            dependency = parse_dependency(d.values["dependency"], ctx.max_array_size)
        except DependencyError as exc:
            refusal = exc
        if dependency is not None and not dependency.items:
            dependency = None
    kwargs = {k: v for k, v in d.values.items() if k in _DIRECT}
    kwargs.update(
        name=_name(d, first),
        workdir=workdir,
        nodes_min=gres["nodes_min"],
        nodes_max=gres["nodes_max"],
        ntasks=gres["ntasks"],
        ntasks_per_node=gres["ntasks_per_node"],
        ntasks_per_socket=gres["ntasks_per_socket"],
        cpus_per_task=gres["cpus_per_task"],
        mincpus=sizes["mincpus"],
        sockets_per_node=gres["sockets_per_node"],
        gres=gres["gres"],
        gpus=gres["gpus"],
        gpus_per_node=gres["gpus_per_node"],
        gpus_per_socket=gres["gpus_per_socket"],
        gpus_per_task=gres["gpus_per_task"],
        nodelist=nodelist,
        exclude=exclude,
        begin=begin if begin and begin > ctx.now else None,  # slurmctld drops a past begin
        array=array,
        dependency=dependency,
        priority=_priority(g("priority")),
        stdout=_full(g("stdout"), workdir),
        stderr=_full(g("stderr"), workdir),
        stdin=_full(g("stdin", "/dev/null"), workdir),
        burst=_burst(g("burst")),
        burst_after_min=_burst_after(g("burst_after_min")),
        extra=_extras(d),
        script_args=first.script_args,
    )
    for key in ("time_limit", "time_min"):  # slurmctld keeps them in a uint32
        if kwargs.get(key) is not None:
            kwargs[key] = to_uint32(kwargs[key])
    spec = JobSpec(**kwargs)
    return Verified(
        spec,
        tuple(warnings),
        _controller(d, ctx, spec, gres["request"], array_text, refusal),
    )


# Draft values that are JobSpec fields as they are (the others are derived above).
_DIRECT = frozenset(
    {
        "partitions",
        "clusters",
        "account",
        "qos",
        "reservation",
        "wckey",
        "comment",
        "ntasks_per_core",
        "ntasks_per_gpu",
        "cpus_per_gpu",
        "cores_per_socket",
        "threads_per_core",
        "overcommit",
        "mem_per_node_mb",
        "mem_per_cpu_mb",
        "mem_per_gpu_mb",
        "tmp_mb",
        "licenses",
        "constraint",
        "sharing",
        "contiguous",
        "switches",
        "switches_wait_s",
        "hint",
        "distribution",
        "time_limit",
        "time_min",
        "deadline",
        "kill_on_invalid_dep",
        "hold",
        "nice",
        "requeue",
        "signal",
        "open_mode",
        "mail_type",
        "mail_user",
        "export",
        "export_file",
        "get_user_env",
        "uid",
        "gid",
        "container",
        "container_image",
        "container_mounts",
        "container_workdir",
        "container_name",
        "gpu_memory_mb",
    }
)


def _priority(value: str | None) -> int | None:
    """`--priority=N|TOP` (TOP is NO_VAL-1, as Slurm stores it)."""
    if value is None:
        return None
    if value.upper() == "TOP":
        return 0xFFFF_FFFE - 1
    from gateway.compat.cnum import strtol

    number = strtol(value)[0]
    if number < 0:
        raise CompatError.error("Priority must be >= 0")
    if number >= 0xFFFF_FFFE:
        raise CompatError.error(f"Priority must be < {0xFFFF_FFFE}")
    return number


_BURST = tuple(b.value for b in Burst)


def _burst(value: str | None) -> str | None:
    if value is None:
        return None
    if value.lower() not in _BURST:
        raise CompatError.error(
            f"Invalid --burst specification: {value} (expected never, allowed or prefer)"
        )
    return value.lower()


def _burst_after(value: str | None) -> int | None:
    """`--burst-after=MINUTES`: a whole number of minutes, 0 or more."""
    if value is None:
        return None
    text = value.strip()
    if not text.isascii() or not text.isdigit() or len(text) > 9:
        raise CompatError.error(
            f"Invalid --burst-after specification: {value} (expected a number of minutes)"
        )
    return int(text)
