"""Nodes and pods of the API server as the gateway sees them."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.model.cluster import NodeState
from k8s_bridge.inventory import (
    cluster_state,
    gpu_type_of,
    parse_node,
    parse_quantity,
    parse_usage,
    pod_requests,
    quantity_int,
)
from k8s_bridge.options import K8sOptions, Toleration


def node_obj(name: str, **extra: Any) -> dict[str, Any]:
    labels = {
        "topology.caldera.io/leaf": "leaf-0",
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
        "nvidia.com/gpu.memory": "81920",
        "feature.caldera.io/nvme": "true",
    }
    labels.update(extra.pop("labels", {}))
    obj: dict[str, Any] = {
        "metadata": {"name": name, "labels": labels},
        "spec": extra.pop("spec", {}),
        "status": {
            "allocatable": {
                "cpu": "64",
                "memory": "512Gi",
                "pods": "110",
                "nvidia.com/gpu": "8",
                "rdma/hca": "8",
            },
            "conditions": [{"type": "Ready", "status": extra.pop("ready", "True")}],
        },
    }
    return obj


def test_quantities() -> None:
    assert quantity_int("cpu", "500m") == 500
    assert quantity_int("cpu", "2") == 2000
    assert quantity_int("memory", "1Gi") == 2**30
    assert quantity_int("memory", "1e3") == 1000
    assert quantity_int("memory", "129M") == 129_000_000
    assert parse_quantity("1.5") == parse_quantity("1500m")
    with pytest.raises(ValueError, match="invalid quantity"):
        parse_quantity("12XB")


def test_nodes_become_gateway_nodes_with_gpus_rdma_topology_and_features() -> None:
    state = cluster_state("east", [parse_node(node_obj("n1"))], K8sOptions())
    (node,) = state.nodes
    assert (node.cpus, node.memory_mb) == (64, 512 * 1024)
    assert node.gres == (("gpu", "a100", 8),)
    assert len(node.gpus) == 8
    assert node.gpus[0].memory_total == 81920 * 2**20
    assert len(node.nics) == 8
    assert node.switch == "leaf-0"
    assert {"nvme", "a100", "ib", "rdma"} <= set(node.features)
    assert node.state is NodeState.IDLE


def test_partitions_are_the_cluster_default_plus_a_node_label() -> None:
    nodes = [
        parse_node(node_obj("n1")),
        parse_node(node_obj("n2", labels={"caldera.io/partition": "big"})),
    ]
    state = cluster_state("east", nodes, K8sOptions(default_partition="k8s"))
    parts = {p.name: p for p in state.partitions}
    assert parts["k8s"].nodes == ("n1", "n2")
    assert parts["k8s"].default
    assert parts["big"].nodes == ("n2",)
    assert not parts["big"].default


def test_unready_cordoned_and_tainted_nodes_are_not_usable() -> None:
    taint = {"taints": [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]}
    nodes = [
        parse_node(node_obj("down", ready="False")),
        parse_node(node_obj("cordoned", spec={"unschedulable": True})),
        parse_node(node_obj("tainted", spec=taint)),
    ]
    states = {n.name: n for n in cluster_state("east", nodes, K8sOptions()).nodes}
    assert states["down"].state is NodeState.DOWN
    assert states["cordoned"].state is NodeState.DRAINED
    assert states["tainted"].state is NodeState.DRAINED
    assert states["tainted"].reason == "taint dedicated=infer:NoSchedule"
    tolerant = K8sOptions(tolerations=(Toleration("dedicated"),))
    (ok,) = cluster_state("east", [nodes[2]], tolerant).nodes
    assert ok.state is NodeState.IDLE


def test_pod_requests_and_usage() -> None:
    spec = {
        "nodeName": "n1",
        "containers": [
            {"resources": {"requests": {"cpu": "500m"}, "limits": {"nvidia.com/gpu": "2"}}},
            {"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
        ],
        "initContainers": [{"resources": {"requests": {"cpu": "4"}}}],
    }
    assert pod_requests(spec) == {"pods": 1, "cpu": 4000, "nvidia.com/gpu": 2, "memory": 2**30}
    obj = {"metadata": {"name": "p", "namespace": "ns"}, "spec": spec, "status": {}}
    usage = parse_usage(obj)
    assert usage is not None
    assert (usage.key, usage.node) == ("ns/p", "n1")
    assert parse_usage({**obj, "status": {"phase": "Succeeded"}}) is None


def test_gpu_model_names() -> None:
    assert gpu_type_of("NVIDIA-A100-SXM4-80GB") == "a100"
    assert gpu_type_of("NVIDIA-H100-80GB-HBM3") == "h100"
    assert gpu_type_of("Tesla-V100-PCIE-32GB") == "v100"
