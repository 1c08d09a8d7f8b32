"""The switch tree of slurm.conf's TopologyPlugin=topology/tree, on Caldera's local site
(`[local] slurm_conf` = the test cluster's slurm.conf, topology.conf beside it: node[01-02]
on leaf1, node[03-04] on leaf2, both under spine1 under core) and on the real Slurm 22.05
cluster.

What the cluster does: every task's SLURM_TOPOLOGY_ADDR is its own node's switches from
the top and its name (`core.spine1.leaf1.node02`), SLURM_TOPOLOGY_ADDR_PATTERN
`switch.switch.switch.node`; Caldera gave the node name alone, and every srun task the
batch host's. With node01 busy a `-N2` job gets node[03-04] (one leaf), not node[02-03],
and a one-node job node02 (the leaf with the fewest free nodes). `scontrol show topology`
lists the switches; Caldera said "No topology information available". Compared: the
script's output and squeue's node lists, byte for byte.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.gateway_env import running_gateway
from tests.support.real_slurm import run_real
from tests.support.slurm_stack import SlurmStack, job_id_from_sbatch

pytestmark = pytest.mark.slurm

Run = Callable[[list[str]], subprocess.CompletedProcess[str]]

_ADDRS = """#!/bin/bash
echo "batch $SLURM_TOPOLOGY_ADDR $SLURM_TOPOLOGY_ADDR_PATTERN"
srun -l bash -c 'echo $SLURMD_NODENAME $SLURM_TOPOLOGY_ADDR $SLURM_TOPOLOGY_ADDR_PATTERN' | sort
"""


def _wait_gone(run: Run, jobs: list[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while run(["squeue", "-h", "-j", ",".join(jobs), "-o", "%i"]).stdout.strip():
        assert time.monotonic() < deadline, f"jobs {jobs} still queued"
        time.sleep(0.5)


def _submit(run: Run, *args: str) -> str:
    done = run(["sbatch", "--parsable", "-p", "real", *args])
    assert done.returncode == 0, done.stderr
    return job_id_from_sbatch(done.stdout)


def _story(run: Run, where: Path) -> list[str]:
    """The addresses a 2-node job's batch script and tasks see, then where jobs go while
    node01 is busy, then scontrol's view of the tree."""
    script = where / f"addrs-{time.time_ns()}.sh"
    script.write_text(_ADDRS)
    out = where / f"addrs-{time.time_ns()}.out"
    job = _submit(run, "-N2", "-n2", "-o", str(out), str(script))
    _wait_gone(run, [job])
    lines = out.read_text().splitlines()
    blocker = _submit(run, "-w", "node01", "-n2", "-o", "/dev/null", "--wrap", "sleep 60")
    jobs = [blocker]
    try:
        deadline = time.monotonic() + 30
        while run(["squeue", "-h", "-j", blocker, "-o", "%t"]).stdout.strip() != "R":
            assert time.monotonic() < deadline, "the blocker never ran"
            time.sleep(0.3)
        for size in ("-N2", "-N1"):
            jobs.append(_submit(run, size, "-o", "/dev/null", "--wrap", "sleep 30"))
        states: list[str] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            states = [run(["squeue", "-h", "-j", j, "-o", "%t %N"]).stdout.strip() for j in jobs]
            if all(st.startswith("R ") for st in states):
                break
            time.sleep(0.3)
        lines += [
            f"{what}: {st}" for what, st in zip(("blocker", "-N2", "-N1"), states, strict=True)
        ]
    finally:
        run(["scancel", *jobs])
    for name in ("", "node02", "leaf2", "nosuch"):
        done = run(["scontrol", "show", "topology", *([name] if name else [])])
        lines += [done.stdout, done.stderr, f"rc={done.returncode}"]
    _wait_gone(run, jobs)
    return lines


def test_topology_addresses_placement_and_show_as_on_slurm(cluster: SlurmStack) -> None:
    where = Path(tempfile.mkdtemp(prefix="topology-", dir="/tmp"))
    where.chmod(0o777)
    try:
        theirs = _story(run_real, where)
        # what the cluster did, so that agreeing means something
        assert "1: node02 core.spine1.leaf1.node02 switch.switch.switch.node" in theirs
        assert "-N2: R node[03-04]" in theirs
        config = f'[local]\nslurm_conf = "{cluster.slurm_conf}"\n'
        with running_gateway(config) as gw:
            ours = _story(lambda argv: gw.run(argv), where)
        assert ours == theirs
    finally:
        shutil.rmtree(where, ignore_errors=True)
