"""A cycle's remembered filter verdicts (`NodeTests`), the filters' verdict keys they share
verdicts by, and the garbage collector's pause around a cycle: none may change a verdict."""

from __future__ import annotations

import gc
from dataclasses import fields, replace
from functools import partial
from typing import Any, cast

import pytest

from gateway.model.cluster import Gpu, Nic, Node, NodeState
from gateway.scheduler.builtin import ResourceFit
from gateway.scheduler.gc_pause import gc_paused
from gateway.scheduler.plugins import KeyedFilter, NodeFilter, NodeTests, node_test
from gateway.scheduler.request import NodeRequest
from gateway.scheduler.snapshot import NodeFree, Snapshot
from gateway.scheduler.topology_plugin import GpuMemoryFit, RdmaFit

GIB = 2**30


def _snap() -> Snapshot:
    return Snapshot(now=0.0, pending=(), running=(), clusters={}, free={}, def_mem_per_cpu_mb=100)


def _req(**kw: Any) -> NodeRequest:
    base: dict[str, Any] = {
        "nodes": 1,
        "max_nodes": 1,
        "tasks": 1,
        "tasks_per_node": (1,),
        "cpus": 2,
        "memory_mb": 0,
        "mem_per_cpu_mb": None,
        "gpus": 0,
        "gpu_type": None,
        "gpu_memory_mb": None,
        "exclusive": False,
        "constraint": None,
        "nodelist": (),
        "exclude": frozenset(),
        "partitions": ("batch",),
        "time_limit": 60,
        "switches": None,
        "switches_wait_s": None,
    }
    base.update(kw)
    return NodeRequest(**base)


def _records() -> list[NodeFree]:
    """Nodes that send each filter down each of its branches."""
    gpus = (Gpu(index=0, memory_total=16 * GIB), Gpu(index=1, memory_total=80 * GIB))
    ib = (Nic(device="mlx5_0"),)
    nodes = [
        Node(name="n1", cpus=8, memory_mb=1000, partitions=("batch",), features=("ib",), nics=ib),
        Node(
            name="n2",
            cpus=8,
            memory_mb=1000,
            partitions=("batch", "gpu"),
            gres=(("gpu", "a100", 2),),
            gpus=gpus,
        ),
        Node(name="n3", cpus=4, memory_mb=200, partitions=("other",), features=("fast",)),
        Node(name="n4", cpus=8, memory_mb=1000, state=NodeState.DOWN, partitions=("batch",)),
    ]
    out = [NodeFree(n, n.cpus, n.memory_mb, frozenset(g.index for g in n.gpus)) for n in nodes]
    out.append(NodeFree(nodes[0], 1, 100, frozenset(), 0, 1))  # partly used
    out.append(NodeFree(nodes[1], 8, 1000, frozenset({1}), 0, 1))  # one GPU taken
    return out


def _requests() -> list[NodeRequest]:
    return [
        _req(),
        _req(cpus=8, exclusive=True),
        _req(memory_mb=900),
        _req(memory_mb=None),
        _req(mem_per_cpu_mb=300, cpus=4),
        _req(partitions=("gpu",), gpus=1, gpu_type="a100"),
        _req(partitions=("gpu",), gpus=2, gpu_memory_mb=20_000),
        _req(partitions=("gpu",), gpus=1, gpu_memory_mb=20_000),
        _req(partitions=("batch", "other"), constraint="fast|ib"),
        _req(constraint="ib"),
        _req(nodelist=("n1",)),
        _req(exclude=frozenset({"n1"})),
    ]


class _Reading:
    """A request that records which of its fields are read (`memory_for` included)."""

    def __init__(self, req: NodeRequest, read: set[str]) -> None:
        self._req = req
        self._read = read

    def __getattr__(self, name: str) -> Any:
        if name == "memory_for":
            return partial(NodeRequest.memory_for, cast(NodeRequest, self))
        self._read.add(name)
        return getattr(self._req, name)


def _changed(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, tuple):
        return (*value, "zz")
    if isinstance(value, frozenset):
        return value | {"zz"}
    return "zz" if isinstance(value, str) or value is None else None


@pytest.mark.parametrize("plugin", [ResourceFit(), RdmaFit(), GpuMemoryFit()])
def test_a_filter_s_verdict_key_names_every_request_field_its_verdict_reads(
    plugin: KeyedFilter,
) -> None:
    read: set[str] = set()
    for req in _requests():
        for f in _records():
            plugin.fits(cast(NodeRequest, _Reading(req, read)), f, _snap())
    assert read
    req = _req()
    keyed = {
        fl.name
        for fl in fields(NodeRequest)
        if plugin.verdict_key(replace(req, **{fl.name: _changed(getattr(req, fl.name))}))
        != plugin.verdict_key(req)
    }
    assert read <= keyed


def test_remembered_verdicts_are_the_filters_own_and_shared_by_equal_keys() -> None:
    calls: list[str] = []

    class Counting(ResourceFit):
        def fits(self, req: NodeRequest, free: NodeFree, snap: Snapshot) -> bool:
            calls.append(free.node.name)
            return super().fits(req, free, snap)

    filters: list[NodeFilter] = [Counting(), RdmaFit(), GpuMemoryFit()]
    snap, records = _snap(), _records()
    tests = NodeTests(filters, snap)
    for req in _requests():
        want = [f for f in records if node_test(filters, req, snap)(f)]
        calls.clear()
        assert tests.select(req, records) == want
        ok = tests.test(req)
        assert [f for f in records if ok(f)] == want
        assert len(calls) <= len(records)  # each record asked once per key at most
    calls.clear()
    wider = _req(nodes=4, max_nodes=4, tasks=4, tasks_per_node=(1, 1, 1, 1), time_limit=5)
    tests.select(wider, records)
    assert calls == []  # the same filter shape as _req(): nothing asked again
    fresh = replace(records[0], cpus=1)  # a placement makes a new record: asked again
    assert tests.test(_req())(fresh) is False
    assert calls == ["n1"]
    assert tests.select(_req(), records, within=frozenset({"n2"})) == [records[1], records[5]]


def test_a_filter_without_a_verdict_key_shares_verdicts_only_with_equal_requests() -> None:
    class Wide:
        name = "wide"

        def fits(self, req: NodeRequest, free: NodeFree, snap: Snapshot) -> bool:
            return req.nodes > 1

    filters: list[NodeFilter] = [ResourceFit(), Wide()]
    tests = NodeTests(filters, _snap())
    records = _records()
    assert tests.select(_req(), records) == []
    wide = tests.select(_req(nodes=2, max_nodes=2, tasks=2, tasks_per_node=(1, 1)), records)
    assert [f.node.name for f in wide] == ["n1", "n2", "n2"]


def test_gc_is_paused_inside_and_restored_after_nested_and_failed_cycles() -> None:
    was = gc.isenabled()
    try:
        gc.enable()
        with gc_paused():
            assert not gc.isenabled()
            with gc_paused():
                assert not gc.isenabled()
            assert not gc.isenabled()  # the outer cycle is still running
        assert gc.isenabled()
        with pytest.raises(RuntimeError), gc_paused():
            raise RuntimeError("a failed cycle")
        assert gc.isenabled()
        gc.disable()
        with gc_paused():
            pass
        assert not gc.isenabled()  # left as it was found
    finally:
        if was:
            gc.enable()
        else:
            gc.disable()
