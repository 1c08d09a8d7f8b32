"""srun inside an allocation, as Slurm 22.05's srun reads it: options, then the step's layout
on the job's nodes, with srun's warnings and refusals (checked against the real test
cluster: `srun -n 1` in a 2-node job warns and runs on one node; `srun -n 8` in a 4-CPU job
is "More processors requested than permitted").

Pure: argv and the batch environment in, a `Step` (or `SrunExit`) out. containers/srun.py
runs it. Every node of a local job is a virtual node of this machine, so a multi-node step
runs all its tasks here, each with its own node's SLURMD_NODENAME, SLURM_NODEID and
SLURM_LOCALID.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from containers.srun_gres import check_gres
from containers.srun_options import (
    ALIASES,
    SRUN_OPTIONS,
    allocation_notes,
    options_verdict,
    relative_refusal,
    srun_env_options,
)
from gateway.compat.getopt import CmdSpec, scan
from gateway.compat.hostlist import expand
from gateway.compat.optypes import Arg
from gateway.compat.quantity import str_to_mbytes

__all__ = [
    "TOPOLOGY_VAR",
    "Allocation",
    "SrunExit",
    "Step",
    "allocation_from_env",
    "node_env",
    "plan_step",
    "topology_addresses",
]

# the SLURM_TOPOLOGY_ADDR of each of the job's nodes, in SLURM_JOB_NODELIST's order, space
# separated (set by the local backend when slurm.conf has a switch tree)
TOPOLOGY_VAR = "CALDERA_TOPOLOGY_ADDRS"

_ARGS = {"none": Arg.NONE, "required": Arg.REQUIRED, "optional": Arg.OPTIONAL}
_SPECS = tuple(
    CmdSpec(name, short, _ARGS[arg], ALIASES.get(name, name)) for name, short, arg in SRUN_OPTIONS
)
# slurm_verify_cpu_bind's words in 22.05 (case-insensitive; `boards` and `off` are not)
_CPU_BIND_WORDS = frozenset(
    {
        *("q", "quiet", "v", "verbose", "one_thread", "no", "none", "rank", "rank_ldom"),
        *("sockets", "socket", "cores", "core", "threads", "thread", "ldoms", "ldom"),
    }
)
# these take a list after them (map_cpu:0,1)
_CPU_BIND_MAPS: tuple[str, ...] = ("map_cpu", "mapcpu", "mask_cpu", "maskcpu", "map_ldom")
_CPU_BIND_MAPS += ("mapldom", "mask_ldom", "maskldom")
# the name each spelling goes by in srun's errors
_CPU_BIND_NAMES = {
    **{k: "map_cpu" for k in ("map_cpu", "mapcpu")},
    **{k: "mask_cpu" for k in ("mask_cpu", "maskcpu")},
    **{k: "map_ldom" for k in ("map_ldom", "mapldom")},
    **{k: "mask_ldom" for k in ("mask_ldom", "maskldom")},
}
# what srun prints for any --cpu-bind when TaskPlugin is task/none (the test cluster's, and
# the local backend's: it binds nothing)
NO_CPU_BINDING = "srun: cluster configuration lacks support for cpu binding"


class SrunExit(Exception):
    """srun stops before any task starts: the lines it prints and its exit status (its
    stdout for --help, --usage and --version)."""

    def __init__(self, lines: Sequence[str], status: int = 1, stdout: bool = False) -> None:
        super().__init__("\n".join(lines))
        self.lines = tuple(lines)
        self.status = status
        self.stdout = stdout


@dataclass(frozen=True, slots=True)
class Allocation:
    """The job's allocation, as the batch environment describes it."""

    job_id: str
    nodes: tuple[str, ...]
    cpus_per_node: tuple[int, ...]
    tasks_per_node: tuple[int, ...]
    ntasks: int | None  # SLURM_NTASKS: what a step without -n inherits
    cpus_per_task: int


@dataclass(frozen=True, slots=True)
class Step:
    """One step: its command, options, and its tasks on nodes."""

    command: tuple[str, ...]
    nodes: tuple[str, ...]
    tasks_per_node: tuple[int, ...]
    cpus_per_task: int
    options: Mapping[str, str | None]
    warnings: tuple[str, ...] = field(default=())

    @property
    def ntasks(self) -> int:
        """All tasks of the step."""
        return sum(self.tasks_per_node)

    def node_of(self, rank: int) -> tuple[int, int]:
        """(node index, local id) of a task (block distribution)."""
        first = 0
        for index, count in enumerate(self.tasks_per_node):
            if rank < first + count:
                return index, rank - first
            first += count
        raise IndexError(rank)


def _counts(text: str) -> list[int]:
    """`2(x3),1` -> [2, 2, 2, 1] (Slurm's compressed counts)."""
    out: list[int] = []
    for part in text.split(","):
        value, _, reps = part.partition("(x")
        out.extend([int(value)] * (int(reps.rstrip(")")) if reps else 1))
    return out


def topology_addresses(env: Mapping[str, str]) -> dict[str, str]:
    """The job's nodes' SLURM_TOPOLOGY_ADDR (none on a site without a switch tree)."""
    nodes = expand(env.get("SLURM_JOB_NODELIST", ""))
    return dict(zip(nodes, env.get(TOPOLOGY_VAR, "").split(), strict=False))


def node_env(addresses: Mapping[str, str], node: str) -> dict[str, str]:
    """What a task's node sets in its environment, as that node's slurmd would: its name and
    SLURM_TOPOLOGY_ADDR (its switches and name; the name alone without a switch tree)."""
    return {"SLURMD_NODENAME": node, "SLURM_TOPOLOGY_ADDR": addresses.get(node, node)}


def allocation_from_env(env: Mapping[str, str]) -> Allocation:
    """The allocation a batch script's srun runs in (SLURM_JOB_* of the batch step)."""
    nodes = tuple(expand(env.get("SLURM_JOB_NODELIST") or env.get("SLURMD_NODENAME", "")))
    nodes = nodes or ("localhost",)
    try:
        cpus = _counts(env.get("SLURM_JOB_CPUS_PER_NODE", ""))
    except ValueError:
        cpus = []
    try:
        tasks = _counts(env.get("SLURM_TASKS_PER_NODE", ""))
    except ValueError:
        tasks = []
    ntasks = env.get("SLURM_NTASKS", "")
    cpt = env.get("SLURM_CPUS_PER_TASK", "1")
    return Allocation(
        job_id=env.get("SLURM_JOB_ID", "0"),
        nodes=nodes,
        cpus_per_node=tuple(cpus) if len(cpus) == len(nodes) else (0,) * len(nodes),
        tasks_per_node=tuple(tasks) if len(tasks) == len(nodes) else (),
        ntasks=int(ntasks) if ntasks.isdigit() else None,
        cpus_per_task=int(cpt) if cpt.isdigit() and int(cpt) > 0 else 1,
    )


def _number(value: str | None, option: str, least: int) -> int:
    text = (value or "").strip()
    if not text.isdigit() or int(text) < least:
        raise SrunExit([f'srun: error: Invalid numeric value "{value}" for --{option}.'])
    return int(text)


def _split(tasks: int, nodes: int) -> tuple[int, ...]:
    base, extra = divmod(tasks, nodes)
    return tuple(base + (1 if i < extra else 0) for i in range(nodes))


def parse(
    argv: Sequence[str], env: Mapping[str, str] | None = None
) -> tuple[dict[str, str | None], tuple[str, ...]]:
    """Options (the environment's, then the command line's; last one wins, as srun's) and
    the command; srun's errors as it prints them."""
    scanned = scan(["srun", *argv], _SPECS, permute=False)
    if scanned.error is not None:
        raise SrunExit(
            [f"srun: {scanned.error.text}", 'Try "srun --help" for more information'], 255
        )
    options = srun_env_options(env or {})
    options.update((str(spec.val), value) for spec, value in scanned.items)
    verdict = options_verdict(options, (env or {}).get("SLURM_JOB_UID", ""))
    if verdict is not None:
        raise SrunExit(*verdict)
    _check_values(options)
    if not scanned.operands:
        raise SrunExit(["srun: fatal: No command given to execute."])
    return options, tuple(scanned.operands)


def _check_values(options: Mapping[str, str | None]) -> None:
    """srun's checks of --no-kill, --jobid, --cpu-bind and memory values (as on 22.05)."""
    kill = options.get("no-kill")
    if "no-kill" in options and kill is not None and kill.lower() not in ("set", "off", "no"):
        raise SrunExit(["srun: error: Invalid --no-kill specification"], 255)
    if "jobid" in options:
        _signed_number(options["jobid"], "jobid")
    if "cpu-bind" in options:
        _check_cpu_bind(options["cpu-bind"] or "")
    for name in ("mem", "mem-per-cpu"):
        if name in options and str_to_mbytes(options[name] or "") is None:
            raise SrunExit([f"srun: error: Invalid --{name} specification"], 255)


def _is_value(text: str) -> bool:
    """slurm_verify_cpu_bind's _isvalue: a digit, or hex digits up to a `,` or the end."""
    if text[:1].isdigit():
        return True
    rest = text.lstrip("0123456789abcdefABCDEF")
    return rest == "" or rest.startswith(",")


def _cpu_bind_words(text: str) -> list[str]:
    """The words of a --cpu-bind value: a `,` separates words unless a value follows it,
    so mask_cpu:E0,0E stays one word (hex without 0x included, as Slurm reads it)."""
    words, start = [], 0
    for i, char in enumerate(text):
        if char == "," and not _is_value(text[i + 1 :]):
            words.append(text[start:i])
            start = i + 1
    words.append(text[start:])
    return words


def _check_cpu_bind(text: str) -> None:
    """slurm_verify_cpu_bind (22.05): keywords, and map/mask lists of numbers (decimal for
    maps, hex with or without 0x for masks, each with an optional `*count`)."""
    for word in _cpu_bind_words(text):
        low = word.lower()
        if low in _CPU_BIND_WORDS:
            continue
        kind = next((k for k in _CPU_BIND_MAPS if low.startswith(k)), None)
        if kind is None:
            _cpu_bind_fails(f'unrecognized --cpu-bind argument "{word}"')
            return
        name = _CPU_BIND_NAMES[kind]
        parts = re.split("[:=]", word)
        items = parts[1] if len(parts) > 1 else ""
        if not items:
            _cpu_bind_fails(f'missing list for "--cpu-bind={name}:<list>"')
        for item in filter(None, items.split(",")):
            _check_bind_item(item, name)


def _check_bind_item(item: str, name: str) -> None:
    """_expand_mult's checks of one `value[*count]` of a map or mask list."""
    mask = name.startswith("mask")
    if mask and item.startswith("0x"):
        item = item[2:]
    value, star, count = item.partition("*")
    if star:
        bad = next((c for c in count if not c.isdigit()), None)
        if bad is not None:
            _cpu_bind_fails(
                f"Failed to validate number: *{count}, the offending character is {bad}"
            )
        if not count or int(count) <= 0:
            _cpu_bind_fails(f"Invalid {name} multiplier: {count}")
    digits = "0123456789abcdefABCDEF" if mask else "0123456789"
    bad = next((c for c in value if c not in digits), None)
    if bad is not None:
        _cpu_bind_fails(f"Failed to validate number: {value}, the offending character is {bad}")


def _cpu_bind_fails(error: str) -> None:
    raise SrunExit(
        [
            NO_CPU_BINDING,
            f"srun: error: {error}",
            "srun: fatal: Failed to parse --cpu-bind= values.",
        ]
    )


def _signed_number(value: str | None, option: str) -> int:
    """parse_int(..., positive=true): a whole number above 0, or srun exits."""
    text = value or ""
    if not re.fullmatch(r"\s*[+-]?\d+", text) or int(text) <= 0:
        raise SrunExit([f'srun: error: Invalid numeric value "{value}" for --{option}.'])
    return int(text)


def plan_step(argv: Sequence[str], env: Mapping[str, str]) -> Step:
    """The step srun would create for `argv` in the allocation `env` describes (a step
    without -N takes SLURM_NNODES, as srun reads it from the environment). A --cpu-bind's
    line about the missing task plugin comes first, before any warning or refusal."""
    options, command = parse(argv, env)
    notes = (NO_CPU_BINDING,) if "cpu-bind" in options else ()
    try:
        step = _plan(options, command, env)
    except SrunExit as exc:
        raise SrunExit([*notes, *exc.lines], exc.status) from None
    return Step(
        step.command,
        step.nodes,
        step.tasks_per_node,
        step.cpus_per_task,
        step.options,
        (*notes, *step.warnings),
    )


def _plan(options: dict[str, str | None], command: tuple[str, ...], env: Mapping[str, str]) -> Step:
    nnodes_env = env.get("SLURM_NNODES")
    alloc = allocation_from_env(env)
    if "jobid" in options and str(_signed_number(options["jobid"], "jobid")) != alloc.job_id:
        job = options["jobid"]
        raise SrunExit(
            [
                f"srun: error: Unable to confirm allocation for job {job}: "
                "Invalid job id specified",
                f"srun: Check SLURM_JOB_ID environment variable. Expired or invalid job {job}",
            ]
        )
    refused = f"srun: error: Unable to create step for job {alloc.job_id}: "
    warnings: list[str] = []
    cpt = (
        _number(options["cpus-per-task"], "cpus-per-task", 1)
        if "cpus-per-task" in options
        else alloc.cpus_per_task
    )
    wanted = tuple(expand(options["nodelist"] or "")) if options.get("nodelist") else ()
    if "nodes" in options:
        count = _number((options["nodes"] or "").split("-")[0], "nodes", 0) or len(alloc.nodes)
    elif nnodes_env and nnodes_env.isdigit():
        count = int(nnodes_env) or len(alloc.nodes)
    else:
        count = len(alloc.nodes)
    if count > len(alloc.nodes):
        raise SrunExit([f"srun: error: Only allocated {len(alloc.nodes)} nodes asked for {count}"])
    per_node = (
        _number(options["ntasks-per-node"], "ntasks-per-node", 1)
        if "ntasks-per-node" in options
        else None
    )
    if "ntasks" in options:
        ntasks = _number(options["ntasks"], "ntasks", 1)
    elif alloc.ntasks is not None:
        ntasks = alloc.ntasks
    else:
        ntasks = count * (per_node or 1)
    if ntasks < count:
        warnings.append(
            f"srun: Warning: can't run {ntasks} processes on {count} nodes, "
            f"setting nnodes to {ntasks}"
        )
        count = ntasks
    if per_node is not None and per_node * count != ntasks:
        warnings.append(
            f"srun: Warning: can't honor --ntasks-per-node set to {per_node} which doesn't "
            f"match the requested tasks {ntasks} with the number of requested nodes {count}. "
            "Ignoring --ntasks-per-node."
        )
        per_node = None
    first, then, fails = allocation_notes(options)
    warnings = [*first, *warnings, *then]
    if fails:
        raise SrunExit(warnings)
    relative = _number(options["relative"], "relative", 0) if "relative" in options else 0
    too_far = relative_refusal(relative, count, len(alloc.nodes), "nodes" in options)
    if too_far:
        raise SrunExit([*warnings, too_far])
    if any(name not in alloc.nodes for name in wanted):  # slurmctld's, after srun's warnings
        raise SrunExit([*warnings, refused + "Requested node configuration is not available"])
    others = [n for n in alloc.nodes[relative:] if n not in wanted]
    chosen = set(wanted) | set(others[: max(count - len(wanted), 0)])
    nodes = tuple(n for n in alloc.nodes if n in chosen)
    if per_node is not None:
        layout = (per_node,) * len(nodes)
    elif nodes == alloc.nodes and ntasks == sum(alloc.tasks_per_node):
        layout = alloc.tasks_per_node  # the job's own layout (e.g. Slurm's 1,2(x2))
    else:
        layout = _split(ntasks, len(nodes))
    gres_refused = check_gres(options, env, refused, len(nodes))
    if gres_refused:
        raise SrunExit([*warnings, *gres_refused])
    cpus = dict(zip(alloc.nodes, alloc.cpus_per_node, strict=True))
    over = "overcommit" not in options and any(
        cpus[n] and tasks * cpt > cpus[n] for n, tasks in zip(nodes, layout, strict=True)
    )
    if over:
        raise SrunExit([refused + "More processors requested than permitted"])
    return Step(command, nodes, layout, cpt, options, tuple(warnings))
