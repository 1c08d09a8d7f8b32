"""JobSpec: a batch job request, backend-neutral and complete enough to reproduce Slurm's record.

A JobSpec holds what `scontrol show job` reports about the request (sizes, limits,
placement constraints, control flags, I/O paths), already resolved the way sbatch resolves
it (working directory made absolute, begin time made absolute, task count derived). It is
frozen; its JSON form is versioned so that the store and the API can evolve.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any, Final

from gateway.model.values import (
    ArraySpec,
    Dependency,
    DepItem,
    DepKind,
    DepState,
    GresItem,
    IndexRange,
    SignalSpec,
)

__all__ = [
    "JOBSPEC_VERSION",
    "JobSpec",
    "Sharing",
    "jobspec_from_dict",
    "jobspec_from_json",
    "jobspec_to_dict",
    "jobspec_to_json",
]

JOBSPEC_VERSION: Final = 1


class Sharing(Enum):
    """`--exclusive[=user|mcs]` and `--oversubscribe`: Slurm's OverSubscribe field."""

    EXCLUSIVE = "exclusive"  # OverSubscribe=NO
    USER = "user"
    MCS = "mcs"
    OVERSUBSCRIBE = "oversubscribe"  # OverSubscribe=YES


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSpec:
    """One job (or one heterogeneous component) as requested. None means "not given"."""

    name: str
    workdir: str
    partitions: tuple[str, ...] = ()
    clusters: tuple[str, ...] = ()
    account: str | None = None
    qos: str | None = None
    reservation: str | None = None
    wckey: str | None = None
    comment: str | None = None
    # size
    nodes_min: int | None = None
    nodes_max: int | None = None  # None or 0: no maximum given
    ntasks: int | None = None
    ntasks_per_node: int | None = None
    ntasks_per_socket: int | None = None
    ntasks_per_core: int | None = None
    ntasks_per_gpu: int | None = None
    cpus_per_task: int | None = None
    cpus_per_gpu: int | None = None
    mincpus: int | None = None
    sockets_per_node: int | None = None
    cores_per_socket: int | None = None
    threads_per_core: int | None = None
    overcommit: bool = False
    mem_per_node_mb: int | None = None
    mem_per_cpu_mb: int | None = None
    mem_per_gpu_mb: int | None = None
    tmp_mb: int | None = None
    gres: tuple[GresItem, ...] = ()  # per node
    gpus: tuple[GresItem, ...] = ()  # per job
    gpus_per_node: tuple[GresItem, ...] = ()
    gpus_per_socket: tuple[GresItem, ...] = ()
    gpus_per_task: tuple[GresItem, ...] = ()
    licenses: str | None = None
    # placement
    constraint: str | None = None
    nodelist: str | None = None
    exclude: str | None = None
    sharing: Sharing | None = None
    contiguous: bool = False
    switches: int | None = None
    switches_wait_s: int | None = None
    hint: str | None = None
    distribution: str | None = None
    # time, in minutes (INFINITE for none) or epoch seconds
    time_limit: int | None = None
    time_min: int | None = None
    begin: int | None = None
    deadline: int | None = None
    # control
    array: ArraySpec | None = None
    dependency: Dependency | None = None
    kill_on_invalid_dep: bool | None = None
    hold: bool = False
    nice: int | None = None
    priority: int | None = None
    requeue: bool | None = None
    signal: SignalSpec | None = None
    open_mode: str | None = None  # "append" | "truncate"
    mail_type: frozenset[str] | None = None
    mail_user: str | None = None
    # I/O and environment
    stdout: str | None = None
    stderr: str | None = None
    stdin: str | None = None
    export: str | None = None
    export_file: str | None = None
    get_user_env: str | None = None
    uid: int | None = None
    gid: int | None = None
    # containers: Slurm's OCI bundle, pyxis/shifter image, and Caldera's own fields
    container: str | None = None
    container_image: str | None = None
    container_mounts: tuple[str, ...] = ()
    container_workdir: str | None = None
    container_name: str | None = None
    gpu_memory_mb: int | None = None
    burst: str | None = None
    burst_after_min: int | None = None  # #CALDERA --burst-after=MINUTES
    # other sbatch options, kept verbatim for backends that understand them
    extra: tuple[tuple[str, str | None], ...] = ()
    script_args: tuple[str, ...] = ()
    het: tuple[JobSpec, ...] = field(default=())

    @property
    def is_array(self) -> bool:
        """Whether this is a job array."""
        return self.array is not None

    @property
    def spreads_tasks(self) -> bool:
        """`-n N` without a node count: the job takes as many nodes as its tasks need,
        decided when it is placed (Slurm's default; `-n 5` on 2-CPU nodes runs on three).
        Job-wide --gpus and per-node task counts keep a fixed node count, and so does a
        --mincpus beyond one task's CPUs (sbatch's own `-c N` sets a minimum of N: `-n 3
        -c 2` spreads). A node list (-w) names nodes it must include and sets only the
        minimum count (sbatch's `_opt_verify`), so `-w node01 -n3` spreads too: node[01-02]
        on 2-CPU nodes. A node range spreads too (`wide_range`); all may ask GPUs per node
        (`-w node03 -n3 --gres=gpu:1`: node[03-04], one GPU each)."""
        if (self.ntasks or 0) <= 1 or self.ntasks_per_node is not None or self.overcommit:
            return False  # (-O: one CPU per task's worth, the tasks where the nodes are)
        if (self.mincpus or 0) > (self.cpus_per_task or 1):  # sbatch -c sets it too
            return False
        if self.wide_range or (bool(self.nodelist) and self.nodes_max is None):
            return not (self.gpus or self.gpus_per_task)  # GPUs per node: each node's own
        # GPUs per node go to each node it takes (`-n3 --gres=gpu:1` on 2-CPU nodes: the
        # test cluster's node[03-04], gres/gpu=2); job-wide --gpus is split (multi_gpu)
        return self.nodes_min is None and not self.gpus

    @property
    def min_cpus(self) -> int:
        """The CPUs slurmctld checks against a partition's (sbatch's min_cpus): every task's,
        or with -O one task's on each node (`-n9 -O` runs on one 2-CPU node)."""
        cpt = self.cpus_per_task or 1
        if self.overcommit:
            return max(self.nodes_min or 1, 1) * cpt
        return (self.ntasks or 0) * cpt

    @property
    def spread_job(self) -> bool:
        """`--spread-job` (kept verbatim in `extra`): the tasks over as many nodes as may
        take them, one each at least (`-n3` on idle 2-CPU nodes: three nodes, not two)."""
        return any(name == "spread-job" for name, _ in self.extra)

    @property
    def wide_range(self) -> bool:
        """`-N MIN-MAX`: slurmctld gives such a job as many nodes as it can, up to MAX and
        one task each at least (`-N1-4 -n3` on idle nodes: three), and at least MIN."""
        return (
            self.nodes_min is not None
            and self.nodes_max is not None
            and self.nodes_max > self.nodes_min
        )


# --- versioned JSON -----------------------------------------------------------------


def _encode(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, frozenset):
        return sorted(value)
    if isinstance(value, tuple):
        return [_encode(v) for v in value]
    if isinstance(value, JobSpec):
        return _spec_dict(value)
    if isinstance(value, GresItem):
        return {"name": value.name, "type": value.type, "count": value.count, "text": value.text}
    if isinstance(value, ArraySpec):
        return {
            "ranges": [[r.first, r.last, r.step] for r in value.ranges],
            "throttle": value.throttle,
        }
    if isinstance(value, Dependency):
        return {
            "any_of": value.any_of,
            "items": [
                {
                    "kind": i.kind.value,
                    "job_id": i.job_id,
                    "task": i.task,
                    "minutes": i.minutes,
                    "state": i.state.value,
                }
                for i in value.items
            ],
        }
    if isinstance(value, SignalSpec):
        return {
            "signal": value.signal,
            "time": value.time,
            "batch_only": value.batch_only,
            "reservation": value.reservation,
        }
    return value


def _spec_dict(spec: JobSpec) -> dict[str, Any]:
    return {f.name: _encode(getattr(spec, f.name)) for f in fields(JobSpec)}


def jobspec_to_dict(spec: JobSpec) -> dict[str, Any]:
    """The versioned JSON document of a JobSpec, as plain data."""
    return {"version": JOBSPEC_VERSION, "spec": _spec_dict(spec)}


def jobspec_to_json(spec: JobSpec) -> str:
    """The versioned JSON document of a JobSpec."""
    return json.dumps(jobspec_to_dict(spec), sort_keys=True)


def _gres(items: Any) -> tuple[GresItem, ...]:
    return tuple(GresItem(i["name"], i["type"], i["count"], i.get("text", "")) for i in items)


_DECODERS: dict[str, Any] = {
    "gres": _gres,
    "gpus": _gres,
    "gpus_per_node": _gres,
    "gpus_per_socket": _gres,
    "gpus_per_task": _gres,
    "partitions": tuple,
    "clusters": tuple,
    "container_mounts": tuple,
    "script_args": tuple,
    "mail_type": frozenset,
    "sharing": Sharing,
    "array": lambda d: ArraySpec(
        tuple(IndexRange(a, b, c) for a, b, c in d["ranges"]), d["throttle"]
    ),
    "dependency": lambda d: Dependency(
        tuple(
            DepItem(DepKind(i["kind"]), i["job_id"], i["task"], i["minutes"], DepState(i["state"]))
            for i in d["items"]
        ),
        d["any_of"],
    ),
    "signal": lambda d: SignalSpec(d["signal"], d["time"], d["batch_only"], d["reservation"]),
    "extra": lambda items: tuple((k, v) for k, v in items),
    "het": lambda items: tuple(_spec_from_dict(i) for i in items),
}


_FIELDS = frozenset(f.name for f in fields(JobSpec))


def _spec_from_dict(data: dict[str, Any]) -> JobSpec:
    # hot: squeue decodes every queued job (10,000 jobs: 0.9 s before the field names were
    # kept and only the fields with a decoder were visited)
    unknown = data.keys() - _FIELDS
    if unknown:
        raise ValueError(f"unknown JobSpec fields: {sorted(unknown)}")
    kwargs = dict(data)
    for key, decode in _DECODERS.items():
        value = kwargs.get(key)
        if value is not None:
            kwargs[key] = decode(value)
    return JobSpec(**kwargs)


def jobspec_from_json(text: str) -> JobSpec:
    """Read a JobSpec document; raises ValueError for another version or bad content."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"malformed JobSpec document: {exc}") from exc
    return jobspec_from_dict(doc)


def jobspec_from_dict(doc: Any) -> JobSpec:
    """Read a JobSpec document given as plain data; raises ValueError when malformed."""
    try:
        if doc.get("version") != JOBSPEC_VERSION:
            raise ValueError(f"unsupported JobSpec version {doc.get('version')!r}")
        return _spec_from_dict(doc["spec"])
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"malformed JobSpec document: {exc}") from exc
