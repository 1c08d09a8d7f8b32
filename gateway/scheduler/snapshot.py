"""The immutable view a scheduling cycle works on, and per-node resource accounting."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gateway.model.cluster import ClusterState, Node
from gateway.model.job import Job
from gateway.model.state import JobState

__all__ = ["DepTarget", "NodeFree", "Snapshot"]


@dataclass(frozen=True, slots=True)
class DepTarget:
    """What dependency tests need to know about a job another job depends on."""

    job_id: int
    state: JobState
    exit_code: int
    start_time: float | None
    user: int
    name: str
    array_job_id: int = 0
    array_task_id: int | None = None
    pending_tasks: int = 0  # an array's tasks that have not started yet


@dataclass(frozen=True, slots=True)
class NodeFree:
    """What is still free on a node: cpus, memory (MiB) and GPU indices."""

    node: Node
    cpus: int
    memory_mb: int
    gpus: frozenset[int]
    exclusive_jobs: int = 0  # jobs on it that asked for the whole node
    jobs: int = 0

    @property
    def idle(self) -> bool:
        """Nothing runs here."""
        return self.jobs == 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    """Everything one cycle may look at; built once per cycle, never mutated."""

    now: float
    pending: tuple[Job, ...]
    running: tuple[Job, ...]
    clusters: Mapping[str, ClusterState]
    free: Mapping[str, NodeFree]  # node name -> what is free
    dep_targets: Mapping[int, tuple[DepTarget, ...]] = field(default_factory=dict)
    # for singleton: (uid, name) -> ids of unfinished jobs
    by_user_name: Mapping[tuple[int, str], tuple[int, ...]] = field(default_factory=dict)
    running_tasks: Mapping[int, int] = field(default_factory=dict)  # array_job_id -> running
    # jobs whose dependencies their cluster enforces itself (Slurm's native dependencies)
    native_deps: frozenset[int] = frozenset()
    def_mem_per_cpu_mb: int = 0
