"""The room of a Volcano-placed cluster as the gateway's preemption sees it (k8s_bridge/room.py):
free per node and what each run's pods hold, adding up to the node's allocatable."""

from __future__ import annotations

from dataclasses import replace

from gateway.backend.capabilities import Room
from gateway.model.job import Job
from gateway.scheduler.preempt import released
from k8s_bridge.inventory import PodUsage, cluster_state, parse_node
from k8s_bridge.lifecycle import PodState
from k8s_bridge.options import K8sOptions
from k8s_bridge.room import room_of
from tests.support.builders import make_job
from tests.unit.test_k8s_inventory import node_obj

GPU = "nvidia.com/gpu"


def _pod(name: str, job: int, rank: int, node: str, attempt: int = 0) -> PodState:
    return PodState(
        name=name, uid=name, job_id=job, attempt=attempt, rank=rank, phase="Running", node=node
    )


def _use(key: str, node: str, cpus: int, gpus: int) -> PodUsage:
    return PodUsage(key, node, {"cpu": cpus * 1000, "memory": 2**30, GPU: gpus, "pods": 1})


def _room() -> Room:
    infos = [parse_node(node_obj(n)) for n in ("n1", "n2")]
    state = cluster_state("kwok", infos, K8sOptions())
    usage = [
        _use("ns/caldera-7-0", "n1", 8, 8),
        _use("ns/caldera-9-r1-0", "n2", 4, 2),
        _use("ns/caldera-9-r1-1", "n1", 0, 0),  # no GPU, on a full node
        _use("other/web", "n2", 2, 1),  # not Caldera's: holds room, belongs to no job
    ]
    pods = [
        _pod("caldera-7-0", 7, 0, "n1"),
        _pod("caldera-9-r1-0", 9, 0, "n2", attempt=1),
        _pod("caldera-9-r1-1", 9, 1, "n1", attempt=1),
        _pod("caldera-5-0", 5, 0, "n2"),  # not bound (no usage): holds nothing
    ]
    return room_of(state, {i.name: i for i in infos}, usage, pods, "ns", GPU)


def test_free_room_counts_every_bound_pod_of_the_cluster() -> None:
    room = _room()
    n1, n2 = room.free["n1"], room.free["n2"]
    assert (n1.cpus, n1.gpus, n1.jobs) == (56, frozenset(), 2)
    assert (n2.cpus, n2.gpus, n2.memory_mb) == (58, frozenset(range(5)), 512 * 1024 - 2 * 1024)


def test_each_run_holds_its_pods_requests_with_gpu_indices_apart_from_the_free_ones() -> None:
    room = _room()
    assert set(room.held) == {(7, 0), (9, 1)}
    (rank,) = room.held[(7, 0)]
    assert (rank.node, rank.cpus, rank.gpus) == ("n1", 8, tuple(range(8)))
    on_n2 = next(r for r in room.held[(9, 1)] if r.node == "n2")
    assert not set(on_n2.gpus) & room.free["n2"].gpus
    assert len(on_n2.gpus) == 2


def test_releasing_a_run_gives_back_exactly_what_its_pods_hold() -> None:
    room = _room()
    job: Job = make_job(9).build()
    back = released(room.free, [replace(job, placement=room.held[(9, 1)])])
    assert (back["n2"].cpus, len(back["n2"].gpus)) == (62, 7)  # the other pod keeps its GPU
    assert (back["n1"].cpus, back["n1"].gpus) == (56, frozenset())
