"""The room on a cluster whose pods Volcano places (the gateway's `ShowsRoom` capability).

Under Volcano the gateway keeps no books of the nodes, yet it is Caldera that preempts there
(docs/preemption.md, "Kubernetes under Volcano"): Volcano's own preempt action evicts pods by
priority and its gang plugin never takes a gang below minAvailable, so it has no whole-job
victims, no QOS Preempt lists, PreemptMode or GraceTime. To choose victims for a job waiting
in Volcano's queue, the gateway needs what is free on each node and what each of its running
jobs holds there; both come from the same watch of every bound, unfinished pod of the cluster
(kube-scheduler's and Volcano's books count the same pods), so they add up: a node's free
room plus what its pods hold is its allocatable. GPUs are counted, not named, in Kubernetes;
indices are given out per node, free ones first, then each pod's in turn, so that releasing a
victim's ranks gives back exactly its count.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gateway.backend.capabilities import Room
from gateway.model.cluster import ClusterState
from gateway.model.job import RankPlacement
from gateway.scheduler.snapshot import NodeFree
from k8s_bridge.informer import Informer
from k8s_bridge.inventory import NodeInfo, PodUsage, cluster_state
from k8s_bridge.lifecycle import PodState
from k8s_bridge.options import K8sOptions

__all__ = ["RoomView", "room_of"]


def room_of(
    state: ClusterState,
    nodes: Mapping[str, NodeInfo],
    usage: Iterable[PodUsage],
    pods: Iterable[PodState],
    namespace: str,
    gpu_resource: str,
) -> Room:
    """Free room per node and the ranks of each (job, attempt) that holds some."""
    by_node: dict[str, list[PodUsage]] = {}
    for u in usage:
        by_node.setdefault(u.node, []).append(u)
    free: dict[str, NodeFree] = {}
    held_by_pod: dict[str, RankPlacement] = {}
    for node in state.nodes:
        info = nodes.get(node.name)
        if info is None:
            continue
        left = dict(info.allocatable)
        on = sorted(by_node.get(node.name, []), key=lambda u: u.key)
        for u in on:
            for key, value in u.requests.items():
                left[key] = left.get(key, 0) - value
        total_gpus = max(info.allocatable.get(gpu_resource, 0), 0)
        next_gpu = max(left.get(gpu_resource, 0), 0)  # free GPUs are 0 .. next_gpu - 1
        for u in on:
            count = u.requests.get(gpu_resource, 0)
            gpus = tuple(range(next_gpu, min(next_gpu + count, total_gpus)))
            next_gpu += count
            held_by_pod[u.key] = RankPlacement(
                node=node.name,
                tasks=1,
                cpus=u.requests.get("cpu", 0) // 1000,
                memory_mb=u.requests.get("memory", 0) // 2**20,
                gpus=gpus,
            )
        free[node.name] = NodeFree(
            node,
            cpus=max(left.get("cpu", 0), 0) // 1000,
            memory_mb=max(left.get("memory", 0), 0) // 2**20,
            gpus=frozenset(range(max(left.get(gpu_resource, 0), 0))),
            jobs=len(on),
        )
    held: dict[tuple[int, int], list[RankPlacement]] = {}
    for pod in sorted(pods, key=lambda p: (p.job_id, p.attempt, p.rank)):
        rank = held_by_pod.get(f"{namespace}/{pod.name}")
        if rank is not None:
            held.setdefault((pod.job_id, pod.attempt), []).append(rank)
    return Room(free=free, held={k: tuple(v) for k, v in held.items()})


class RoomView:
    """`room` for KubernetesBackend (its informers and options)."""

    opts: K8sOptions
    namespace: str
    name: str
    nodes: Informer[NodeInfo]
    pods: Informer[PodState]
    usage: Informer[PodUsage]

    def room(self) -> Room | None:
        """What is free and what each run holds now; None until the watches are synced
        (the first call starts the watch of every bound pod, which only Caldera's binder
        needs otherwise)."""
        self.usage.start()
        if not (self.nodes.synced and self.pods.synced and self.usage.synced):
            return None
        infos = self.nodes.items()
        state = cluster_state(self.name, infos.values(), self.opts)
        return room_of(
            state,
            {i.name: i for i in infos.values()},
            self.usage.items().values(),
            self.pods.items().values(),
            self.namespace,
            self.opts.gpu_resource,
        )
