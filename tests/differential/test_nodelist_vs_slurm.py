"""`-w` names nodes a job must include, not the only ones it may have: Caldera's local site
(described by the test cluster's slurm.conf: 2-CPU nodes) and the real Slurm 22.05 cluster
given the same requests, one job at a time on an idle partition.

What the cluster does: sbatch sets only the minimum node count from the list (`_opt_verify`),
so slurmctld adds nodes when the tasks need more (`-w node01 -n3`: node[01-02]) or -N asks
for more (`-w node01 -N2`); each listed node is in the allocation (`-w node[01-02] -n2`:
one task each); a request one of the listed nodes can never hold is refused. `-x` nodes
are never used (Caldera's scheduler ignored -x), a request the other nodes could never hold
is refused, and a node both listed and excluded, or unknown, is an invalid name. Compared:
sbatch's answer, the job's SLURM_JOB_NODELIST, SLURM_NNODES and SLURM_TASKS_PER_NODE,
and scontrol's NodeList, NumNodes, NumCPUs and NumTasks once it completed.
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
from tests.support.slurm_stack import SlurmStack

pytestmark = pytest.mark.slurm

_REQUESTS = (
    ("-w", "node01", "-N2"),
    ("-w", "node01", "-n3"),
    ("-w", "node01", "-n3", "--ntasks-per-node=1"),
    ("-w", "node[01-02]", "-n2"),
    ("-w", "node02", "-n5"),
    ("-w", "node[01-02]", "-n4"),
    ("-w", "node01", "-n3", "--gres=gpu:1"),  # node01 has no GPU: refused
    ("-w", "node03", "-n3", "--gres=gpu:1"),  # node04 added, a GPU each
    ("-w", "node01", "-N1", "-n3"),  # one 2-CPU node for three tasks: refused
    (
        "-x",
        "node[01-03]",
    ),  # runs on node04 (Caldera's scheduler ignored -x)
    ("-x", "node01", "-N3", "-n6"),  # node[02-04]
    ("-x", "node01", "-N4"),  # three nodes left: refused
    ("-x", "node01", "-n7"),  # six CPUs left: refused
    ("-w", "node01", "-x", "node01"),  # Invalid node name specified
    (
        "-x",
        "nodeZ",
    ),  # Invalid node name specified
)


def _all(run: Run, where: Path) -> dict[tuple[str, ...], list[str]]:
    return {args: placed(run, where, args) for args in _REQUESTS}


def test_a_node_list_is_the_nodes_a_job_must_include_as_on_slurm(cluster: SlurmStack) -> None:
    where = Path(tempfile.mkdtemp(prefix="nodelist-", dir="/tmp"))
    where.chmod(0o777)
    try:
        theirs = _all(run_real, where)
        # what the cluster did, so that agreeing means something
        assert theirs[_REQUESTS[1]] == [
            "node[01-02] 2 2,1",
            "COMPLETED|node[01-02]|2|3|3|cpu=3,mem=300M,node=2,billing=3",
        ]
        assert theirs[_REQUESTS[3]][0] == "node[01-02] 2 1(x2)"
        assert re.match(r"sbatch: error: .*not available", theirs[_REQUESTS[6]][0])
        config = f'[local]\nslurm_conf = "{cluster.slurm_conf}"\n'
        with running_gateway(config) as gw:
            ours = _all(lambda argv: gw.run(argv), where)
        for args in _REQUESTS:
            assert ours[args] == theirs[args], (args, theirs[args])
    finally:
        shutil.rmtree(where, ignore_errors=True)
