"""MaxArraySize from a `[local] slurm_conf` site, and the node count slurmctld derives
from -n with --ntasks-per-node or -c when no -N is given (issue 14, item 9)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.control.config import load_config
from gateway.control.slurm_conf import SlurmConfError, parse_slurm_conf
from gateway.model.jobspec import JobSpec
from gateway.scheduler.request import node_request

CONF = """ClusterName=t
MaxArraySize=100001
NodeName=node[01-04] CPUs=2 RealMemory=2000
PartitionName=real Nodes=ALL Default=YES
"""


def test_max_array_size_is_read_and_bounded() -> None:
    assert parse_slurm_conf(CONF).max_array_size == 100001
    assert parse_slurm_conf(CONF.replace("MaxArraySize=100001\n", "")).max_array_size is None
    with pytest.raises(SlurmConfError, match="MaxArraySize"):
        parse_slurm_conf(CONF.replace("100001", "4000002"))


def test_a_local_slurm_conf_sets_the_gateways_max_array_size(tmp_path: Path) -> None:
    (tmp_path / "slurm.conf").write_text(CONF)
    (tmp_path / "caldera.toml").write_text('[local]\nslurm_conf = "slurm.conf"\n')
    assert load_config(tmp_path).max_array_size == 100001
    (tmp_path / "caldera.toml").write_text(
        'max_array_size = 50\n[local]\nslurm_conf = "slurm.conf"\n'
    )
    assert load_config(tmp_path).max_array_size == 50  # caldera.toml's own setting wins


def _spec(**kw: object) -> JobSpec:
    return JobSpec(name="x", workdir="/tmp", partitions=("real",), **kw)  # type: ignore[arg-type]


def test_ntasks_per_node_without_nodes_takes_as_many_nodes_as_it_needs() -> None:
    req = node_request(_spec(ntasks=3, ntasks_per_node=1))
    assert (req.nodes, req.tasks_per_node, req.cpus) == (3, (1, 1, 1), 1)
    req = node_request(_spec(ntasks=4, ntasks_per_node=2, nodes_min=1))
    assert req.nodes == 1  # an explicit -N keeps its count


def test_cpus_per_task_as_sbatch_sends_it_still_spreads_the_tasks() -> None:
    # sbatch's `-c 2` also sets the per-node minimum (mincpus) to 2
    assert _spec(ntasks=3, cpus_per_task=2, mincpus=2).spreads_tasks
    assert not _spec(ntasks=3, cpus_per_task=2, mincpus=4).spreads_tasks
