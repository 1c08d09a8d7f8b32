"""Caldera's gang binder: whole gangs placed on a live view of nodes and bound pods."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s_client

from gateway.model.job import Job
from k8s_bridge.binder import GangBinder, GangDemand, node_matches
from k8s_bridge.inventory import NodeInfo, PodUsage
from k8s_bridge.kube import KubeClient
from k8s_bridge.options import K8sOptions
from k8s_bridge.ratelimit import TokenBucket
from tests.support.builders import make_job

GIB = 2**30
GPU_MEM = "nvidia.com/gpu.memory"


def node(
    name: str, leaf: str = "leaf-0", gpus: int = 8, labels: dict[str, str] | None = None
) -> NodeInfo:
    return NodeInfo(
        name=name,
        allocatable={"cpu": 64_000, "memory": 512 * GIB, "pods": 110, "nvidia.com/gpu": gpus},
        labels={"topology.caldera.io/leaf": leaf, **(labels or {})},
        taints=(),
        ready=True,
        unschedulable=False,
    )


def gang(job_id: int, ranks: int, gpus: int, pod_spec: dict[str, Any] | None = None) -> GangDemand:
    job: Job = make_job(job_id).nodes(ranks).gpus(gpus).build()
    need = {"pods": 1, "cpu": 1000, "nvidia.com/gpu": gpus}
    return GangDemand(
        job=job,
        pods=tuple(f"caldera-{job_id}-{r}" for r in range(ranks)),
        requests=tuple(dict(need) for _ in range(ranks)),
        pod_spec=pod_spec or {},
    )


@pytest.fixture
def binder() -> Iterator[GangBinder]:
    api = k8s_client.ApiClient(k8s_client.Configuration(host="https://127.0.0.1:1"))
    b = GangBinder(KubeClient(api, TokenBucket(10, 10)), "ns", "east", K8sOptions())
    yield b
    b.close()


def test_every_rank_of_a_gang_gets_a_node_or_none_does(binder: GangBinder) -> None:
    nodes = {n.name: n for n in (node("a"), node("b"), node("c"))}
    placed = binder.place([gang(1, 3, 8), gang(2, 3, 8)], nodes, [])
    assert [(g.job.job_id, sorted(n)) for g, n in placed] == [(1, ["a", "b", "c"])]


def test_gangs_wait_in_order_behind_one_that_does_not_fit(binder: GangBinder) -> None:
    nodes = {n.name: n for n in (node("a"), node("b"))}
    used = [PodUsage("other/x", "a", {"pods": 1, "nvidia.com/gpu": 4})]
    placed = binder.place([gang(1, 2, 8), gang(2, 1, 2)], nodes, used)
    assert placed == []  # job 2 would fit, but job 1 came first


def test_already_bound_and_assumed_pods_are_counted(binder: GangBinder) -> None:
    nodes = {n.name: n for n in (node("a"), node("b"))}
    first = binder.place([gang(1, 2, 4)], nodes, [])
    assert len(first) == 1
    # the first gang's pods are assumed until the cluster view shows them bound
    second = binder.place([gang(2, 2, 4)], nodes, [])
    assert len(second) == 1
    assert binder.place([gang(3, 1, 1)], nodes, []) == []


def test_a_gang_stays_under_one_leaf_when_one_can_hold_it(binder: GangBinder) -> None:
    nodes = {
        n.name: n
        for n in (
            node("a1", "leaf-a"),
            node("b1", "leaf-b"),
            node("b2", "leaf-b"),
            node("c1", "leaf-c"),
        )
    }
    ((_, chosen),) = binder.place([gang(1, 2, 8)], nodes, [])
    assert sorted(chosen) == ["b1", "b2"]


def test_node_selectors_and_affinity_are_respected(binder: GangBinder) -> None:
    nodes = {
        n.name: n for n in (node("a"), node("b", labels={"caldera.io/partition": "big"}), node("c"))
    }
    spec = {"nodeSelector": {"caldera.io/partition": "big"}}
    ((_, chosen),) = binder.place([gang(1, 1, 1, spec)], nodes, [])
    assert chosen == ("b",)
    assert binder.place([gang(2, 2, 4, spec)], nodes, []) == []  # b has 7 GPUs left


def test_ranks_share_a_node_when_they_fit_and_fill_it_first(binder: GangBinder) -> None:
    nodes = {n.name: n for n in (node("a"), node("b"))}
    used = [PodUsage("other/x", "b", {"pods": 1, "nvidia.com/gpu": 2})]
    ((_, chosen),) = binder.place([gang(1, 3, 2)], nodes, used)
    assert chosen == ("b", "b", "b")  # the fuller node first; a stays whole


def placed_by_gateway(g: GangDemand, *nodes: str) -> GangDemand:
    return GangDemand(g.job, g.pods, g.requests, g.pod_spec, hint=nodes)


def test_a_gang_the_gateway_placed_is_bound_as_decided(binder: GangBinder) -> None:
    nodes = {n.name: n for n in (node("a", "leaf-a"), node("b", "leaf-b"), node("c", "leaf-b"))}
    # the binder alone would keep the gang under leaf-b; the gateway's decision stands
    ((_, chosen),) = binder.place([placed_by_gateway(gang(1, 2, 8), "c", "a")], nodes, [])
    assert chosen == ("c", "a")


def test_a_placement_that_does_not_fit_yet_waits_and_is_never_moved(binder: GangBinder) -> None:
    nodes = {n.name: n for n in (node("c"), node("d"), node("e"), node("f"))}
    used = [PodUsage("other/x", "c", {"pods": 1, "nvidia.com/gpu": 1})]
    stale = placed_by_gateway(gang(2, 2, 8), "c", "d")
    behind = placed_by_gateway(gang(3, 1, 8), "e")
    # d and e+f are free, but job 2 was placed on c: it waits; job 3 (placed too) goes
    placed = binder.place([stale, behind], nodes, used)
    assert [(g.job.job_id, n) for g, n in placed] == [(3, ("e",))]
    assert binder.place([stale], nodes, used) == []
    # once c is free, job 2 is bound where the gateway put it
    ((_, chosen),) = binder.place([stale], nodes, [])
    assert chosen == ("c", "d")


def test_a_gang_without_placement_packs_ranks_on_the_fewest_leaves(binder: GangBinder) -> None:
    """The gateway's place_gang over rank slots (a node with room for k ranks is k
    candidates), here with a plan over more than four leaves."""
    nodes = {f"n{i}": node(f"n{i}", f"leaf-{i}") for i in range(6)}
    used = [PodUsage(f"other/{i}", f"n{i}", {"pods": 1, "nvidia.com/gpu": i}) for i in range(6)]
    # 2-GPU ranks per node: n0 4, n1 3, n2 3, n3 2, n4 2, n5 1 (15)
    ((_, chosen),) = binder.place([gang(1, 13, 2)], nodes, used)
    # five leaves at least: the four fullest whole, then the best fit for the last rank
    assert sorted(chosen) == ["n0"] * 4 + ["n1"] * 3 + ["n2"] * 3 + ["n3"] * 2 + ["n5"]
    assert binder.place([gang(2, 3, 2)], nodes, used) == []  # n4's 2 slots are all left


def test_node_affinity_operators() -> None:
    labels = {"nvidia.com/gpu.memory": "81920", "zone": "z1"}
    term = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "nvidia.com/gpu.memory",
                                    "operator": "Gt",
                                    "values": ["40959"],
                                }
                            ]
                        }
                    ]
                }
            }
        }
    }
    assert node_matches(term, labels)
    assert not node_matches(term, {"nvidia.com/gpu.memory": "40000"})
    assert node_matches({"nodeSelector": {"zone": "z1"}}, labels)
    assert not node_matches({"nodeSelector": {"zone": "z2"}}, labels)


def test_a_node_not_ready_since_the_api_servers_time_is_parsed() -> None:
    from k8s_bridge.inventory import parse_node

    ready = parse_node(
        {
            "metadata": {"name": "n1"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }
    )
    assert (ready.ready, ready.not_ready_since) == (True, None)
    down = parse_node(
        {
            "metadata": {"name": "n2"},
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "Unknown",
                        "lastTransitionTime": "2026-11-26T04:00:00Z",
                    }
                ]
            },
        }
    )
    assert down.ready is False
    assert down.not_ready_since == 1795665600.0
    unstamped = parse_node({"metadata": {"name": "n3"}, "status": {}})
    assert (unstamped.ready, unstamped.not_ready_since) == (False, None)
