"""What reconcile() reads back from the cluster: roots and pods by (job id, attempt), and
the Launch of a job rebuilt from its root ConfigMap (script) and env ConfigMap."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gateway.model.backend import Launch
from gateway.model.job import Job
from k8s_bridge.lifecycle import PodState, parse_pod
from k8s_bridge.names import LABEL_ATTEMPT, LABEL_JOB, LABEL_ROLE

__all__ = ["adoption_launch", "index_pods", "index_roots"]

Obj = dict[str, Any]
Key = tuple[int, int]


def index_roots(objs: Iterable[Obj]) -> dict[Key, Obj]:
    """Root ConfigMaps by (job id, attempt)."""
    out: dict[Key, Obj] = {}
    for obj in objs:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if labels.get(LABEL_ROLE) != "root":
            continue
        try:
            key = (int(labels[LABEL_JOB]), int(labels.get(LABEL_ATTEMPT, "0")))
        except (KeyError, ValueError):
            continue
        out[key] = obj
    return out


def index_pods(objs: Iterable[Obj]) -> dict[Key, list[PodState]]:
    """Rank pods by (job id, attempt)."""
    out: dict[Key, list[PodState]] = {}
    for obj in objs:
        pod = parse_pod(obj)
        if pod is not None:
            out.setdefault((pod.job_id, pod.attempt), []).append(pod)
    return out


def adoption_launch(job: Job, root: Obj | None, env: Obj | None, cluster: str) -> Launch:
    """The Launch that made these objects (the script and environment they hold)."""
    data = (root or {}).get("data") or {}
    environment = {str(k): str(v) for k, v in ((env or {}).get("data") or {}).items()}
    return Launch(
        job=job,
        script=str(data.get("script", "")),
        environment=environment,
        placement=job.placement,
        partition=job.partition,
        cluster=cluster,
    )
