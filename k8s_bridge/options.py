"""What a Kubernetes cluster behind Caldera is configured with (one value per cluster).

Everything has a default that works on a plain cluster; the gateway's configuration supplies
the connection (kubeconfig or URL + token + CA), the cluster name and whatever differs.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType

from gateway.topology.k8s_labels import CALDERA_TIERS
from k8s_bridge.launch import WORKER_COMMAND

__all__ = ["GangMode", "K8sOptions", "SharedDir", "Toleration"]


class GangMode(Enum):
    """Who places a gang's pods."""

    CALDERA = (
        "caldera"  # Caldera's binder: every rank reserved, then Bindings (schedulerName caldera)
    )
    VOLCANO = "volcano"  # pods + PodGroup handed to Volcano's scheduler
    VOLCANO_JOB = "volcano-job"  # one Volcano Job (batch.volcano.sh) per gang
    KUBE_SCHEDULER = "kube-scheduler"  # the default scheduler, pod by pod (comparisons only)


@dataclass(frozen=True, slots=True)
class Toleration:
    """A taint the job pods tolerate (key, operator Equal/Exists, value, effect or all)."""

    key: str
    operator: str = "Exists"
    value: str | None = None
    effect: str | None = None

    def tolerates(self, key: str, value: str | None, effect: str) -> bool:
        """Kubernetes' rule for one taint."""
        if self.effect is not None and self.effect != effect:
            return False
        if self.key and self.key != key:
            return False
        if self.operator == "Exists":
            return True
        return (self.value or "") == (value or "")

    def manifest(self) -> dict[str, str]:
        """The toleration as it appears in a pod spec."""
        out = {"key": self.key, "operator": self.operator}
        if self.value is not None:
            out["value"] = self.value
        if self.effect is not None:
            out["effect"] = self.effect
        return out


@dataclass(frozen=True, slots=True)
class SharedDir:
    """One entry of the cluster's filesystem map: `prefix` on the submit hosts is
    `host_path` on every node (the same path when not given)."""

    prefix: str
    host_path: str = ""

    @property
    def source(self) -> str:
        """The node's path (hostPath)."""
        return self.host_path or self.prefix

    def holds(self, path: str) -> bool:
        """Whether `path` (absolute, normalised) is this directory or below it."""
        return path == self.prefix or path.startswith(self.prefix.rstrip("/") + "/")


def _frozen(mapping: Mapping[str, str] | None = None) -> Mapping[str, str]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True, slots=True, kw_only=True)
class K8sOptions:
    """Translation, placement and protection settings of one Kubernetes cluster."""

    namespace: str = "caldera"
    name_prefix: str = "caldera"  # object names are <prefix>-<job id>[-r<attempt>]
    default_image: str = "caldera.local/job:latest"
    image_pull_policy: str = "IfNotPresent"
    # None: Volcano when its API (scheduling.volcano.sh) is served, Caldera's binder otherwise
    mode: GangMode | None = None
    scheduler_name: str = "caldera"  # Caldera's own scheduler name (mode CALDERA)
    volcano_queue: str = "default"
    # translation
    gpu_resource: str = "nvidia.com/gpu"
    rdma_resource: str = "rdma/hca"
    gpu_share: bool = False  # Volcano GPU sharing: --gpu-memory without whole GPUs asks it
    gpu_memory_label: str = "nvidia.com/gpu.memory"  # MiB per GPU (GPU feature discovery)
    shm_fraction: float = 0.5  # /dev/shm size as a fraction of the pod's memory
    def_mem_per_cpu_mb: int = 0  # as the gateway's DefMemPerCPU (0: no memory request)
    kill_wait_s: int = 30  # terminationGracePeriodSeconds (Slurm's KillWait)
    # a node NotReady this long has its jobs' pods counted lost (NODE_FAIL, or requeued):
    # a brief NotReady (heartbeats late on a loaded control plane) must not end jobs
    node_lost_after_s: int = 60
    # ranks > 0: the rank agent srun/mpirun reach (launch.py), or a wait without python3
    worker_command: tuple[str, ...] = WORKER_COMMAND
    # signs each job's launcher token (launch.job_token); random per gateway process
    launcher_key: bytes = field(
        default_factory=lambda: secrets.token_bytes(32), repr=False, compare=False
    )
    run_as_user: bool = True  # pods run with the submitter's uid/gid, as Slurm runs jobs
    allow_host_mounts: bool = False  # --container-mounts as hostPath volumes
    tolerations: tuple[Toleration, ...] = ()
    pod_annotations: Mapping[str, str] = field(default_factory=_frozen)
    pod_labels: Mapping[str, str] = field(default_factory=_frozen)
    service_account: str | None = None
    # pods' dnsPolicy; "" picks it per job (render.dns_policy): the node's resolver for one
    # rank, cluster DNS for the rank names of a gang
    dns_policy: str = ""
    # partitions: every usable node is in `default_partition`; nodes labelled
    # <partition_label>=<name> are also in partition <name>
    default_partition: str = "k8s"
    partition_label: str = "caldera.io/partition"
    feature_label_prefix: str = "feature.caldera.io/"  # <prefix><feature>=true -> -C feature
    leaf_label: str = CALDERA_TIERS[0]  # the first tier of gateway.topology.k8s_labels
    # protection of the API server
    max_pending_pods: int = 256  # not-yet-running pods of this cluster, all jobs together
    qps: float = 50.0
    burst: int = 100
    workers: int = 8  # parallel requests when creating or binding a gang
    request_timeout_s: float = 15.0
    # the API server is asked GET /version this often; unanswered this long, the cluster
    # is described unreachable (the router's outage_timeout counts from then; 0: no probe)
    probe_interval_s: float = 2.0
    silent_after_s: float = 10.0
    # lifecycle
    resync_s: float = 0.5  # controller tick when nothing happens
    # a gang the gateway placed whose nodes cannot take it for this long is handed back
    # (withdrawn) to be placed again; at once when a placed node no longer exists
    withdraw_after_s: float = 30.0
    watch_timeout_s: int = 240
    time_scale: float = 1.0  # real seconds per job second (test clusters shorten time limits)
    # directories of the submit hosts the nodes have too: a job working below one gets it
    # as a hostPath volume at the same path, its working directory and -o/-e files there
    filesystem: tuple[SharedDir, ...] = ()
    delete_orphans: bool = True  # reconcile() deletes objects of jobs the gateway does not run
