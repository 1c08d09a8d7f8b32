"""The environment of a Slurm batch job and of its srun tasks, as Slurm 22.05 builds them.

Pure functions: `JobSpec`/`Job`/placement in, `dict[str, str]` out. Checked against what a real
Slurm 22.05 cluster sets (golden files in tests/unit/golden/job_env/). Slurm builds the
environment in layers, and so does `batch_environment`, each layer overwriting the previous:

1. sbatch: the user's environment filtered by `--export` (`ALL` by default; `NONE` keeps only
   `SLURM*` names; a list `[ALL|NONE,]NAME[=value],...` copies or sets names and always keeps
   `SLURM_*`), plus what sbatch itself exports: SLURM_SUBMIT_DIR/HOST, SLURM_PRIO_PROCESS,
   SLURM_OPEN_MODE, SLURM_JOB_DEPENDENCY, SLURM_EXPORT_ENV, SLURM_GET_USER_ENV, and the
   request's sizes (SLURM_NTASKS, SLURM_CPUS_PER_TASK, SLURM_GPUS*, SLURM_MEM_PER_GPU, ...).
2. slurmctld: SLURM_ARRAY_TASK_COUNT/MIN/MAX/STEP.
3. slurmd, when SLURM_GET_USER_ENV is set: the user's login environment fills missing names.
4. slurmd's batch launch (`env_array_for_batch_job`): job id, node list, CPUs per node, tasks
   per node, memory, account, QOS, ENVIRONMENT=BATCH, HOSTNAME.
5. slurmstepd: rank ids, user, node name, topology address, GPUs (gres/gpu), TMPDIR; it
   applies sbatch's SLURM_UMASK to the batch script and removes it (`submit_umask`), and
   likewise the submitter's soft resource limits, SLURM_RLIMIT_* (`submit_rlimits`: Slurm's
   default PropagateResourceLimits=ALL).

Not set (22.05 does not): SLURM_JOB_START_TIME, SLURM_JOB_END_TIME. Not set (connection
details of a real controller): SLURM_WORKING_CLUSTER, SLURM_SRUN_COMM_*.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from gateway.model.backend import Launch, RankPlacement
from gateway.model.jobspec import JobSpec
from gateway.model.values import GresItem

__all__ = [
    "GPU_VISIBILITY_VARS",
    "TaskIds",
    "apply_export",
    "batch_environment",
    "compress_counts",
    "compress_hostlist",
    "export_requests_user_env",
    "split_export",
    "submit_rlimits",
    "submit_umask",
    "task_environment",
    "tasks_per_node",
]

# Set by Slurm's gres/gpu plugin to the GPU indices of the node (task/none: no remapping).
GPU_VISIBILITY_VARS = (
    "CUDA_VISIBLE_DEVICES",
    "GPU_DEVICE_ORDINAL",
    "ROCR_VISIBLE_DEVICES",
    "ZE_AFFINITY_MASK",
)
_NODE_ALIASES_UNSET = "(null)"


# --- --export -------------------------------------------------------------------------


def split_export(rules: str) -> list[str]:
    """`find_quote_token` on commas: a comma inside single or double quotes does not split."""
    tokens: list[str] = []
    current: list[str] = []
    quote = ""
    for ch in rules:
        if quote:
            current.append(ch)
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
            current.append(ch)
        elif ch == ",":
            tokens.append("".join(current))
            current = []
        else:
            current.append(ch)
    tokens.append("".join(current))
    return [t for t in tokens if t]


def _is_all(rules: str | None) -> bool:
    return rules is None or rules.strip().upper() == "ALL"


def apply_export(rules: str | None, env: Mapping[str, str]) -> dict[str, str]:
    """The environment sbatch sends for `--export=rules` (None: ALL), from the caller's `env`.

    - `ALL` (or no rule): everything;
    - `NONE`: only names starting with `SLURM` (`env_array_merge_slurm`);
    - a list: `ALL` merges everything, `NAME=value` sets, `NAME` copies when present (other
      words, `NONE` included, copy nothing), then every `SLURM_*` name is kept.
    Idempotent: applying the same rule to its own result gives the same result.
    """
    if _is_all(rules):
        return dict(env)
    assert rules is not None
    if rules.strip().upper() == "NONE":
        return {k: v for k, v in env.items() if k.startswith("SLURM")}
    out: dict[str, str] = {}
    for token in split_export(rules):
        if token.upper() == "ALL":
            out.update(env)
        elif "=" in token:
            name, value = token.split("=", 1)
            out[name] = value
        elif token in env:
            out[token] = env[token]
    out.update({k: v for k, v in env.items() if k.startswith("SLURM_")})
    return out


def export_requests_user_env(spec: JobSpec) -> bool:
    """Whether sbatch asks slurmd to load the user's login environment (SLURM_GET_USER_ENV)."""
    return not _is_all(spec.export) or spec.get_user_env is not None


# --- compact forms ------------------------------------------------------------------------


def compress_counts(counts: Iterable[int]) -> str:
    """Slurm's `uint32_compressed_to_str`: `[2, 2, 2, 1]` -> `2(x3),1`."""
    parts: list[str] = []
    prev: int | None = None
    reps = 0
    for value in [*counts, None]:
        if value == prev:
            reps += 1
            continue
        if prev is not None:
            parts.append(f"{prev}(x{reps})" if reps > 1 else str(prev))
        prev, reps = value, 1
    return ",".join(parts)


def _split_name(name: str) -> tuple[str, str]:
    i = len(name)
    while i > 0 and name[i - 1].isdigit():
        i -= 1
    return name[:i], name[i:]


def compress_hostlist(names: Sequence[str]) -> str:
    """`node01,node02,node04,gpu1` -> `node[01-02,04],gpu1` (order of first appearance)."""
    groups: dict[tuple[str, int], list[int]] = {}
    order: list[tuple[str, int] | str] = []
    for name in names:
        prefix, digits = _split_name(name)
        if not digits:
            if name not in order:
                order.append(name)
            continue
        key = (prefix, len(digits))
        if key not in groups:
            groups[key] = []
            order.append(key)
        if int(digits) not in groups[key]:
            groups[key].append(int(digits))
    out: list[str] = []
    for item in order:
        if isinstance(item, str):
            out.append(item)
            continue
        prefix, width = item
        nums = sorted(groups[item])
        ranges: list[str] = []
        start = prev = nums[0]
        for n in [*nums[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            lo, hi = str(start).zfill(width), str(prev).zfill(width)
            ranges.append(lo if start == prev else f"{lo}-{hi}")
            if n is not None:
                start = prev = n
        if len(nums) == 1:
            out.append(f"{prefix}{ranges[0]}")
        else:
            out.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(out)


# --- sizes ----------------------------------------------------------------------------------


def _explicit_cpus_per_task(spec: JobSpec) -> int | None:
    """`-c` as the user gave it; None when derived by the controller from --cpus-per-gpu."""
    cpt = spec.cpus_per_task
    if cpt is None or spec.cpus_per_gpu is None or not spec.gpus_per_task:
        return cpt
    derived = spec.cpus_per_gpu * sum(g.count for g in spec.gpus_per_task)
    return None if cpt == derived else cpt


def tasks_per_node(spec: JobSpec, placement: Sequence[RankPlacement]) -> list[int]:
    """Tasks on each node of the batch layout: the placement's counts when -n was given,
    else as many tasks as CPUs allow (CPUs // cpus-per-task), as Slurm lays out the batch job.
    """
    if spec.ntasks is not None:
        return [p.tasks for p in placement]
    cpt = spec.cpus_per_task or 1
    return [max(1, p.cpus // cpt) for p in placement]


def _gpu_request(items: Sequence[GresItem]) -> str:
    """`--gpus*` values as sbatch exports them: `[type:]count`, comma separated."""
    return ",".join(f"{g.type}:{g.count}" if g.type else str(g.count) for g in items)


def _array_step(spec: JobSpec) -> int:
    """SLURM_ARRAY_TASK_STEP: `atoi` of what follows the first `:` of the array string."""
    assert spec.array is not None
    text = spec.array.render()
    if ":" not in text:
        return 1
    digits = ""
    for ch in text.split(":", 1)[1]:
        if not ch.isdigit():
            break
        digits += ch
    return int(digits) if digits else 0


# --- layers ---------------------------------------------------------------------------------


def _sbatch_layer(spec: JobSpec) -> dict[str, str]:
    """What sbatch adds to the request's environment after filtering."""
    env: dict[str, str] = {}
    if spec.open_mode:
        env["SLURM_OPEN_MODE"] = "a" if spec.open_mode == "append" else "t"
    if spec.dependency is not None and spec.dependency.items:
        env["SLURM_JOB_DEPENDENCY"] = spec.dependency.render()
    if spec.export is not None and not _is_all(spec.export):
        env["SLURM_EXPORT_ENV"] = spec.export
    if export_requests_user_env(spec):
        env["SLURM_GET_USER_ENV"] = "1"
    cpt = _explicit_cpus_per_task(spec)
    if cpt is not None:
        env["SLURM_CPUS_PER_TASK"] = str(cpt)
    if spec.distribution:
        env["SLURM_DISTRIBUTION"] = spec.distribution
    if spec.overcommit:  # (env_array_for_batch_job; srun reads it as -O)
        env["SLURM_OVERCOMMIT"] = "1"
    if spec.ntasks is not None:
        env["SLURM_NPROCS"] = env["SLURM_NTASKS"] = str(spec.ntasks)
    for name, value in (
        ("SLURM_NTASKS_PER_CORE", spec.ntasks_per_core),
        ("SLURM_NTASKS_PER_GPU", spec.ntasks_per_gpu),
        ("SLURM_NTASKS_PER_NODE", spec.ntasks_per_node),
        ("SLURM_NTASKS_PER_SOCKET", spec.ntasks_per_socket),
        ("SLURM_THREADS_PER_CORE", spec.threads_per_core),
        ("SLURM_CPUS_PER_GPU", spec.cpus_per_gpu),
        ("SLURM_MEM_PER_GPU", spec.mem_per_gpu_mb),
    ):
        if value is not None:
            env[name] = str(value)
    for name, items in (
        ("SLURM_GPUS", spec.gpus),
        ("SLURM_GPUS_PER_NODE", spec.gpus_per_node),
        ("SLURM_GPUS_PER_SOCKET", spec.gpus_per_socket),
        ("SLURM_GPUS_PER_TASK", spec.gpus_per_task),
    ):
        if items:
            env[name] = _gpu_request(items)
    return env


def submit_umask(submit_env: Mapping[str, str], default: int = 0o022) -> int:
    """The umask the batch script runs with: sbatch's SLURM_UMASK (octal, `0077`), else
    `default` (slurmstepd's own)."""
    text = submit_env.get("SLURM_UMASK", "")
    try:
        mask = int(text, 8)
    except ValueError:
        return default
    return mask if 0 <= mask <= 0o777 else default


# the limits sbatch propagates (Slurm's slurm_rlimits_info: PropagateResourceLimits=ALL)
RLIMIT_NAMES: Final = (
    "CPU",
    "FSIZE",
    "DATA",
    "STACK",
    "CORE",
    "RSS",
    "NPROC",
    "NOFILE",
    "MEMLOCK",
    "AS",
)
_RLIM_MAX = (1 << 64) - 1  # RLIM_INFINITY as sbatch prints it


def submit_rlimits(submit_env: Mapping[str, str]) -> tuple[tuple[str, int], ...]:
    """The submitter's soft limits that the batch script gets, from sbatch's SLURM_RLIMIT_*
    (`NAME` -> value, `U` prefix: asked for with --propagate); bad values are skipped, as
    slurmstepd skips them."""
    out: list[tuple[str, int]] = []
    for name in RLIMIT_NAMES:
        text = submit_env.get(f"SLURM_RLIMIT_{name}", "").removeprefix("U")
        if text.isdigit() and int(text) <= _RLIM_MAX:
            out.append((name, int(text)))
    return tuple(out)


def _array_layer(launch: Launch) -> dict[str, str]:
    job, spec = launch.job, launch.job.spec
    if job.array_task_id is None or spec.array is None:
        return {}
    return {
        "SLURM_ARRAY_JOB_ID": str(job.array_job_id),
        "SLURM_ARRAY_TASK_ID": str(job.array_task_id),
        "SLURM_ARRAY_TASK_COUNT": str(spec.array.count),
        "SLURM_ARRAY_TASK_MIN": str(spec.array.min_index),
        "SLURM_ARRAY_TASK_MAX": str(spec.array.max_index),
        "SLURM_ARRAY_TASK_STEP": str(_array_step(spec)),
    }


def _memory_layer(spec: JobSpec, def_mem_per_cpu_mb: int | None) -> dict[str, str]:
    if spec.mem_per_cpu_mb is not None:
        return {"SLURM_MEM_PER_CPU": str(spec.mem_per_cpu_mb)}
    if spec.mem_per_node_mb is not None:
        return {"SLURM_MEM_PER_NODE": str(spec.mem_per_node_mb)}
    if spec.mem_per_gpu_mb is None and def_mem_per_cpu_mb:
        return {"SLURM_MEM_PER_CPU": str(def_mem_per_cpu_mb)}
    return {}


def _gpu_layer(here: RankPlacement) -> dict[str, str]:
    if not here.gpus:
        return {}
    ids = ",".join(str(i) for i in here.gpus)
    env = {name: ids for name in GPU_VISIBILITY_VARS}
    env["SLURM_JOB_GPUS"] = ids
    env["SLURM_GPUS_ON_NODE"] = str(len(here.gpus))
    return env


def batch_environment(
    launch: Launch,
    submit_env: Mapping[str, str],
    *,
    node_name: str,
    node_id: int = 0,
    cluster_name: str | None = None,
    login_env: Mapping[str, str] | None = None,
    submit_dir: str | None = None,
    topology: tuple[str, str] | None = None,
    def_mem_per_cpu_mb: int | None = None,
    slurm_conf: str | None = None,
) -> dict[str, str]:
    """The full environment of the batch script of `launch`, running on `node_name`.

    `submit_env` is the user's environment at submission (the --export rules of the job are
    applied to it; an environment already filtered by the same rules is left as it is).
    `login_env` is what `su - user` would give (used only when the job asks for the user's
    environment: `--export` other than ALL, or `--get-user-env`); it fills missing names.
    `topology` is the node's (SLURM_TOPOLOGY_ADDR, ..._PATTERN) when slurm.conf has a switch
    tree (`("core.spine1.leaf1.node01", "switch.switch.switch.node")`); else its name.
    SLURM_TASK_PID is left to the process that execs the script.
    """
    job, spec = launch.job, launch.job.spec
    placement = list(launch.placement)
    if not placement:
        raise ValueError(f"job {job.job_id}: no placement")
    here = next((p for p in placement if p.node == node_name), placement[0])
    nodes = [p.node for p in placement]
    nodelist = compress_hostlist(nodes)

    env = apply_export(spec.export, submit_env)
    env.setdefault("SLURM_SUBMIT_DIR", submit_dir or submit_env.get("PWD") or spec.workdir)
    env.setdefault("SLURM_SUBMIT_HOST", job.submit_host)
    env.setdefault("SLURM_PRIO_PROCESS", "0")
    env.update(_sbatch_layer(spec))
    env.update(_array_layer(launch))
    if env.get("SLURM_GET_USER_ENV") == "1" and login_env:
        for key, value in login_env.items():
            env.setdefault(key, value)

    # slurmd: env_array_for_batch_job
    env["SLURM_CLUSTER_NAME"] = cluster_name or launch.cluster
    env["SLURM_JOB_ID"] = env["SLURM_JOBID"] = str(job.job_id)
    env["SLURM_JOB_NUM_NODES"] = env["SLURM_NNODES"] = str(len(nodes))
    env["SLURM_JOB_NODELIST"] = env["SLURM_NODELIST"] = nodelist
    env["SLURM_JOB_PARTITION"] = launch.partition or job.partition
    env["SLURM_NODE_ALIASES"] = _NODE_ALIASES_UNSET
    env["SLURM_JOB_CPUS_PER_NODE"] = compress_counts(p.cpus for p in placement)
    env["ENVIRONMENT"] = "BATCH"
    env["HOSTNAME"] = node_name
    per_node = tasks_per_node(spec, placement)
    if spec.ntasks is not None:
        env.setdefault("SLURM_NTASKS", str(spec.ntasks))
        env.setdefault("SLURM_NPROCS", str(spec.ntasks))
    elif spec.ntasks_per_node is not None:  # `-N2-4 --ntasks-per-node=2`: the tasks it got
        env["SLURM_NTASKS"] = env["SLURM_NPROCS"] = str(sum(per_node))
    env["SLURM_TASKS_PER_NODE"] = compress_counts(per_node)
    env.update(_memory_layer(spec, def_mem_per_cpu_mb))
    if job.account:
        env["SLURM_JOB_ACCOUNT"] = job.account
    if job.qos:
        env["SLURM_JOB_QOS"] = job.qos
    if spec.reservation:
        env["SLURM_JOB_RESERVATION"] = spec.reservation

    # slurmstepd: setup_env and the batch task (set_umask applies SLURM_UMASK, then unsets it)
    env.pop("SLURM_UMASK", None)
    for name in RLIMIT_NAMES:  # set_user_limits applies them, then unsets them
        env.pop(f"SLURM_RLIMIT_{name}", None)
    if slurm_conf is not None:
        env["SLURM_CONF"] = slurm_conf
    env["SLURM_NODEID"] = str(node_id)
    env["SLURM_PROCID"] = "0"
    env["SLURM_LOCALID"] = "0"
    env["SLURM_GTIDS"] = "0"
    env["SLURM_CPUS_ON_NODE"] = str(here.cpus)
    env["SLURM_JOB_UID"] = str(job.uid)
    env["SLURM_JOB_USER"] = job.user
    env["SLURM_JOB_GID"] = str(job.gid)
    env["SLURM_JOB_NAME"] = spec.name
    env["SLURMD_NODENAME"] = node_name
    addr, pattern = topology or (node_name, "node")
    env["SLURM_TOPOLOGY_ADDR"] = addr
    env["SLURM_TOPOLOGY_ADDR_PATTERN"] = pattern
    if job.restart_count:
        env["SLURM_RESTART_COUNT"] = str(job.restart_count)
    else:
        env.pop("SLURM_RESTART_COUNT", None)
    env.setdefault("TMPDIR", "/tmp")
    env.update(_gpu_layer(here))
    env.update(launch.env_extra)
    return env


# --- srun tasks -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TaskIds:
    """Where one task of a step stands: global rank, rank on its node, node index."""

    procid: int
    localid: int
    nodeid: int


def task_environment(
    base: Mapping[str, str],
    *,
    step_id: int,
    ntasks: int,
    nodes: Sequence[str],
    tasks_on_nodes: Sequence[int],
    task: TaskIds,
    cpus_per_task: int | None = None,
    label: bool = False,
    mpi: str | None = None,
    distribution: str = "block",
) -> dict[str, str]:
    """The environment of one srun task (`setup_env` for a step), from the batch environment.

    The job-wide names (SLURM_JOB_*, SLURM_TASKS_PER_NODE) stay; srun's own view (its task
    count and layout) goes into SLURM_NTASKS/SLURM_NPROCS/SLURM_STEP_*; each task gets its ids.
    """
    env = dict(base)
    nodelist = compress_hostlist(nodes)
    first_rank = sum(tasks_on_nodes[: task.nodeid])
    here = tasks_on_nodes[task.nodeid]
    env["SLURM_STEP_ID"] = env["SLURM_STEPID"] = str(step_id)
    env["SLURM_STEP_NUM_TASKS"] = str(ntasks)
    env["SLURM_STEP_NUM_NODES"] = str(len(nodes))
    env["SLURM_STEP_NODELIST"] = nodelist
    env["SLURM_STEP_TASKS_PER_NODE"] = compress_counts(tasks_on_nodes)
    env["SLURM_NTASKS"] = env["SLURM_NPROCS"] = str(ntasks)
    env["SLURM_DISTRIBUTION"] = distribution
    env["SLURM_PROCID"] = str(task.procid)
    env["SLURM_LOCALID"] = str(task.localid)
    env["SLURM_NODEID"] = str(task.nodeid)
    env["SLURM_GTIDS"] = ",".join(str(first_rank + i) for i in range(here))
    if "SLURM_JOB_CPUS_PER_NODE" in env:  # srun's het-job name for the (one) allocation
        env["SLURM_JOB_CPUS_PER_NODE_PACK_GROUP_0"] = env["SLURM_JOB_CPUS_PER_NODE"]
    if cpus_per_task is not None:
        env["SLURM_CPUS_PER_TASK"] = str(cpus_per_task)
    if label:
        env["SLURM_LABELIO"] = "1"
    if mpi is not None:
        env["SLURM_MPI_TYPE"] = mpi
    return env
