"""Translation, pure: one job attempt -> the Kubernetes objects of its gang.

    root ConfigMap  <prefix>-<id>      the batch script and the mpirun hostfile; every other
                                       object names it as owner, so deleting it (cascade)
                                       removes the whole gang
    env ConfigMap   <prefix>-<id>-env  the job-wide environment (user's export + SLURM_*)
    Service         <prefix>-<id>      headless: rank r is <prefix>-<id>-r.<prefix>-<id>
    PodGroup        <prefix>-<id>      Volcano's gang record, minMember = ranks
    Pod x ranks     <prefix>-<id>-<r>  rank 0 runs the script; the others wait for
                                       srun/mpirun started from rank 0
  or, in mode VOLCANO_JOB, one Volcano Job with one task per rank instead of the PodGroup
  and the pods (Volcano's controller makes the PodGroup and the pods from it).

Objects are plain JSON-shaped dicts (the API server's wire form), so golden files are the
manifests themselves. Nothing here does IO; owner references are added with `owned_by`
once the root exists and its uid is known.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from gateway.model.jobspec import JobSpec
from k8s_bridge.files import JobFiles, job_files
from k8s_bridge.launch import (
    BATCH_INIT,
    init_text,
    job_token,
    launcher_mount,
    launcher_volume,
    search_path,
)
from k8s_bridge.names import (
    ANN_JOB_NAME,
    ANN_RANKS,
    ANN_USER,
    LABEL_ARRAY_JOB,
    LABEL_ARRAY_TASK,
    LABEL_RANK,
    LABEL_ROLE,
    LABEL_USER,
    VOLCANO_GROUP_ANNOTATION,
    GangNames,
    label_value,
)
from k8s_bridge.options import GangMode, K8sOptions
from k8s_bridge.pod_needs import job_selector, min_resources, pod_affinity, pod_resources
from k8s_bridge.request import GangRequest, RankShare, TranslationError, rank_shares
from k8s_bridge.slurm_env import (
    HOSTFILE_PATH,
    JOB_DIR,
    SCRIPT_PATH,
    hostfile,
    job_environment,
    rank_environment,
)

__all__ = [
    "ANN_DROPPED_ENV",
    "ANN_MODE",
    "HOSTFILE_PATH",
    "GangManifests",
    "TranslationError",
    "render_gang",
    "without_podgroup",
]

Manifest = dict[str, Any]
ANN_DROPPED_ENV = "caldera.io/dropped-env"
ANN_MODE = "caldera.io/mode"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PODGROUP_API = "scheduling.volcano.sh/v1beta1"
VCJOB_API = "batch.volcano.sh/v1alpha1"


@dataclass(frozen=True, slots=True)
class GangManifests:
    """Every object of one attempt, in creation order (root first)."""

    names: GangNames
    mode: GangMode
    ranks: int
    root: Manifest
    env: Manifest
    service: Manifest | None  # None for one rank: no other rank to look up by name
    podgroup: Manifest | None
    pods: tuple[Manifest, ...]
    volcano_job: Manifest | None

    def children(self) -> list[Manifest]:
        """Everything but the root, in the order they must exist (pods last)."""
        out = [self.env]
        if self.service is not None:
            out.append(self.service)
        if self.podgroup is not None:
            out.append(self.podgroup)
        if self.volcano_job is not None:
            out.append(self.volcano_job)
        out.extend(self.pods)
        return out

    def objects(self) -> list[Manifest]:
        """Root first, then the children."""
        return [self.root, *self.children()]

    def owned_by(self, uid: str) -> GangManifests:
        """The same objects with an owner reference to the root ConfigMap (uid from the
        server): the garbage collector removes them when the root is deleted."""
        ref = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": self.names.root,
            "uid": uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }

        def own(obj: Manifest | None) -> Manifest | None:
            if obj is None:
                return None
            meta = dict(obj["metadata"])
            meta["ownerReferences"] = [ref]
            return {**obj, "metadata": meta}

        return replace(
            self,
            env=own(self.env) or self.env,
            service=own(self.service),
            podgroup=own(self.podgroup),
            volcano_job=own(self.volcano_job),
            pods=tuple(own(p) or p for p in self.pods),
        )


# --- pieces -------------------------------------------------------------------------


def _mounts(spec: JobSpec, opts: K8sOptions) -> tuple[list[Manifest], list[Manifest]]:
    """--container-mounts SRC:DST[:ro] as hostPath volumes (when the site allows it)."""
    volumes: list[Manifest] = []
    mounts: list[Manifest] = []
    if not spec.container_mounts:
        return volumes, mounts
    if not opts.allow_host_mounts:
        raise TranslationError(
            "--container-mounts needs host mounts, which this Kubernetes cluster does not "
            "allow (allow_host_mounts)"
        )
    for i, item in enumerate(spec.container_mounts):
        parts = item.split(":")
        src = parts[0]
        dst = parts[1] if len(parts) > 1 and parts[1] else src
        flags = parts[2].split("+") if len(parts) > 2 else []
        if not src.startswith("/") or not dst.startswith("/"):
            raise TranslationError(f"--container-mounts {item!r}: paths must be absolute")
        name = f"mount-{i}"
        volumes.append({"name": name, "hostPath": {"path": src}})
        mount: Manifest = {"name": name, "mountPath": dst}
        if "ro" in flags:
            mount["readOnly"] = True
        mounts.append(mount)
    return volumes, mounts


def _labels(req: GangRequest, names: GangNames, role: str, opts: K8sOptions) -> dict[str, str]:
    labels = dict(opts.pod_labels) if role == "rank" else {}
    labels.update(names.job_labels(req.cluster))
    labels[LABEL_ROLE] = role
    user = label_value(req.user)
    if user:
        labels[LABEL_USER] = user
    if req.array_task_id is not None:
        labels[LABEL_ARRAY_JOB] = str(req.array_job_id)
        labels[LABEL_ARRAY_TASK] = str(req.array_task_id)
    return labels


def _meta(
    req: GangRequest,
    names: GangNames,
    name: str,
    role: str,
    opts: K8sOptions,
    annotations: Mapping[str, str] | None = None,
) -> Manifest:
    ann = {ANN_JOB_NAME: req.spec.name, ANN_USER: req.user}
    ann.update(annotations or {})
    return {
        "name": name,
        "namespace": opts.namespace,
        "labels": _labels(req, names, role, opts),
        "annotations": ann,
    }


def _scheduler(mode: GangMode, opts: K8sOptions) -> str:
    if mode is GangMode.CALDERA:
        return opts.scheduler_name
    if mode is GangMode.KUBE_SCHEDULER:
        return "default-scheduler"
    return "volcano"


def _pod_spec(
    req: GangRequest,
    names: GangNames,
    shares: tuple[RankShare, ...],
    rank: int,
    mode: GangMode,
    opts: K8sOptions,
    files: JobFiles,
) -> Manifest:
    spec = req.spec
    share = shares[rank]
    host_volumes, host_mounts = _mounts(spec, opts)
    shm: Manifest = {"medium": "Memory"}
    if share.memory_mb:
        shm["sizeLimit"] = f"{max(int(share.memory_mb * opts.shm_fraction), 1)}Mi"
    command = (
        [*BATCH_INIT, *files.batch_command(SCRIPT_PATH, spec.script_args)]
        if rank == 0
        else list(opts.worker_command)
    )
    container: Manifest = {
        "name": "job",
        "image": spec.container_image or opts.default_image,
        "imagePullPolicy": opts.image_pull_policy,
        "command": command,
        "env": [
            *({"name": k, "value": v} for k, v in rank_environment(names, shares, rank).items()),
            {"name": "PATH", "value": search_path(req.environment)},  # srun first
        ],
        "envFrom": [{"configMapRef": {"name": names.env}}],
        "resources": pod_resources(spec, share, opts),
        "volumeMounts": [
            {"name": "job", "mountPath": JOB_DIR, "readOnly": True},
            {"name": "shm", "mountPath": "/dev/shm"},
            launcher_mount(),
            *files.mounts,
            *host_mounts,
        ],
    }
    workdir = spec.container_workdir or files.workdir
    if workdir:
        container["workingDir"] = workdir
    if share.rdma:
        container["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    pod: Manifest = {
        "hostname": names.pod(rank),
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": opts.kill_wait_s,
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "containers": [container],
        "volumes": [
            {
                "name": "job",
                "configMap": {
                    "name": names.root,
                    "defaultMode": 0o644,
                    "items": [
                        {"key": "script", "path": "script", "mode": 0o755},
                        {"key": "hostfile", "path": "hostfile"},
                        {"key": "hosts", "path": "hosts"},  # rank IPs (launch.py)
                        {"key": "token", "path": "token", "mode": 0o400},
                        {"key": "init", "path": "init"},  # limit, --signal (pod_init)
                    ],
                },
            },
            {"name": "shm", "emptyDir": shm},
            launcher_volume(opts.name_prefix),
            *files.volumes,
            *host_volumes,
        ],
    }
    if len(shares) > 1:
        pod["subdomain"] = names.service  # rank r is <pod>.<service> for the other ranks
    pod["dnsPolicy"] = dns_policy(len(shares), opts)
    if mode is not GangMode.VOLCANO_JOB:
        pod["schedulerName"] = _scheduler(mode, opts)
    if opts.run_as_user:
        # fsGroup: the job's group may read the 0400 token (launch.py)
        pod["securityContext"] = {"runAsUser": req.uid, "runAsGroup": req.gid, "fsGroup": req.gid}
    if opts.service_account:
        pod["serviceAccountName"] = opts.service_account
    if req.partition and req.partition != opts.default_partition:
        pod["nodeSelector"] = {opts.partition_label: req.partition}
    affinity = pod_affinity(req, share, opts) or {}
    if mode is not GangMode.CALDERA and len({p.node for p in req.placement}) == len(shares) > 1:
        # the gateway gave each rank a node of its own (-N): another scheduler picks which
        # nodes, but must not stack the ranks either (a gang without a placement may share)
        affinity["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchLabels": job_selector(req, opts)},
                }
            ]
        }
    if affinity:
        pod["affinity"] = affinity
    if opts.tolerations:
        pod["tolerations"] = [t.manifest() for t in opts.tolerations]
    return pod


def dns_policy(ranks: int, opts: K8sOptions) -> str:
    """The pods' dnsPolicy: the site's choice, else the node's resolver ("Default") for a
    one-rank job, which looks up no rank name, so no lookup of its loads cluster DNS;
    "ClusterFirst" for a gang, whose ranks find each other through the headless Service."""
    if opts.dns_policy:
        return opts.dns_policy
    return "Default" if ranks == 1 else "ClusterFirst"


def _pod_annotations(
    names: GangNames, rank: int, mode: GangMode, opts: K8sOptions
) -> dict[str, str]:
    ann = dict(opts.pod_annotations)
    if mode is GangMode.VOLCANO:
        ann[VOLCANO_GROUP_ANNOTATION] = names.podgroup
    return ann


def _env_data(
    req: GangRequest, names: GangNames, shares: tuple[RankShare, ...], opts: K8sOptions
) -> tuple[dict[str, str], list[str]]:
    """The shared environment, without names a ConfigMap key (or a shell) cannot hold."""
    env = job_environment(req, names, shares, opts.namespace, opts.def_mem_per_cpu_mb)
    data = {k: v for k, v in env.items() if _ENV_NAME.match(k)}
    dropped = sorted(k for k in env if not _ENV_NAME.match(k))
    return dict(sorted(data.items())), dropped


# --- the gang -------------------------------------------------------------------------


def _script_data(script: str, hosts: str) -> Manifest:
    """The root ConfigMap's keys: a script that is not UTF-8 (its bytes escaped with
    surrogateescape, as sbatch takes any bytes) goes in `binaryData`, which carries bytes."""
    try:
        script.encode("utf-8")
    except UnicodeEncodeError:
        raw = base64.b64encode(script.encode("utf-8", "surrogateescape")).decode()
        return {"data": {"hostfile": hosts}, "binaryData": {"script": raw}}
    return {"data": {"script": script, "hostfile": hosts}}


def render_gang(req: GangRequest, opts: K8sOptions, mode: GangMode) -> GangManifests:
    """Every object of the job attempt `req` for a cluster in `mode`."""
    names = GangNames(opts.name_prefix, req.job_id, req.attempt)
    shares = rank_shares(req, opts.def_mem_per_cpu_mb)
    if not shares:
        raise TranslationError("the job has no ranks")
    ranks = len(shares)
    common = {ANN_RANKS: str(ranks), ANN_MODE: mode.value}
    root: Manifest = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(req, names, names.root, "root", opts, common),
        **_script_data(req.script, hostfile(names, shares)),
    }
    # the launcher's token, the init's settings, the ranks' addresses once known (launch.py)
    deadline_s = req.deadline_s(opts.time_scale)  # enforced by the init, not the kubelet
    init = init_text(req.spec.signal, deadline_s, opts.time_scale, opts.kill_wait_s)
    root["data"].update(hosts="", token=job_token(opts.launcher_key, names), init=init)
    env_data, dropped = _env_data(req, names, shares, opts)
    env_ann = {ANN_DROPPED_ENV: ",".join(dropped)} if dropped else None
    env: Manifest = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(req, names, names.env, "env", opts, env_ann),
        "data": env_data,
    }
    service: Manifest | None = None
    if ranks > 1:  # a Service (and the Endpoints and EndpointSlice it brings) per gang
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta(req, names, names.service, "service", opts),
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": True,
                "selector": job_selector(req, opts),
            },
        }
    files = job_files(req, names, opts)
    pod_specs = [_pod_spec(req, names, shares, rank, mode, opts, files) for rank in range(ranks)]

    def rank_meta(rank: int, name: str) -> Manifest:
        meta = _meta(req, names, name, "rank", opts, _pod_annotations(names, rank, mode, opts))
        meta["labels"][LABEL_RANK] = str(rank)
        return meta

    podgroup: Manifest | None = None
    pods: tuple[Manifest, ...] = ()
    vcjob: Manifest | None = None
    if mode is GangMode.VOLCANO_JOB:
        tasks = []
        for rank, pod_spec in enumerate(pod_specs):
            meta = rank_meta(rank, names.pod(rank))
            template_meta = {"labels": meta["labels"], "annotations": meta["annotations"]}
            task: Manifest = {
                "name": f"rank{rank}",
                "replicas": 1,
                "minAvailable": 1,
                "template": {"metadata": template_meta, "spec": pod_spec},
            }
            if rank == 0:
                task["policies"] = [{"event": "TaskCompleted", "action": "CompleteJob"}]
            tasks.append(task)
        vcjob = {
            "apiVersion": VCJOB_API,
            "kind": "Job",
            "metadata": _meta(req, names, names.podgroup, "vcjob", opts, common),
            "spec": {
                "schedulerName": "volcano",
                "queue": opts.volcano_queue,
                "minAvailable": ranks,
                "maxRetry": 1,
                "policies": [{"event": "PodFailed", "action": "AbortJob"}],
                "tasks": tasks,
            },
        }
    else:
        if mode in (GangMode.VOLCANO, GangMode.CALDERA):
            pg_spec: Manifest = {"minMember": ranks, "queue": opts.volcano_queue}
            if mode is GangMode.VOLCANO:
                pg_spec["minResources"] = min_resources(shares, req.spec, opts)
            podgroup = {
                "apiVersion": PODGROUP_API,
                "kind": "PodGroup",
                "metadata": _meta(req, names, names.podgroup, "podgroup", opts, common),
                "spec": pg_spec,
            }
        pods = tuple(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": rank_meta(rank, names.pod(rank)),
                "spec": pod_spec,
            }
            for rank, pod_spec in enumerate(pod_specs)
        )
    return GangManifests(
        names=names,
        mode=mode,
        ranks=ranks,
        root=root,
        env=env,
        service=service,
        podgroup=podgroup,
        pods=pods,
        volcano_job=vcjob,
    )


def without_podgroup(manifests: GangManifests) -> GangManifests:
    """The gang without its PodGroup (a cluster that does not serve Volcano's API)."""
    return replace(manifests, podgroup=None)
