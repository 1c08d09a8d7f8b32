"""What one rank's pod asks of the cluster (pure): its resources, the node affinity of the
job's -C constraints and GPU memory, the pod affinity of --switches, and the sum a gang asks
as a whole (a PodGroup's minResources). Rendering (render.py) puts these into manifests.
"""

from __future__ import annotations

import re
from typing import Any

from gateway.model.jobspec import JobSpec
from k8s_bridge.names import GangNames
from k8s_bridge.options import K8sOptions
from k8s_bridge.request import RDMA_FEATURES, GangRequest, RankShare

__all__ = ["constraint_terms", "job_selector", "min_resources", "pod_affinity", "pod_resources"]

Manifest = dict[str, Any]


def constraint_terms(expr: str | None, prefix: str) -> list[list[dict[str, Any]]]:
    """`-C a&b|c` as node selector terms (ORed) of label expressions (ANDed)."""
    if not expr:
        return []
    cleaned = re.sub(r"\*\d+", "", expr).replace("[", "").replace("]", "")
    terms: list[list[dict[str, Any]]] = []
    for alternative in cleaned.split("|"):
        # -C ib (infiniband, rdma, roce) is asked as the RDMA device resource instead
        features = [
            f for f in re.split(r"[&,]", alternative) if f and f.lower() not in RDMA_FEATURES
        ]
        if not features:
            return []  # one alternative needs nothing beyond resources: no node constraint
        terms.append(
            [{"key": f"{prefix}{f}", "operator": "In", "values": ["true"]} for f in features]
        )
    return terms


def pod_affinity(req: GangRequest, share: RankShare, opts: K8sOptions) -> Manifest | None:
    spec = req.spec
    terms = constraint_terms(spec.constraint, opts.feature_label_prefix)
    extra: list[dict[str, Any]] = []
    if spec.gpu_memory_mb and share.gpus and not opts.gpu_share:
        extra.append(
            {
                "key": opts.gpu_memory_label,
                "operator": "Gt",
                "values": [str(spec.gpu_memory_mb - 1)],
            }
        )
    if extra:
        terms = [t + extra for t in terms] if terms else [extra]
    affinity: Manifest = {}
    if terms:
        affinity["nodeAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": t} for t in terms]
            }
        }
    if spec.switches:
        affinity["podAffinity"] = {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "topologyKey": opts.leaf_label,
                        "labelSelector": {"matchLabels": job_selector(req, opts)},
                    },
                }
            ]
        }
    return affinity or None


def pod_resources(spec: JobSpec, share: RankShare, opts: K8sOptions) -> Manifest:
    limits: dict[str, str] = {"cpu": str(share.cpus)}
    if share.memory_mb:
        limits["memory"] = f"{share.memory_mb}Mi"
    if spec.gpu_memory_mb and opts.gpu_share:
        # Volcano's GPU sharing: memory on shared GPUs instead of whole devices
        limits["volcano.sh/gpu-memory"] = str(spec.gpu_memory_mb * max(share.gpus, 1))
        if share.gpus > 1:
            limits["volcano.sh/gpu-number"] = str(share.gpus)
    elif share.gpus:
        limits[opts.gpu_resource] = str(share.gpus)
    if share.rdma:
        limits[opts.rdma_resource] = str(share.rdma)
    return {"requests": dict(limits), "limits": limits}


def job_selector(req: GangRequest, opts: K8sOptions) -> dict[str, str]:
    names = GangNames(opts.name_prefix, req.job_id, req.attempt)
    labels = names.job_labels(req.cluster)
    labels.pop("app.kubernetes.io/managed-by")
    return labels


def min_resources(shares: tuple[RankShare, ...], spec: JobSpec, opts: K8sOptions) -> dict[str, str]:
    total: dict[str, int] = {}
    for share in shares:
        limits = pod_resources(spec, share, opts)["requests"]
        for key, value in limits.items():
            amount = int(value[:-2]) if value.endswith("Mi") else int(value)
            total[key] = total.get(key, 0) + amount
    return {k: (f"{v}Mi" if k == "memory" else str(v)) for k, v in sorted(total.items())}
