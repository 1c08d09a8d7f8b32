"""Deterministic object names and the labels that link every object back to a Caldera job.

Names derive from the job id and the attempt (the job's restart count), never from time or
randomness, so a submission that is retried after a timeout or an API server restart finds
the objects it already created (409 Conflict) instead of making a second copy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "ANN_JOB_NAME",
    "ANN_RANKS",
    "ANN_USER",
    "LABEL_ARRAY_JOB",
    "LABEL_ARRAY_TASK",
    "LABEL_ATTEMPT",
    "LABEL_CLUSTER",
    "LABEL_JOB",
    "LABEL_MANAGED",
    "LABEL_RANK",
    "LABEL_ROLE",
    "LABEL_USER",
    "MANAGED_BY",
    "VOLCANO_GROUP_ANNOTATION",
    "GangNames",
    "label_value",
    "selector",
]

LABEL_MANAGED = "app.kubernetes.io/managed-by"
MANAGED_BY = "caldera"
LABEL_CLUSTER = "caldera.io/cluster"
LABEL_JOB = "caldera.io/job-id"
LABEL_ATTEMPT = "caldera.io/attempt"
LABEL_RANK = "caldera.io/rank"
LABEL_ROLE = "caldera.io/role"  # root (the parent ConfigMap), env, service, podgroup, rank
LABEL_USER = "caldera.io/user"
LABEL_ARRAY_JOB = "caldera.io/array-job-id"
LABEL_ARRAY_TASK = "caldera.io/array-task-id"
ANN_JOB_NAME = "caldera.io/job-name"
ANN_USER = "caldera.io/user"
ANN_RANKS = "caldera.io/ranks"
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"

_LABEL_BAD = re.compile(r"[^A-Za-z0-9._-]+")


def label_value(text: str) -> str:
    """`text` made a valid label value (63 characters, alphanumeric at both ends)."""
    cleaned = _LABEL_BAD.sub("_", text)[:63].strip("._-")
    return cleaned


def selector(labels: dict[str, str]) -> str:
    """A label selector matching every pair."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


@dataclass(frozen=True, slots=True)
class GangNames:
    """The names of one attempt of one job's objects."""

    prefix: str
    job_id: int
    attempt: int = 0

    @property
    def base(self) -> str:
        """`caldera-42` (attempt 0) or `caldera-42-r1`: root ConfigMap, Service, PodGroup."""
        tail = f"-r{self.attempt}" if self.attempt else ""
        return f"{self.prefix}-{self.job_id}{tail}"

    @property
    def root(self) -> str:
        """The parent ConfigMap (script, hostfile); every other object is its dependent."""
        return self.base

    @property
    def env(self) -> str:
        """The ConfigMap of the job-wide environment (pods read it with envFrom)."""
        return f"{self.base}-env"

    @property
    def service(self) -> str:
        """The headless Service that gives every rank a DNS name."""
        return self.base

    @property
    def podgroup(self) -> str:
        """Volcano's PodGroup (or Volcano Job) of the gang."""
        return self.base

    def pod(self, rank: int) -> str:
        """The pod (and host name) of one rank: `caldera-42-0`."""
        return f"{self.base}-{rank}"

    def host(self, rank: int) -> str:
        """The rank's DNS name inside the namespace: `caldera-42-0.caldera-42`."""
        return f"{self.pod(rank)}.{self.service}"

    def nodelist(self, ranks: int) -> str:
        """SLURM_JOB_NODELIST of the pods' host names, compressed as Slurm does."""
        if ranks == 1:
            return self.pod(0)
        return f"{self.base}-[0-{ranks - 1}]"

    def job_labels(self, cluster: str) -> dict[str, str]:
        """The labels every object of this attempt carries."""
        return {
            LABEL_MANAGED: MANAGED_BY,
            LABEL_CLUSTER: label_value(cluster),
            LABEL_JOB: str(self.job_id),
            LABEL_ATTEMPT: str(self.attempt),
        }
