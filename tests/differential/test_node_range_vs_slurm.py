"""`-N MIN-MAX`: Caldera's local site (described by the test cluster's slurm.conf: 2-CPU
nodes) and the real Slurm 22.05 cluster given the same requests, one job at a time on an
idle partition.

What the cluster does: a node range is not "MIN nodes": slurmctld gives the job as many
free nodes as it may, up to MAX and one task each at least, and splits the tasks over them
in blocks (`-N1-4 -n3`: three nodes, one task each; `-N1-2 -n3`: 2,1); without a task
count each node gets --ntasks-per-node tasks (one by default: `-N2-4` takes all four).
Caldera took MIN nodes and refused `-N1-2 -n3` ("Requested node configuration is not
available"). While held, scontrol's NumNodes (and TRES) estimates MIN-MAX as slurmctld does
(`-N1-2 -n3`: 2-2). `--spread-job` places `-n N` as `-N1-N` would (Caldera ignored it).
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.support.gateway_env import running_gateway
from tests.support.placed_jobs import Run, placed
from tests.support.real_slurm import run_real
from tests.support.slurm_stack import SlurmStack, cancel, job_id_from_sbatch

pytestmark = pytest.mark.slurm

_REQUESTS = (
    ("-N1-2", "-n3"),
    ("-N1-4", "-n2"),
    ("-N2-3", "-n3"),
    ("-N1-4", "-n3"),
    ("-N1-2", "-n4"),
    ("-N1-3", "-n2", "-c2"),
    ("-N1-2", "-n3", "--gres=gpu:1"),  # the two GPU nodes
    ("-w", "node02", "-N1-3", "-n2"),
    ("-N1-2", "-n5"),  # two 2-CPU nodes at most: refused
    ("-N2-4",),  # no task count: every node it may have, a task each
    ("-N2-4", "--ntasks-per-node=2"),
    ("-n3", "--spread-job"),  # three nodes, a task each (Caldera ignored it: two)
    ("-n6", "--spread-job"),  # four nodes, 2,2,1,1
)
_HELD = (
    ("-N1-2", "-n3"),
    ("-N1-4", "-n2"),
    ("-N2-4", "-n3"),
    ("-N1-2", "-n3", "--gres=gpu:1"),
    ("-n3", "--gres=gpu:1"),  # NumNodes=2, but TRES node=1 and gres/gpu=1 (its minimum)
    ("-n3", "--gpus-per-node=2"),
)


def _held(run: Run, args: tuple[str, ...]) -> str:
    done = run(["sbatch", "--parsable", "-H", "-p", "real", *args, "--wrap", "true"])
    job = job_id_from_sbatch(done.stdout)
    text = run(["scontrol", "show", "job", job]).stdout
    cancel(job) if run is run_real else run(["scancel", job])
    shown = re.findall(r"\b(NumNodes|NumCPUs|NumTasks|TRES)=(\S+)", text)
    return " ".join(f"{k}={v}" for k, v in shown)


def _all(run: Run, where: Path) -> list[object]:
    return [*(placed(run, where, args) for args in _REQUESTS), *(_held(run, a) for a in _HELD)]


def test_a_node_range_takes_as_many_nodes_as_it_may_as_on_slurm(cluster: SlurmStack) -> None:
    where = Path(tempfile.mkdtemp(prefix="noderange-", dir="/tmp"))
    where.chmod(0o777)
    try:
        theirs = _all(run_real, where)
        # what the cluster did, so that agreeing means something
        assert theirs[0] == [
            "node[01-02] 2 2,1",
            "COMPLETED|node[01-02]|2|3|3|cpu=3,mem=300M,node=2,billing=3",
        ]
        assert theirs[3] == [
            "node[01-03] 3 1(x3)",
            "COMPLETED|node[01-03]|3|3|3|cpu=3,mem=300M,node=3,billing=3",
        ]
        assert theirs[len(_REQUESTS)] == (
            "NumNodes=2-2 NumCPUs=3 NumTasks=3 TRES=cpu=3,mem=300M,node=1,billing=3"
        )
        config = f'[local]\nslurm_conf = "{cluster.slurm_conf}"\n'
        with running_gateway(config) as gw:
            ours = _all(lambda argv: gw.run(argv), where)
        for args, mine, real in zip(_REQUESTS + _HELD, ours, theirs, strict=True):
            assert mine == real, (args, real)
    finally:
        shutil.rmtree(where, ignore_errors=True)
