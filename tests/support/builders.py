"""Fluent builders for tests: `make_job(1).nodes(2).gpus(4).array("0-9%2").build()`."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from gateway.compat.arrays import parse_array
from gateway.compat.dependency import parse_dependency
from gateway.control.config import GatewayConfig
from gateway.control.gateway import Gateway
from gateway.model.cluster import ClusterState, Gpu, Node, Partition
from gateway.model.job import Hold, Job
from gateway.model.jobspec import JobSpec, Sharing
from gateway.model.state import JobState
from gateway.model.values import GresItem
from gateway.store.sqlite import SqliteStore

__all__ = ["JobBuilder", "make_cluster", "make_gateway", "make_job"]


class JobBuilder:
    """Builds a pending Job with sensible defaults."""

    def __init__(self, job_id: int) -> None:
        self._job_id = job_id
        self._spec: dict[str, Any] = {"name": f"job{job_id}", "workdir": "/tmp"}
        self._job: dict[str, Any] = {}

    def spec(self, **fields: Any) -> JobBuilder:
        """Set JobSpec fields directly."""
        self._spec.update(fields)
        return self

    def name(self, name: str) -> JobBuilder:
        """--job-name."""
        self._spec["name"] = name
        return self

    def nodes(self, n: int) -> JobBuilder:
        """-N n."""
        self._spec["nodes_min"] = n
        return self

    def tasks(self, n: int) -> JobBuilder:
        """-n n."""
        self._spec["ntasks"] = n
        return self

    def cpus(self, n: int) -> JobBuilder:
        """-c n."""
        self._spec["cpus_per_task"] = n
        return self

    def mem(self, mb: int) -> JobBuilder:
        """--mem."""
        self._spec["mem_per_node_mb"] = mb
        return self

    def gpus(self, n: int, gpu_type: str | None = None) -> JobBuilder:
        """--gres=gpu[:type]:n."""
        self._spec["gres"] = (GresItem("gpu", gpu_type, n),)
        return self

    def exclusive(self) -> JobBuilder:
        """--exclusive."""
        self._spec["sharing"] = Sharing.EXCLUSIVE
        return self

    def time(self, minutes: int) -> JobBuilder:
        """-t minutes (also the effective limit)."""
        self._spec["time_limit"] = minutes
        self._job["time_limit"] = minutes
        return self

    def array(self, expr: str) -> JobBuilder:
        """--array=expr."""
        spec = parse_array(expr, 10_000_000)
        assert spec is not None
        self._spec["array"] = spec
        self._job["array_job_id"] = self._job_id
        self._job["array_pending"] = spec
        return self

    def depends(self, expr: str) -> JobBuilder:
        """--dependency=expr."""
        self._spec["dependency"] = parse_dependency(expr)
        return self

    def held(self) -> JobBuilder:
        """-H."""
        self._job["hold"] = Hold.USER
        self._job["priority"] = 0
        return self

    def state(self, state: JobState, **fields: Any) -> JobBuilder:
        """Set the state (and, e.g., start_time/exit_code)."""
        self._job["state"] = state
        self._job.update(fields)
        return self

    def user(self, uid: int) -> JobBuilder:
        """Owner uid."""
        self._job["uid"] = uid
        return self

    def build(self) -> Job:
        """The Job."""
        base = Job(
            job_id=self._job_id,
            spec=JobSpec(**self._spec),
            user="u",
            uid=1000,
            group="g",
            gid=1000,
            submit_time=time.time() - 100 + self._job_id,
            priority=0xFFFF0000 - self._job_id,
            partition="debug",
        )
        return replace(base, **self._job)


def make_job(job_id: int) -> JobBuilder:
    """Start building a job."""
    return JobBuilder(job_id)


def make_cluster(
    nodes: int = 1, cpus: int = 4, memory_mb: int = 8000, gpus: int = 0, name: str = "local"
) -> ClusterState:
    """A cluster of identical nodes in one default partition `debug`."""
    names = tuple(f"n{i:02d}" for i in range(1, nodes + 1))
    return ClusterState(
        name=name,
        nodes=tuple(
            Node(
                name=n,
                cpus=cpus,
                memory_mb=memory_mb,
                partitions=("debug",),
                gres=(("gpu", None, gpus),) if gpus else (),
                gpus=tuple(Gpu(index=i) for i in range(gpus)),
            )
            for n in names
        ),
        partitions=(Partition(name="debug", nodes=names, default=True),),
    )


def make_gateway(home: Path, backends: Mapping[str, Any] | None = None, **config: Any) -> Gateway:
    """An in-process gateway over `backends` (none: no backend), its SQLite store and spool
    in `home`, no node agents; `config`: further GatewayConfig fields (routing, ...)."""
    cfg = GatewayConfig(
        home=home,
        socket_path=home / "sock",
        db_path=home / "jobs.db",
        spool_dir=home / "spool",
        agents=False,
        **config,
    )
    return Gateway(cfg, SqliteStore(cfg.db_path), backends=dict(backends or {}))
