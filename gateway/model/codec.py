"""JSON forms of Job, Step, Node and Partition (the store's rows and the API's bodies)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from gateway.model.cluster import Gpu, Nic, Node, NodeState, Partition
from gateway.model.job import Hold, Job, RankPlacement, Step
from gateway.model.jobspec import JobSpec, jobspec_from_dict, jobspec_to_dict
from gateway.model.state import JobState, Reason
from gateway.model.values import ArraySpec, IndexRange

__all__ = [
    "job_from_dict",
    "job_to_dict",
    "node_from_dict",
    "node_to_dict",
    "partition_from_dict",
    "partition_to_dict",
    "spec_from_dict",
    "spec_to_dict",
    "step_from_dict",
    "step_to_dict",
]


def spec_to_dict(spec: JobSpec) -> dict[str, Any]:
    """A JobSpec as its versioned JSON document (a dict)."""
    return jobspec_to_dict(spec)


def spec_from_dict(doc: dict[str, Any]) -> JobSpec:
    """The inverse of spec_to_dict; raises ValueError for a bad document."""
    return jobspec_from_dict(doc)


def _array_to(a: ArraySpec | None) -> Any:
    if a is None:
        return None
    return {"ranges": [[r.first, r.last, r.step] for r in a.ranges], "throttle": a.throttle}


def _array_from(d: Any) -> ArraySpec | None:
    if d is None:
        return None
    return ArraySpec(tuple(IndexRange(*r) for r in d["ranges"]), d["throttle"])


_JOB_SIMPLE = {
    f.name
    for f in fields(Job)
    if f.name not in {"spec", "state", "reason", "hold", "array_pending", "nodes", "placement"}
}


def job_to_dict(job: Job) -> dict[str, Any]:
    """A Job as plain JSON data."""
    out: dict[str, Any] = {name: getattr(job, name) for name in _JOB_SIMPLE}
    out["spec"] = spec_to_dict(job.spec)
    out["state"] = job.state.long
    out["reason"] = job.reason.value
    out["hold"] = job.hold.value if job.hold else None
    out["array_pending"] = _array_to(job.array_pending)
    out["nodes"] = list(job.nodes)
    out["placement"] = [
        [p.node, p.tasks, p.cpus, p.memory_mb, list(p.gpus), list(p.nics), p.gpu_type]
        for p in job.placement
    ]
    return out


def job_from_dict(d: dict[str, Any]) -> Job:
    """The inverse of job_to_dict."""
    kwargs = {name: d[name] for name in _JOB_SIMPLE if name in d}
    return Job(
        spec=spec_from_dict(d["spec"]),
        state=JobState.parse(d["state"]),
        reason=Reason.parse(d["reason"]),
        hold=Hold(d["hold"]) if d.get("hold") else None,
        array_pending=_array_from(d.get("array_pending")),
        nodes=tuple(d.get("nodes", ())),
        placement=tuple(
            RankPlacement(p[0], p[1], p[2], p[3], tuple(p[4]), tuple(p[5]), *p[6:7])
            for p in d.get("placement", ())
        ),
        **kwargs,
    )


def step_to_dict(step: Step) -> dict[str, Any]:
    """A Step as plain JSON data."""
    out = {f.name: getattr(step, f.name) for f in fields(Step)}
    out["state"] = step.state.long
    out["nodes"] = list(step.nodes)
    return out


def step_from_dict(d: dict[str, Any]) -> Step:
    """The inverse of step_to_dict."""
    kwargs = dict(d)
    kwargs["state"] = JobState.parse(d["state"])
    kwargs["nodes"] = tuple(d.get("nodes", ()))
    return Step(**kwargs)


def node_to_dict(node: Node) -> dict[str, Any]:
    """A Node as plain JSON data."""
    out: dict[str, Any] = {f.name: getattr(node, f.name) for f in fields(Node)}
    out["state"] = node.state.long
    out["gpus"] = [{f.name: getattr(g, f.name) for f in fields(Gpu)} for g in node.gpus]
    out["nics"] = [{f.name: getattr(n, f.name) for f in fields(Nic)} for n in node.nics]
    out["gres"] = [list(g) for g in node.gres]
    out["partitions"] = list(node.partitions)
    out["features"] = list(node.features)
    out["uplinks"] = list(node.uplinks)
    return out


def node_from_dict(d: dict[str, Any]) -> Node:
    """The inverse of node_to_dict."""
    kwargs = dict(d)
    kwargs["state"] = next(s for s in NodeState if s.long == d["state"])
    kwargs["gpus"] = tuple(Gpu(**g) for g in d.get("gpus", ()))
    kwargs["nics"] = tuple(Nic(**n) for n in d.get("nics", ()))
    kwargs["gres"] = tuple((g[0], g[1], g[2]) for g in d.get("gres", ()))
    kwargs["partitions"] = tuple(d.get("partitions", ()))
    kwargs["features"] = tuple(d.get("features", ()))
    kwargs["uplinks"] = tuple(d.get("uplinks", ()))
    return Node(**kwargs)


def partition_to_dict(p: Partition) -> dict[str, Any]:
    """A Partition as plain JSON data."""
    out: dict[str, Any] = {f.name: getattr(p, f.name) for f in fields(Partition)}
    out["nodes"] = list(p.nodes)
    return out


def partition_from_dict(d: dict[str, Any]) -> Partition:
    """The inverse of partition_to_dict."""
    kwargs = dict(d)
    kwargs["nodes"] = tuple(d.get("nodes", ()))
    return Partition(**kwargs)
