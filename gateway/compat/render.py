"""JobSpec -> sbatch argv: the options that make sbatch (and Caldera) rebuild the same spec.

`render_argv(spec)` is pure. For a spec that `parse_sbatch` produced from a script,

    parse_sbatch(["sbatch", *render_argv(spec), script_path, *spec.script_args],
                 script, {}, ctx).spec == spec

with the same script and context. Values are written in forms real sbatch 22.05 accepts
too (`--begin=uts<epoch>`, sizes in MiB, times as minutes or `minutes:seconds`), every
hetjob component in full, components joined by `:`. Values that sbatch derives itself
(task counts from node counts, CPUs per task from `--cpus-per-gpu`, the `--hint` layout)
are written so that deriving them again gives the same result.

What the command line cannot say, and so is outside the round trip: an option a script
sets and the command line then empties (`-p ,`, `--gres=none`); values only the
environment can give (`SBATCH_WAIT4SWITCH` without a switch count); and a hetjob whose
first component lacks an option that sbatch does not reset between components (`--mem`,
`-t`, ...) while a later one sets it, since sbatch's first pass hands such an option to
every component.
"""

from __future__ import annotations

from time import localtime, strftime

from gateway.compat.cnum import to_int32
from gateway.compat.options import BY_LONG
from gateway.compat.optypes import Arg
from gateway.model.jobspec import JobSpec, Sharing
from gateway.model.values import INFINITE, NO_VAL, GresItem

__all__ = ["render_argv", "render_component", "secs_arg", "time_arg"]

_UINT32 = 2**32
_INV15 = pow(15, -1, 2**30)  # 60 = 4 * 15: minutes*60 reaches every multiple of 4 mod 2**32
_SHARING = {
    Sharing.EXCLUSIVE: "--exclusive",
    Sharing.USER: "--exclusive=user",
    Sharing.MCS: "--exclusive=mcs",
    Sharing.OVERSUBSCRIBE: "--oversubscribe",
}


def secs_arg(seconds: int) -> str:
    """A time text that `time_str_to_secs` reads back as `seconds`.

    INFINITE and NO_VAL get their words; other values are C ints (Slurm's arithmetic
    wraps), written `minutes:seconds` with the minutes chosen so that the wrap lands on
    the value.
    """
    if seconds == INFINITE:
        return "UNLIMITED"
    if seconds == NO_VAL:
        return "invalid"
    if 0 <= seconds <= 2**31 - 1:
        return f"{seconds // 60}:{seconds % 60}"
    rest = seconds % 4
    minutes = (((seconds - rest) % _UINT32) // 4 * _INV15) % 2**30
    return f"{minutes}:{rest}"


def time_arg(minutes: int) -> str:
    """A `--time` text that `time_str_to_mins` reads back as `minutes` (INFINITE: UNLIMITED)."""
    if minutes == INFINITE:
        return "UNLIMITED"
    if minutes > 0 and minutes * 60 <= 2**31 - 1:
        return str(minutes)
    return secs_arg(to_int32(minutes * 60 - 59))


def _epoch(value: int) -> str:
    if value >= 1_000_000:
        return f"uts{value}"
    return strftime("%Y-%m-%dT%H:%M:%S", localtime(value))


def _gres_arg(items: tuple[GresItem, ...]) -> str:
    """A --gres value whose TRES items are these (sbatch prefixes each with `gres:`)."""
    out = []
    for item in items:
        text = item.render()
        out.append("gres:" + text if text.startswith("gres:") else text)
    return ",".join(out)


def _gpus_arg(items: tuple[GresItem, ...]) -> str:
    """A --gpus* value: each item without its `gpu:`."""
    return ",".join(item.render().removeprefix("gpu:") for item in items)


def _nodes_forced_by_gres(spec: JobSpec) -> bool:
    """Whether the GRES check fixes the node count (`--gpus` with a per-node count of the
    same GPUs): an explicit `--nodes` would then only add sbatch's own derivations."""
    per_node = {(i.name, i.type) for i in (*spec.gpus_per_node, *spec.gres) if i.count}
    return any(i.count and (i.name, i.type) in per_node for i in spec.gpus)


def _resources(spec: JobSpec, leaked_mem: bool = False) -> list[str]:
    out: list[str] = []
    factors = (spec.sockets_per_node, spec.cores_per_socket, spec.threads_per_core)
    # Whether sbatch's _opt_verify would set a task count from a single node count.
    derives = any(f is not None for f in factors) or (spec.ntasks_per_node or 0) > 0
    forced = _nodes_forced_by_gres(spec)
    nodes = spec.nodes_min is not None and (not forced or (spec.ntasks is None and derives))
    if nodes and spec.nodes_min is not None:
        hi = spec.nodes_max or 0
        if (
            spec.ntasks is None
            and hi == spec.nodes_min
            and derives
            and (forced or any(i.count == hi for i in spec.gpus))
        ):
            # The GRES check lowered the maximum (to the GPU count, or to the GPUs over
            # those per node) after sbatch had seen a range, else sbatch would have set a
            # task count from the socket factors or --ntasks-per-node: give a range again.
            hi += 1
        rng = str(hi) if hi == spec.nodes_min else f"{spec.nodes_min}-{hi}"
        out.append(f"--nodes={rng}")
    # Fewer tasks than nodes: sbatch would cut the nodes to the tasks, so the tasks were
    # set later by the GRES check, which sets them again.
    fewer = spec.nodes_min is not None and spec.ntasks is not None and spec.ntasks < spec.nodes_min
    if spec.ntasks and not (fewer and (nodes or spec.nodelist)):
        out.append(f"--ntasks={spec.ntasks}")
    if spec.ntasks_per_node is not None:
        out.append(f"--ntasks-per-node={spec.ntasks_per_node}")
    if spec.ntasks_per_socket is not None:
        out.append(f"--ntasks-per-socket={spec.ntasks_per_socket}")
    if spec.ntasks_per_gpu is not None:
        out.append(f"--ntasks-per-gpu={spec.ntasks_per_gpu}")
    # An explicit -c also raises mincpus; without that, or next to --cpus-per-gpu (which
    # sbatch refuses with -c unless --clusters defers the check), the GRES check set it.
    cpt, mincpus = spec.cpus_per_task, spec.mincpus
    given = cpt is not None and mincpus is not None and mincpus >= cpt
    if given and not (spec.cpus_per_gpu is not None and not spec.clusters):
        out.append(f"--cpus-per-task={cpt}")
    if spec.cpus_per_gpu is not None:
        out.append(f"--cpus-per-gpu={spec.cpus_per_gpu}")
    if spec.mincpus is not None:
        out.append(f"--mincpus={spec.mincpus}")
    out += _layout(spec)
    for flag, value in (
        ("--mem", None if leaked_mem else spec.mem_per_node_mb),
        ("--mem-per-cpu", spec.mem_per_cpu_mb),
        ("--mem-per-gpu", spec.mem_per_gpu_mb),
        ("--tmp", spec.tmp_mb),
    ):
        if value is not None:
            out.append(f"{flag}={value}")
    if spec.gres:
        out.append(f"--gres={_gres_arg(spec.gres)}")
    for flag, items in (
        ("--gpus", spec.gpus),
        ("--gpus-per-node", spec.gpus_per_node),
        ("--gpus-per-socket", spec.gpus_per_socket),
        ("--gpus-per-task", spec.gpus_per_task),
    ):
        if items:
            out.append(f"{flag}={_gpus_arg(items)}")
    if spec.overcommit:
        out.append("--overcommit")
    return out


def _layout(spec: JobSpec) -> list[str]:
    """Sockets, cores, threads, tasks per core, or the --hint that implies them."""
    if spec.hint is not None:
        return [f"--hint={spec.hint}"]
    out: list[str] = []
    triple = (spec.sockets_per_node, spec.cores_per_socket, spec.threads_per_core)
    if 0 in triple:  # only -B can ask for zero
        out.append("--extra-node-info=" + ":".join("*" if v is None else f"{v}" for v in triple))
    else:
        for flag, value in zip(
            ("--sockets-per-node", "--cores-per-socket", "--threads-per-core"), triple, strict=True
        ):
            if value is not None:
                out.append(f"{flag}={value}")
    if spec.ntasks_per_core is not None:
        out.append(f"--ntasks-per-core={spec.ntasks_per_core}")
    return out


def _placement(spec: JobSpec) -> list[str]:
    out: list[str] = []
    for flag, text in (
        ("--constraint", spec.constraint),
        ("--nodelist", spec.nodelist),
        ("--exclude", spec.exclude),
        ("--licenses", spec.licenses),
        ("--distribution", spec.distribution),
    ):
        if text is not None:
            out.append(f"{flag}={text}")
    if spec.sharing is not None:
        out.append(_SHARING[spec.sharing])
    if spec.contiguous:
        out.append("--contiguous")
    if spec.switches is not None:
        wait = "" if spec.switches_wait_s is None else "@" + secs_arg(spec.switches_wait_s)
        out.append(f"--switches={spec.switches}{wait}")
    return out


def _control(spec: JobSpec) -> list[str]:
    out: list[str] = []
    if spec.time_limit is not None:
        out.append(f"--time={time_arg(spec.time_limit)}")
    if spec.time_min is not None:
        out.append(f"--time-min={time_arg(spec.time_min)}")
    if spec.begin is not None:
        out.append(f"--begin={_epoch(spec.begin)}")
    if spec.deadline is not None:
        out.append(f"--deadline={_epoch(spec.deadline)}")
    if spec.array is not None:
        out.append(f"--array={spec.array.render()}")
    if spec.dependency is not None:
        out.append(f"--dependency={spec.dependency.render()}")
    if spec.kill_on_invalid_dep is not None:
        out.append(f"--kill-on-invalid-dep={'yes' if spec.kill_on_invalid_dep else 'no'}")
    if spec.hold:
        out.append("--hold")
    if spec.nice is not None:
        out.append(f"--nice={spec.nice}")
    if spec.priority is not None:
        out.append(f"--priority={spec.priority}")
    if spec.requeue is not None:
        out.append("--requeue" if spec.requeue else "--no-requeue")
    if spec.signal is not None:
        out.append(f"--signal={spec.signal.render()}")
    if spec.open_mode is not None:
        out.append(f"--open-mode={spec.open_mode}")
    if spec.mail_type is not None:
        out.append("--mail-type=" + (",".join(sorted(spec.mail_type)) or "NONE"))
    if spec.mail_user is not None:
        out.append(f"--mail-user={spec.mail_user}")
    return out


def _io(spec: JobSpec) -> list[str]:
    out = [f"--chdir={spec.workdir}"]
    for flag, path in (("--output", spec.stdout), ("--error", spec.stderr)):
        if path is not None:
            out.append(f"{flag}={path}")
    if spec.stdin is not None:
        out.append(f"--input={spec.stdin}")
    for flag, text in (
        ("--export", spec.export),
        ("--export-file", spec.export_file),
        ("--get-user-env", spec.get_user_env),
    ):
        if text is not None:
            out.append(f"{flag}={text}")
    if spec.uid is not None:
        out.append(f"--uid={spec.uid}")
    if spec.gid is not None:
        out.append(f"--gid={spec.gid}")
    return out


def _containers(spec: JobSpec) -> list[str]:
    out: list[str] = []
    for flag, text in (
        ("--container", spec.container),
        ("--container-image", spec.container_image),
        ("--container-workdir", spec.container_workdir),
        ("--container-name", spec.container_name),
        ("--burst", spec.burst),
    ):
        if text is not None:
            out.append(f"{flag}={text}")
    if spec.container_mounts:
        out.append("--container-mounts=" + ",".join(spec.container_mounts))
    if spec.gpu_memory_mb is not None:
        out.append(f"--gpu-memory={spec.gpu_memory_mb}")
    return out


def _extras(spec: JobSpec) -> list[str]:
    out = []
    for name, value in spec.extra:
        option = BY_LONG.get(name)
        needs_value = option is not None and option.arg is Arg.REQUIRED
        if value is None and not needs_value:
            out.append(f"--{name}")
        else:
            out.append(f"--{name}={value or ''}")
    return out


# A hetjob component inherits these from the others unless it sets them; when the parser
# left one empty (a past --begin, `-d 0`, `--array=`), the same words empty it again.
_PAST = "--begin=uts1000000"  # slurmctld (and Caldera) drop a begin time already past
_CLEARING = (("begin", _PAST), ("dependency", "--dependency="), ("array", "--array="))


def render_component(
    spec: JobSpec, clear: tuple[str, ...] = (), leaked_mem: bool = False
) -> list[str]:
    """The options of one component (its `het` is ignored); `clear` names the fields to
    empty explicitly and `leaked_mem` leaves --mem to sbatch's first pass (see
    render_argv)."""
    out = [f"--job-name={spec.name}"]
    out += [word for name, word in _CLEARING if name in clear and getattr(spec, name) is None]
    for flag, text in (
        ("--account", spec.account),
        ("--qos", spec.qos),
        ("--reservation", spec.reservation),
        ("--wckey", spec.wckey),
        ("--comment", spec.comment),
    ):
        if text is not None:
            out.append(f"{flag}={text}")
    if spec.partitions:
        out.append("--partition=" + ",".join(spec.partitions))
    if spec.clusters:
        out.append("--clusters=" + ",".join(spec.clusters))
    out += _resources(spec, leaked_mem)
    for part in (_placement, _control, _io, _containers, _extras):
        out += part(spec)
    return out


def _leaked_mem(components: tuple[JobSpec, ...]) -> list[bool]:
    """Components whose --mem is the one sbatch's first pass hands to every component.

    --mem is not reset between components but --mem-per-cpu/-gpu are, and the first pass
    marks what it sets as coming from the environment, which a later component's
    --mem-per-cpu may override. A component that had the leaked --mem and is followed by
    one with --mem-per-cpu/-gpu must therefore leave --mem out (saying it again would make
    the two options clash as in sbatch).
    """
    values = [c.mem_per_node_mb for c in components if c.mem_per_node_mb is not None]
    leak = values[-1] if values else None
    out = []
    for k, c in enumerate(components):
        later = components[k + 1 :]
        per_cpu_later = any(
            x.mem_per_cpu_mb is not None or x.mem_per_gpu_mb is not None for x in later
        )
        out.append(leak is not None and c.mem_per_node_mb == leak and per_cpu_later)
    return out


def render_argv(spec: JobSpec) -> list[str]:
    """sbatch's options for `spec` and its hetjob components, joined by `:`."""
    components = (spec, *spec.het)
    clear = tuple(
        name
        for name, _ in _CLEARING
        if len(components) > 1 and any(getattr(c, name) is not None for c in components)
    )
    leaked = _leaked_mem(components) if len(components) > 1 else [False]
    out: list[str] = []
    for k, component in enumerate(components):
        out += ([":"] if k else []) + render_component(component, clear, leaked[k])
    return out
