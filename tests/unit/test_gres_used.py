"""`scontrol -d show node`'s GresDrain/GresUsed lines and slurm.conf's NodeAddr/Port, as
the test cluster's slurmctld printed them (Slurm 22.05, GresTypes=gpu,craynetwork,qpu):
node01 (no Gres) `gpu:0,craynetwork:0,qpu:0`; node03 (`gpu:2`, one held)
`gpu:1,craynetwork:0,qpu:0`; node04 (`gpu:a100:4`, two held)
`gpu:a100:2(IDX:0-1),craynetwork:0,qpu:0`; big001 (`gpu:v100:8`, no slurmd)
`gpu:v100:0,craynetwork:0,qpu:0`; `NodeAddr=127.0.0.1 NodeHostName=big001 Port=6898`."""

from __future__ import annotations

import pytest

from gateway.compat.fmt_common import NodeExtras
from gateway.compat.gres_used import gres_used, index_ranges
from gateway.compat.show_fmt import show_node
from gateway.control.slurm_conf import SlurmConfError, parse_slurm_conf
from gateway.model.cluster import Node

TYPES = ("gpu", "craynetwork", "qpu")


def _node(gres: tuple[tuple[str, str | None, int], ...]) -> Node:
    return Node(name="n", cpus=2, memory_mb=2000, gres=gres)


def test_gres_used_per_gres_type_in_its_order() -> None:
    assert gres_used(_node(()), TYPES, (), True) == "gpu:0,craynetwork:0,qpu:0"
    assert gres_used(_node((("gpu", None, 2),)), TYPES, (1,), True) == ("gpu:1,craynetwork:0,qpu:0")
    a100 = _node((("gpu", "a100", 4),))
    assert gres_used(a100, TYPES, (0, 1), True) == "gpu:a100:2(IDX:0-1),craynetwork:0,qpu:0"
    assert gres_used(a100, TYPES, (), True) == "gpu:a100:0(IDX:N/A),craynetwork:0,qpu:0"
    v100 = _node((("gpu", "v100", 8),))
    assert gres_used(v100, TYPES, (), False) == "gpu:v100:0,craynetwork:0,qpu:0"
    cray = _node((("craynetwork", None, 4),))
    assert gres_used(cray, TYPES, (), False) == "gpu:0,craynetwork:0,qpu:0"
    assert gres_used(_node(()), (), (), True) == ""


def test_two_gpu_types_split_the_indices_in_gres_order() -> None:
    node = _node((("gpu", "a100", 2), ("gpu", "v100", 2)))
    assert gres_used(node, ("gpu",), (1, 2, 3), True) == ("gpu:a100:1(IDX:1),gpu:v100:2(IDX:2-3)")


def test_index_ranges_as_bit_fmt_writes_them() -> None:
    assert index_ranges([]) == ""
    assert index_ranges([3, 0, 1]) == "0-1,3"
    assert index_ranges([5]) == "5"
    assert index_ranges([0, 2, 4, 5, 6]) == "0,2,4-6"


def test_details_add_gres_drain_and_gres_used_after_gres() -> None:
    node = _node((("gpu", "a100", 4),))
    extras = NodeExtras(gres_used="gpu:a100:0(IDX:N/A),craynetwork:0,qpu:0")
    lines = show_node(node, extras=extras, details=True).splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("Gres="))
    assert [line.strip() for line in lines[at : at + 3]] == [
        "Gres=gpu:a100:4",
        "GresDrain=N/A",
        "GresUsed=gpu:a100:0(IDX:N/A),craynetwork:0,qpu:0",
    ]
    plain = show_node(node, extras=extras)
    assert "GresDrain" not in plain
    assert "GresUsed" not in plain


def test_slurm_conf_node_addresses_and_ports() -> None:
    conf = parse_slurm_conf(
        "NodeName=n[1-2] NodeAddr=10.0.0.[1-2] CPUs=2 RealMemory=10\n"
        "NodeName=b[1-3] NodeAddr=127.0.0.1 Port=6898 CPUs=2 RealMemory=10\n"
        "NodeName=c1 CPUs=2 RealMemory=10\n"
    )
    got = {n.name: (n.address, n.port) for n in conf.nodes}
    assert got == {
        "n1": ("10.0.0.1", 0),
        "n2": ("10.0.0.2", 0),
        "b1": ("127.0.0.1", 6898),
        "b2": ("127.0.0.1", 6898),
        "b3": ("127.0.0.1", 6898),
        "c1": (None, 0),
    }
    with pytest.raises(SlurmConfError, match="NodeAddr names 2 hosts for 3 nodes"):
        parse_slurm_conf("NodeName=n[1-3] NodeAddr=a[1-2] CPUs=2 RealMemory=10\n")
    line = show_node(
        Node(name="b1", cpus=2, memory_mb=10, address="127.0.0.1", port=6898),
        extras=NodeExtras(address="127.0.0.1", port=6898),
    )
    assert "   NodeAddr=127.0.0.1 NodeHostName=b1 Port=6898 \n" in line
