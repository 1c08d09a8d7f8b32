"""Node and partition TRES as the test cluster printed them (Slurm 22.05,
AccountingStorageTRES=gres/gpu,gres/gpu:a100,gres/gpu:v100,license/cscratch1,license/SCRATCH):
`scontrol show node`'s CfgTRES and AllocTRES, `scontrol show partition`'s TRES."""

from __future__ import annotations

from gateway.compat.tres import TresNames, node_alloc_tres, node_tres, partition_tres
from gateway.model.cluster import Node

NAMES = TresNames(
    ("gres/gpu", "gres/gpu:a100", "gres/gpu:v100", "license/cscratch1", "license/SCRATCH")
)
NODE01 = Node(name="node01", cpus=2, memory_mb=2000)
NODE03 = Node(name="node03", cpus=2, memory_mb=2000, gres=(("gpu", None, 2),))
NODE04 = Node(name="node04", cpus=2, memory_mb=2000, gres=(("gpu", "a100", 4),))
BIG070 = Node(name="big070", cpus=256, memory_mb=1_000_000, gres=(("craynetwork", None, 4),))


def test_cfg_tres_counts_the_gres_the_site_accounts() -> None:
    assert node_tres(NODE01, NAMES) == "cpu=2,mem=2000M,billing=2"
    assert node_tres(NODE03, NAMES) == "cpu=2,mem=2000M,billing=2,gres/gpu=2"
    assert node_tres(NODE04, NAMES) == "cpu=2,mem=2000M,billing=2,gres/gpu=4,gres/gpu:a100=4"
    assert node_tres(BIG070, NAMES) == "cpu=256,mem=1000000M,billing=256"  # not accounted
    # no AccountingStorageTRES: every GRES, as Caldera accounts them then
    assert node_tres(BIG070, TresNames()) == "cpu=256,mem=1000000M,billing=256,gres/craynetwork=4"


def test_alloc_tres_is_what_jobs_hold_without_billing() -> None:
    assert node_alloc_tres(NODE04, NAMES, 1, 300, 2) == (
        "cpu=1,mem=300M,gres/gpu=2,gres/gpu:a100=2"
    )
    assert node_alloc_tres(NODE01, NAMES, 2, 200, 0) == "cpu=2,mem=200M"
    assert node_alloc_tres(NODE01, NAMES, 0, 0, 0) == ""


def test_partition_tres_sums_its_nodes_and_adds_the_sites_licences() -> None:
    text = partition_tres(
        [NODE01, NODE01, NODE03, NODE04], NAMES, [("cscratch1", 1000), ("matlab", 8)]
    )
    assert text == (
        "cpu=8,mem=8000M,node=4,billing=8,gres/gpu=6,gres/gpu:a100=4,license/cscratch1=1000"
    )
