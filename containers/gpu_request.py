"""A job's GPUs as its steps share them (containers/srun_claim.py `JobGpus`), from its
request and the GPU indices it holds per node: one rule for the local runner (the node's
device indices) and for Kubernetes (each pod numbers its own GPUs from 0)."""

from __future__ import annotations

from collections.abc import Mapping

from containers.srun_claim import JobGpus
from gateway.model.jobspec import JobSpec

__all__ = ["job_gpus_of"]


def job_gpus_of(spec: JobSpec, nodes: Mapping[str, tuple[int, ...]]) -> JobGpus:
    """The job's GPU request (type; per node, per job, per task counts) and `nodes`."""
    items = [g for g in (*spec.gres, *spec.gpus_per_node) if g.name == "gpu"]
    typed = [g.type for g in (*items, *spec.gpus, *spec.gpus_per_task) if g.type]
    return JobGpus(
        typed[0] if typed else None,
        per_node=max((g.count for g in items), default=0),
        per_job=sum(g.count for g in spec.gpus),
        per_task=max((g.count for g in spec.gpus_per_task), default=0),
        nodes=dict(nodes),
    )
