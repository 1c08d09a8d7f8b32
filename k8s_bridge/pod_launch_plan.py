"""srun's options and step layout inside a gang's pods (pure; shipped to the pods).

The launcher's srun (k8s_bridge/pod_launcher.py) reads its options and lays out the step
here, with Slurm 22.05's rules and messages as containers/srun_layout.py has them (that module
needs the caldera package, which the pods do not have: tests/unit/test_pod_launcher.py checks
both agree). Standard library only: launch.py ships this file in the namespace's launcher
ConfigMap.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from containers.srun_options import (
    ALIASES,
    SRUN_OPTIONS,
    allocation_notes,
    options_verdict,
    relative_refusal,
    srun_env_options,
    step_distribution,
)
from containers.step_alloc import megabytes

# long name: (short, argument: 0 none, 1 required, 2 optional)
_KINDS = {"none": 0, "required": 1, "optional": 2}
_OPTIONS: dict[str, tuple[str, int]] = {
    name: (short or "", _KINDS[arg]) for name, short, arg in SRUN_OPTIONS
}
_SHORT = {short: name for name, (short, _) in _OPTIONS.items() if short}
UNSUPPORTED = ("input",)  # a remote task's stdin: the agent protocol carries none


class SrunExit(Exception):
    """srun stops before any task starts: its lines and exit status (its
    stdout for --help, --usage and --version)."""

    def __init__(self, lines: Sequence[str], status: int = 1, stdout: bool = False) -> None:
        super().__init__("\n".join(lines))
        self.lines, self.status = tuple(lines), status
        self.stdout = stdout


def _bad(text: str) -> SrunExit:
    return SrunExit([f"srun: {text}", 'Try "srun --help" for more information'], 255)


def parse(
    argv: Sequence[str], env: Mapping[str, str] | None = None
) -> tuple[dict[str, str | None], list[str]]:
    """getopt_long without permutation: the environment's options (SLURM_EXACT...), then
    the command line's up to the command, last one wins."""
    opts = srun_env_options(env or {})
    i = 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "-":
        arg = argv[i]
        i += 1
        if arg == "--":
            break
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            found = [n for n in _OPTIONS if n == name] or [
                n for n in _OPTIONS if n.startswith(name)
            ]
            if not found:
                raise _bad(f"unrecognized option '{arg}'")
            if len(found) > 1:
                raise _bad(f"option '{arg}' is ambiguous")
            name, kind = found[0], _OPTIONS[found[0]][1]
            if eq and kind == 0:
                raise _bad(f"option '--{name}' doesn't allow an argument")
            if not eq and kind == 1:
                if i >= len(argv):
                    raise _bad(f"option '--{name}' requires an argument")
                value, i = argv[i], i + 1
            opts[ALIASES.get(name, name)] = value if eq or kind == 1 else None
            continue
        j = 1
        while j < len(arg):
            letter = arg[j]
            if letter not in _SHORT:
                raise _bad(f"invalid option -- '{letter}'")
            name = _SHORT[letter]
            kind = _OPTIONS[name][1]
            rest = arg[j + 1 :]
            if kind == 0:
                opts[name] = None
                j += 1
                continue
            if rest:
                opts[name] = rest
            elif kind == 1:
                if i >= len(argv):
                    raise _bad(f"option requires an argument -- '{letter}'")
                opts[name], i = argv[i], i + 1
            else:
                opts[name] = None
            break
    verdict = options_verdict(opts, (env or {}).get("SLURM_JOB_UID", ""))
    if verdict is not None:
        raise SrunExit(*verdict)
    for name in ("mem", "mem-per-cpu"):
        if name in opts and megabytes(opts[name] or "") is None:
            raise SrunExit([f"srun: error: Invalid --{name} specification"], 255)
    if not argv[i:]:
        raise SrunExit(["srun: fatal: No command given to execute."])
    return opts, list(argv[i:])


def expand(hostlist: str) -> list[str]:
    """`caldera-42-[0-1,3],x` -> names (one bracket per name, zero padding kept)."""
    out: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\][^,]*)?", hostlist):
        m = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", part)
        if not m:
            out.append(part)
            continue
        for rng in m.group(2).split(","):
            lo, _, hi = rng.partition("-")
            for n in range(int(lo), int(hi or lo) + 1):
                out.append(f"{m.group(1)}{str(n).zfill(len(lo))}{m.group(3)}")
    return out


def compress(names: Sequence[str]) -> str:
    """Slurm's compressed host list for names with a numeric tail (`x-[0-1]`)."""
    groups: dict[tuple[str, int], list[int]] = {}
    for name in names:
        m = re.fullmatch(r"(.*?)(\d*)", name)
        prefix, digits = (m.group(1), m.group(2)) if m else (name, "")
        groups.setdefault((prefix, len(digits) if digits else -1), []).append(
            int(digits) if digits else -1
        )
    out = []
    for (prefix, width), nums in groups.items():
        if width < 0:
            out.append(prefix)
            continue
        ranges, start = [], nums[0]
        for k, n in enumerate(nums):
            if k + 1 == len(nums) or nums[k + 1] != n + 1:
                lo, hi = str(start).zfill(width), str(n).zfill(width)
                ranges.append(lo if start == n else f"{lo}-{hi}")
                start = nums[k + 1] if k + 1 < len(nums) else n
        text = ",".join(ranges)
        out.append(f"{prefix}{text}" if len(nums) == 1 else f"{prefix}[{text}]")
    return ",".join(out)


def counts(text: str) -> list[int]:
    """`2(x3),1` -> [2, 2, 2, 1]."""
    out: list[int] = []
    for part in text.split(","):
        value, _, reps = part.partition("(x")
        out.extend([int(value)] * (int(reps.rstrip(")")) if reps else 1))
    return out


def compress_counts(values: Sequence[int]) -> str:
    """[2, 2, 2, 1] -> `2(x3),1`."""
    parts: list[str] = []
    for v in values:
        if parts and parts[-1].split("(")[0] == str(v):
            reps = int(parts[-1][len(str(v)) + 2 : -1]) if "(" in parts[-1] else 1
            parts[-1] = f"{v}(x{reps + 1})"
        else:
            parts.append(str(v))
    return ",".join(parts)


def _number(value: str | None, option: str, least: int) -> int:
    text = (value or "").strip()
    if not text.isdigit() or int(text) < least:
        raise SrunExit([f'srun: error: Invalid numeric value "{value}" for --{option}.'])
    return int(text)


NO_CPU_BINDING = "srun: cluster configuration lacks support for cpu binding"


def plan(
    opts: Mapping[str, str | None], env: Mapping[str, str]
) -> tuple[list[str], list[int], int, list[str]]:
    """(step nodes, tasks per node, cpus per task, warnings), or SrunExit. Any --cpu-bind
    first says that nothing is bound (Slurm with TaskPlugin task/none, as the local runner)."""
    notes = [NO_CPU_BINDING] if "cpu-bind" in opts else []
    try:
        nodes, layout, cpt, warnings = _plan(opts, env)
    except SrunExit as exc:
        raise SrunExit([*notes, *exc.lines], exc.status) from None
    return nodes, layout, cpt, [*notes, *warnings]


def _plan(
    opts: Mapping[str, str | None], env: Mapping[str, str]
) -> tuple[list[str], list[int], int, list[str]]:
    nodes_all = expand(env.get("SLURM_JOB_NODELIST") or env.get("SLURMD_NODENAME", ""))
    nodes_all = nodes_all or ["localhost"]  # (as the local srun: a job always names some)
    try:
        cpus_all = counts(env.get("SLURM_JOB_CPUS_PER_NODE", ""))
        tasks_all = counts(env.get("SLURM_TASKS_PER_NODE", ""))
    except ValueError:
        cpus_all, tasks_all = [], []
    cpus_all = cpus_all if len(cpus_all) == len(nodes_all) else [0] * len(nodes_all)
    job_id = env.get("SLURM_JOB_ID", "0")
    refused = f"srun: error: Unable to create step for job {job_id}: "
    env_cpt = env.get("SLURM_CPUS_PER_TASK", "1")
    cpt = int(env_cpt) if env_cpt.isdigit() and int(env_cpt) > 0 else 1
    if "cpus-per-task" in opts:
        cpt = _number(opts["cpus-per-task"], "cpus-per-task", 1)
    wanted = expand(opts.get("nodelist") or "")
    nnodes_env = env.get("SLURM_NNODES", "")
    if "nodes" in opts:
        count = _number((opts["nodes"] or "").split("-")[0], "nodes", 0) or len(nodes_all)
    else:
        count = (int(nnodes_env) if nnodes_env.isdigit() else 0) or len(nodes_all)
    if count > len(nodes_all):
        raise SrunExit([f"srun: error: Only allocated {len(nodes_all)} nodes asked for {count}"])
    per_node = None
    if "ntasks-per-node" in opts:
        per_node = _number(opts["ntasks-per-node"], "ntasks-per-node", 1)
    env_ntasks = env.get("SLURM_NTASKS", "")
    if "ntasks" in opts:
        ntasks = _number(opts["ntasks"], "ntasks", 1)
    elif env_ntasks.isdigit():
        ntasks = int(env_ntasks)
    else:
        ntasks = count * (per_node or 1)
    warnings = []
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
    first, then, fails = allocation_notes(opts)
    warnings = [*first, *warnings, *then]
    if fails:
        raise SrunExit(warnings)
    relative = _number(opts["relative"], "relative", 0) if "relative" in opts else 0
    too_far = relative_refusal(relative, count, len(nodes_all), "nodes" in opts)
    if too_far:
        raise SrunExit([*warnings, too_far])
    if any(n not in nodes_all for n in wanted):  # slurmctld's, after srun's warnings
        raise SrunExit([*warnings, refused + "Requested node configuration is not available"])
    others = [n for n in nodes_all[relative:] if n not in wanted]
    chosen = set(wanted) | set(others[: max(count - len(wanted), 0)])
    nodes = [n for n in nodes_all if n in chosen]
    if per_node is not None:
        layout = [per_node] * len(nodes)
    elif nodes == nodes_all and ntasks == sum(tasks_all) and len(tasks_all) == len(nodes):
        layout = list(tasks_all)
    else:
        base, extra = divmod(ntasks, len(nodes))
        layout = [base + (1 if k < extra else 0) for k in range(len(nodes))]
    cpus = dict(zip(nodes_all, cpus_all, strict=True))
    over = "overcommit" not in opts and any(
        cpus[n] and t * cpt > cpus[n] for n, t in zip(nodes, layout, strict=True)
    )
    if over:
        raise SrunExit([refused + "More processors requested than permitted"])
    return nodes, layout, cpt, warnings


def task_env(
    base: Mapping[str, str],
    *,
    step_id: int,
    nodes: Sequence[str],
    layout: Sequence[int],
    rank: int,
    cpus_per_task: int | None,
    opts: Mapping[str, str | None],
) -> dict[str, str]:
    """One task's environment: srun's (SLURM_STEP_*, the task's ids, as
    gateway.compat.job_env.task_environment) and its node's (SLURMD_NODENAME, HOSTNAME,
    SLURM_CPUS_ON_NODE, CALDERA_RANK: the pod the task runs in)."""
    nodeid = localid = 0
    first = 0
    for index, count in enumerate(layout):
        if rank < first + count:
            nodeid, localid = index, rank - first
            break
        first += count
    env = dict(base)
    ntasks = sum(layout)
    env["SLURM_STEP_ID"] = env["SLURM_STEPID"] = str(step_id)
    env["SLURM_STEP_NUM_TASKS"] = str(ntasks)
    env["SLURM_STEP_NUM_NODES"] = str(len(nodes))
    env["SLURM_STEP_NODELIST"] = compress(nodes)
    env["SLURM_STEP_TASKS_PER_NODE"] = compress_counts(layout)
    env["SLURM_NTASKS"] = env["SLURM_NPROCS"] = str(ntasks)
    env["SLURM_DISTRIBUTION"] = step_distribution(opts.get("distribution"), ntasks, len(nodes))
    env["SLURM_PROCID"] = str(rank)
    env["SLURM_LOCALID"] = str(localid)
    env["SLURM_NODEID"] = str(nodeid)
    env["SLURM_GTIDS"] = ",".join(str(first + i) for i in range(layout[nodeid]))
    if "SLURM_JOB_CPUS_PER_NODE" in env:  # srun's het-job name for the (one) allocation
        env["SLURM_JOB_CPUS_PER_NODE_PACK_GROUP_0"] = env["SLURM_JOB_CPUS_PER_NODE"]
    if cpus_per_task is not None:
        env["SLURM_CPUS_PER_TASK"] = str(cpus_per_task)
    if "label" in opts:
        env["SLURM_LABELIO"] = "1"
    if opts.get("mpi") is not None:
        env["SLURM_MPI_TYPE"] = str(opts["mpi"])
    node = nodes[nodeid]
    job_nodes = expand(base.get("SLURM_JOB_NODELIST", "")) or [node]
    env["SLURMD_NODENAME"] = env["HOSTNAME"] = env["SLURM_TOPOLOGY_ADDR"] = node
    if node in job_nodes:
        index = job_nodes.index(node)
        env["CALDERA_RANK"] = str(index)
        try:
            cpus = counts(base.get("SLURM_JOB_CPUS_PER_NODE", ""))
            env["SLURM_CPUS_ON_NODE"] = str(cpus[index])
        except (ValueError, IndexError):
            pass
    return env


def task_umask(env: Mapping[str, str]) -> int:
    """The umask slurmstepd gives a task: its SLURM_UMASK (octal, srun's own umask unless
    the caller set one); -1 (unchanged, Popen's default) when absent or not octal."""
    try:
        mask = int(env.get("SLURM_UMASK", ""), 8)
    except ValueError:
        return -1
    return mask if 0 <= mask <= 0o777 else -1


def describe_failures(node: str, statuses: Mapping[int, int]) -> list[str]:
    """srun's `error: NODE: task(s) X: ...` lines for one node (wait statuses by rank)."""
    names = {9: "Killed", 15: "Terminated", 11: "Segmentation fault", 6: "Aborted"}
    names.update({2: "Interrupt", 7: "Bus error"})
    groups: dict[str, list[int]] = {}
    for rank, status in statuses.items():
        if status & 0x7F:
            text = names.get(status & 0x7F, f"Signal {status & 0x7F}")
        elif status:
            text = f"Exited with exit code {(status >> 8) & 0xFF}"
        else:
            continue
        groups.setdefault(text, []).append(rank)
    lines = []
    for text, ranks in groups.items():
        label = "task" if len(ranks) == 1 else "tasks"
        span = (
            f"{ranks[0]}-{ranks[-1]}"
            if len(ranks) > 1 and ranks == list(range(ranks[0], ranks[-1] + 1))
            else ",".join(map(str, ranks))
        )
        lines.append(f"srun: error: {node}: {label} {span}: {text}")
    return lines


def srun_status(statuses: Sequence[int]) -> int:
    """srun's exit code: the highest task exit code, 128+N for a task killed by signal N."""
    codes = [128 + (s & 0x7F) if s & 0x7F else (s >> 8) & 0xFF for s in statuses]
    return max(codes, default=0)


def parse_hosts(text: str) -> dict[str, str]:
    """A hosts file's `<ip> <name>...` lines -> name: ip."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        fields = line.split("#")[0].split()
        out.update((name, fields[0]) for name in fields[1:])
    return out
