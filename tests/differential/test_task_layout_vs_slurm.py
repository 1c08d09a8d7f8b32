"""Task layouts beyond CPUs per task: `-n N --gpus-per-task=G` without a node count (the
tasks spread over as many nodes as their CPUs and GPUs need) and `-O`/`--overcommit`, on
Caldera's local site (described by the test cluster's
slurm.conf: 2-CPU nodes, node03 `gpu:2`, node04 `gpu:a100:4`) and on the real Slurm 22.05
cluster, one job at a time on an idle partition.

What the cluster does: `-n4 --gpus-per-task=1` runs two tasks on each of node03 and node04
(`gres/gpu=4`); Caldera asked every node for the GPUs of all four tasks and refused the
job. With -O each node gives one task's CPUs whatever its tasks: `-n5 -O` runs on one
2-CPU node (cpu=1), `-N2 -n6 -O` three tasks on each of two (cpu=2), `-n9 -O` on one node
although the partition has eight CPUs; Caldera spread or refused them. `--tmp=100` is
refused (`Temporary disk specification can not be satisfied`: the nodes' TmpDisk is 0);
Caldera ran it. A job-wide `--gpus=G` no node holds goes over several nodes, each given
what it has while the next keep one (`--gpus=6`: node03 2, node04 4; `--gpus=5 -n2`: 2 and
3), and with -N the GPUs are split the same way (`-N2 --gpus=3`: 2 + 1); Caldera asked one
node for all G and refused it, or each of N nodes for G / N rounded up. `-n3
--ntasks-per-node=2` gives each of its two nodes two tasks' CPUs (NumTasks=4 once it
runs; SLURM_NTASKS stays 3); Caldera laid it out 2,1. `-n3 --gres=gpu:1` (GPUs per node,
no node count) runs on node[03-04] with a GPU on each (`gres/gpu=2`); Caldera kept such
jobs on one node and refused them. Compared as in
test_nodelist_vs_slurm.py: sbatch's answer, SLURM_JOB_NODELIST,
SLURM_NNODES, SLURM_TASKS_PER_NODE, and scontrol's NodeList, NumNodes, NumCPUs, NumTasks
and TRES once it completed.

Still different (not compared): `-n3 --gpus-per-task=1` and `--gpus=6 -n3` are laid out
1,2 there (2,1 here: node03 first, filled as far as it goes), and `-n2 --gpus-per-task=2`
takes node04 alone there (node03 and node04 here): slurmctld's GPU-aware layout prefers
the node with more GPUs, which Caldera's does not model.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from tests.support.gateway_env import running_gateway
from tests.support.placed_jobs import Run, placed
from tests.support.real_slurm import run_real
from tests.support.slurm_stack import SlurmStack

pytestmark = pytest.mark.slurm

_REQUESTS = (
    ("-n4", "--gpus-per-task=1"),  # node[03-04], two each (refused before)
    ("-n6", "--gpus-per-task=1"),  # 2 + 2 CPUs with GPUs: never, refused
    ("-n3", "--gpus-per-task=2"),  # node03 one task, node04 two
    ("-n2", "--gpus-per-task=a100:1"),  # node04 only
    ("-n5", "-O"),
    ("-n2", "-c2", "-O"),
    ("-N2", "-n6", "-O"),
    ("-n9", "-O"),
    ("--tmp=100",),  # TmpDisk=0 everywhere: refused, saying why
    ("--tmp=0",),
    ("--gpus=3",),  # node04 alone holds them
    ("--gpus=6",),  # no node has 6: node03 2 + node04 4 (refused before)
    ("--gpus=5", "-n2"),  # node03 2 + node04 3
    ("--gpus=6", "-n4"),  # 2,2 tasks
    ("--gpus=7",),  # more than the partition has: refused
    ("-N2", "--gpus=3"),  # 2 + 1 (4 GPUs before)
    ("-N2", "--gpus=5"),  # 2 + 3 (refused before)
    ("-N2", "--gpus=2", "-n3"),  # 1 + 1, tasks 2,1
    ("-n3", "--ntasks-per-node=2"),  # two nodes of two tasks: NumTasks=4 (2,1 before)
    ("-n5", "--ntasks-per-node=2"),  # three nodes of two
    ("-n3", "--gres=gpu:1"),  # node[03-04], a GPU on each (refused before)
    ("-n2", "-c2", "--gres=gpu:1"),  # the same, one task each
    ("-n3", "--gpus-per-node=2"),  # node[03-04], gres/gpu=4
    ("-n5", "--gres=gpu:1"),  # more CPUs than the GPU nodes have: refused
)


def _all(run: Run, where: Path) -> dict[tuple[str, ...], list[str]]:
    return {args: placed(run, where, args) for args in _REQUESTS}


def test_tasks_with_gpus_each_or_overcommitted_are_laid_out_as_on_slurm(
    cluster: SlurmStack,
) -> None:
    where = Path(tempfile.mkdtemp(prefix="task-layout-", dir="/tmp"))
    where.chmod(0o777)
    try:
        theirs = _all(run_real, where)
        assert theirs[_REQUESTS[0]] == [  # what the cluster did, so agreeing means something
            "node[03-04] 2 2(x2)",
            "COMPLETED|node[03-04]|2|4|4|cpu=4,mem=400M,node=2,billing=4,gres/gpu=4,"
            "gres/gpu:a100=2",
        ]
        config = f'[local]\nslurm_conf = "{cluster.slurm_conf}"\n'
        with running_gateway(config) as gw:
            ours = _all(lambda argv: gw.run(argv), where)
        for args in _REQUESTS:
            assert ours[args] == theirs[args], (args, ours[args], theirs[args])
    finally:
        shutil.rmtree(where, ignore_errors=True)
