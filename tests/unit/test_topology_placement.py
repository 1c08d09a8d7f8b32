"""Topology-aware gang placement: fewest leaf switches, --switches=N@wait, GPU memory in
bytes, the RDMA requirement, and the plugins inside a real scheduling cycle."""

from __future__ import annotations

import random
import time
from dataclasses import replace

from gateway.model.cluster import ClusterState, Gpu, Nic, Node, Partition
from gateway.model.topology import Topology
from gateway.scheduler.builtin import DEFAULT_PLUGINS
from gateway.scheduler.builtin import FACTORIES as BUILTIN
from gateway.scheduler.cycle import run_cycle
from gateway.scheduler.plugins import Registry
from gateway.scheduler.request import node_request
from gateway.scheduler.snapshot import NodeFree, Snapshot
from gateway.scheduler.topology_plugin import (
    FACTORIES,
    FabricScore,
    GpuMemoryFit,
    RdmaFit,
    TopologyPlacement,
    place_gang,
    rdma_required,
)
from tests.support.builders import make_job

GIB = 2**30


def tree(leaves: int, per_leaf: int, leaves_per_spine: int) -> Topology:
    paths = {
        f"n{leaf * per_leaf + i:04d}": [f"leaf{leaf}", f"spine{leaf // leaves_per_spine}", "core"]
        for leaf in range(leaves)
        for i in range(per_leaf)
    }
    return Topology.from_paths(paths)


def frees(names: list[str], **node_fields: object) -> list[NodeFree]:
    out = []
    for n in names:
        node = Node(name=n, cpus=4, memory_mb=8000, partitions=("debug",), **node_fields)  # type: ignore[arg-type]
        out.append(NodeFree(node, 4, 8000, frozenset(g.index for g in node.gpus)))
    return out


def snapshot(
    free: list[NodeFree], pending: tuple[object, ...] = (), now: float | None = None
) -> Snapshot:
    nodes = tuple(f.node for f in free)
    cluster = ClusterState(
        name="local",
        nodes=nodes,
        partitions=(Partition(name="debug", nodes=tuple(n.name for n in nodes), default=True),),
    )
    return Snapshot(
        now=now if now is not None else time.time(),
        pending=pending,  # type: ignore[arg-type]
        running=(),
        clusters={"local": cluster},
        free={f.node.name: f for f in free},
    )


def test_gang_that_fits_one_leaf_goes_to_the_fullest_leaf_that_fits() -> None:
    topo = tree(4, 8, 2)
    # leaf0: 8 free, leaf1: 5 free, leaf2: 3 free, leaf3: 6 free
    free = [f"n{i:04d}" for i in range(0, 8)] + [f"n{i:04d}" for i in range(8, 13)]
    free += [f"n{i:04d}" for i in range(16, 19)] + [f"n{i:04d}" for i in range(24, 30)]
    placed = place_gang(5, frees(free), topo)
    assert placed is not None
    assert {topo.group_of(f.node.name) for f in placed.nodes} == {"leaf1"}
    assert placed.groups == placed.optimum == 1


def test_gang_spanning_leaves_uses_fewest_and_stays_under_one_spine() -> None:
    topo = tree(4, 8, 2)
    # leaf0: 6, leaf1: 6 (spine0), leaf2: 7, leaf3: 3 (spine1)
    free = [f"n{i:04d}" for i in (*range(0, 6), *range(8, 14), *range(16, 23), *range(24, 27))]
    placed = place_gang(10, frees(free), topo)
    assert placed is not None
    assert placed.groups == 2
    leaves = {topo.group_of(f.node.name) for f in placed.nodes}
    assert leaves in ({"leaf0", "leaf1"}, {"leaf2", "leaf3"})
    assert leaves == {"leaf2", "leaf3"}  # best fit: the spine with fewer free nodes
    # consecutive ranks share a leaf
    order = [topo.group_of(f.node.name) for f in placed.nodes]
    assert order == sorted(order, key=order.index)


def test_fewest_leaves_is_optimal_on_random_free_sets() -> None:
    topo = tree(16, 32, 4)
    rng = random.Random(7)
    names = list(topo.nodes())
    for _ in range(200):
        free = sorted(rng.sample(names, rng.randint(40, 400)))
        k = rng.randint(2, len(free))
        placed = place_gang(k, frees(free), topo)
        assert placed is not None
        assert len(placed.nodes) == k
        assert len({f.node.name for f in placed.nodes}) == k
        counts = sorted(
            (sum(1 for n in free if topo.group_of(n) == g) for g in topo.groups), reverse=True
        )
        need, acc = 0, 0
        while acc < k:
            acc += counts[need]
            need += 1
        assert topo.span(f.node.name for f in placed.nodes) == need


def test_nodes_outside_the_topology_count_as_a_leaf_each() -> None:
    topo = tree(1, 2, 1)
    placed = place_gang(3, frees(["n0000", "x1", "x2"]), topo)
    assert placed is not None
    assert placed.groups == 3


def test_single_node_job_packs_into_the_fullest_leaf() -> None:
    topo = tree(2, 4, 2)
    placed = place_gang(1, frees(["n0000", "n0001", "n0002", "n0005"]), topo)
    assert placed is not None
    assert placed.nodes[0].node.name == "n0005"


def test_switches_limit_waits_then_takes_the_best() -> None:
    topo = tree(4, 4, 2)
    free = frees(["n0000", "n0001", "n0004", "n0005", "n0008"])
    job = make_job(1).nodes(4).spec(switches=1, switches_wait_s=60).build()
    job = replace(job, eligible_time=1000.0)
    req = node_request(job.spec)
    plugin = TopologyPlacement(topo)
    assert plugin.choose(req, free, snapshot(free, (job,), now=1030.0)) == []
    chosen = plugin.choose(req, free, snapshot(free, (job,), now=1061.0))
    assert chosen is not None
    assert len(chosen) == 4
    assert topo.span(f.node.name for f in chosen) == 2
    # within the limit: no wait at all
    req2 = replace(req, switches=2)
    assert plugin.choose(req2, free, snapshot(free, (), now=1000.0))


def test_switch_wait_is_capped_by_max_switch_wait() -> None:
    topo = tree(2, 2, 2)
    free = frees(["n0000", "n0002"])
    job = replace(
        make_job(1).nodes(2).spec(switches=1, switches_wait_s=86400).build(), eligible_time=0.0
    )
    plugin = TopologyPlacement(topo, max_switch_wait_s=300)
    assert plugin.choose(node_request(job.spec), free, snapshot(free, (job,), now=301.0))


def test_switches_without_a_wait_time_wait_the_site_maximum() -> None:
    topo = tree(2, 2, 2)
    free = frees(["n0000", "n0002"])
    job = replace(make_job(1).nodes(2).spec(switches=1).build(), eligible_time=0.0)
    plugin = TopologyPlacement(topo, max_switch_wait_s=300)
    req = node_request(job.spec)
    assert plugin.choose(req, free, snapshot(free, (job,), now=299.0)) == []
    assert plugin.choose(req, free, snapshot(free, (job,), now=301.0))


def test_leaf_topology_from_node_switch_fields_when_none_is_given() -> None:
    free = frees(["a", "b"], switch="s1") + frees(["c", "d", "e"], switch="s2")
    plugin = TopologyPlacement()
    req = node_request(make_job(1).nodes(3).build().spec)
    chosen = plugin.choose(req, free, snapshot(free))
    assert chosen is not None
    assert {f.node.name for f in chosen} == {"c", "d", "e"}


def h100(i: int, used: int = 0) -> Gpu:
    return Gpu(
        index=i,
        model="NVIDIA H100 80GB HBM3",
        memory_total=80 * GIB,
        memory_free=80 * GIB - used,
        numa_node=i // 4,
    )


def test_gpu_memory_filter_counts_bytes_and_nvml_free_memory() -> None:
    fit = GpuMemoryFit()
    req = replace(node_request(make_job(1).gpus(2).build().spec), gpu_memory_mb=70 * 1024)
    node = Node(name="g", cpus=8, memory_mb=1, gpus=(h100(0), h100(1, used=20 * GIB), h100(2)))
    snap = snapshot([])
    assert fit.fits(req, NodeFree(node, 8, 1, frozenset({0, 1, 2})), snap)
    assert not fit.fits(req, NodeFree(node, 8, 1, frozenset({0, 1})), snap)  # GPU 1 too full
    assert not fit.fits(
        replace(req, gpu_memory_mb=81 * 1024), NodeFree(node, 8, 1, frozenset({0, 1, 2})), snap
    )
    gres_only = Node(name="x", cpus=8, memory_mb=1, gres=(("gpu", None, 8),))
    assert not fit.fits(req, NodeFree(gres_only, 8, 1, frozenset(range(8))), snap)
    assert GpuMemoryFit(unknown_ok=True).fits(
        req, NodeFree(gres_only, 8, 1, frozenset(range(8))), snap
    )
    assert fit.fits(replace(req, gpu_memory_mb=None), NodeFree(gres_only, 8, 1, frozenset()), snap)


def ib(dev: str, state: str = "ACTIVE", layer: str = "InfiniBand") -> Nic:
    return Nic(device=dev, state=state, link_layer=layer)


def test_rdma_constraint_needs_an_active_port_of_that_kind() -> None:
    assert rdma_required("ib&gpu80") == {"ib"}
    assert rdma_required("[rack1|rack2]") == frozenset()
    fit = RdmaFit()
    snap = snapshot([])
    want_ib = replace(node_request(make_job(1).build().spec), constraint="ib")
    up = Node(name="a", cpus=1, memory_mb=1, nics=(ib("mlx5_0"),))
    down = Node(name="b", cpus=1, memory_mb=1, nics=(ib("mlx5_0", "DOWN"),))
    roce = Node(name="c", cpus=1, memory_mb=1, nics=(ib("mlx5_0", layer="Ethernet"),))
    static = Node(name="d", cpus=1, memory_mb=1, features=("ib",))
    assert fit.fits(want_ib, NodeFree(up, 1, 1, frozenset()), snap)
    assert not fit.fits(want_ib, NodeFree(down, 1, 1, frozenset()), snap)
    assert not fit.fits(want_ib, NodeFree(roce, 1, 1, frozenset()), snap)
    assert fit.fits(want_ib, NodeFree(static, 1, 1, frozenset()), snap)
    want_rdma = replace(want_ib, constraint="rdma")
    assert fit.fits(want_rdma, NodeFree(roce, 1, 1, frozenset()), snap)
    assert not fit.fits(want_rdma, NodeFree(down, 1, 1, frozenset()), snap)
    assert fit.fits(replace(want_ib, constraint=None), NodeFree(down, 1, 1, frozenset()), snap)


def test_fabric_score_steers_mpi_jobs_to_rdma_nodes() -> None:
    score = FabricScore()
    snap = snapshot([])
    up = NodeFree(Node(name="a", cpus=1, memory_mb=1, nics=(ib("mlx5_0"),)), 1, 1, frozenset())
    plain = NodeFree(Node(name="b", cpus=1, memory_mb=1), 1, 1, frozenset())
    multi = node_request(make_job(1).nodes(2).build().spec)
    single = node_request(make_job(2).build().spec)
    assert score.score(multi, up, snap) > score.score(multi, plain, snap)
    assert score.score(single, plain, snap) > score.score(single, up, snap)


def test_cycle_places_an_mpi_gang_on_one_leaf_with_the_plugins_registered() -> None:
    topo = tree(4, 4, 2)
    nodes = [
        Node(
            name=n,
            cpus=4,
            memory_mb=8000,
            partitions=("debug",),
            features=("ib",),
            nics=(ib("mlx5_0"),),
            switch=topo.group_of(n),
        )
        for n in topo.nodes()
    ]
    # leaf0 has 2 idle nodes, leaf1 has 4 but 1 is busy (3 free), leaves 2-3 idle
    free = [NodeFree(n, 4, 8000, frozenset()) for n in nodes]
    for i in (2, 3, 4):
        free[i] = replace(free[i], cpus=0, memory_mb=0, jobs=1, exclusive_jobs=1)
    reg = Registry.build(
        (*DEFAULT_PLUGINS, "rdma", "gpu-memory", "fabric", "topology"), {**BUILTIN, **FACTORIES}
    )
    job = make_job(1).nodes(3).spec(constraint="ib").build()
    snap = snapshot(free, (job,))
    result = run_cycle(snap, reg)
    assert len(result.starts) == 1
    placed = [p.node for p in result.starts[0].placement]
    assert {topo.group_of(n) for n in placed} == {"leaf1"}
