"""Steps that share a job's CPUs and memory, on Caldera's local site (described by the test
cluster's slurm.conf: 2-CPU nodes, DefMemPerCPU=100) and on the real Slurm 22.05 cluster:
which steps wait ("step creation temporarily disabled"), which run side by side, which are
refused and why, on which nodes, and what sacct records (AllocCPUS, NodeList, whether a
step ran with the first one or after it).

What the cluster does (containers/step_alloc.py follows step_mgr.c): a step without
--exact takes every CPU the job has on its nodes, so `srun -n1 ... &` twice in a one-node
job run one after the other; --exact (or -c) takes only its tasks' CPUs; steps carry the
job's memory per CPU from SLURM_MEM_PER_CPU and hold it; --overlap is refused memory that
other steps hold; a memory request above the job's is refused at once, as is a busy step
under `srun -I`; steps pick the job's nodes that no step uses.

GPUs (node03 gpu:2, node04 gpu:a100:4, fake devices): a step holds the lowest of the job's
GPUs no other step holds and sees only them (CUDA_VISIBLE_DEVICES, SLURM_STEP_GPUS); a step
with no GPU option takes the job's own and waits for them; --overlap does not wait;
requests beyond the job's are refused with slurmctld's words; sacct's AllocTRES counts the
step's GPUs. A step refused after slurmctld numbered it (memory) uses up its id.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.gateway_env import running_gateway
from tests.support.real_slurm import real_jobs, run_real
from tests.support.slurm_stack import SlurmStack

pytestmark = pytest.mark.slurm

Run = Callable[[list[str]], subprocess.CompletedProcess[str]]

_NODE = "bash -c 'echo $SLURMD_NODENAME'"
_SHOW = "echo $SLURMD_NODENAME ${CUDA_VISIBLE_DEVICES-none} ${SLURM_STEP_GPUS-none} "
_SHOW += "${SLURM_GPUS_ON_NODE-none}"
_GPUS = f"bash -c '{_SHOW}'"
# name: (sbatch options, script); each pinned to its nodes, so both sides place them alike
_SCENARIOS: dict[str, tuple[tuple[str, ...], str]] = {
    "whole": (
        ("-w", "node01", "-N1", "-n2"),
        f"srun -n1 sleep 3 & sleep 1; srun -n1 {_NODE}; echo rc=$?; wait",
    ),
    "nodes": (
        ("-w", "node[01-04]", "-N4", "-n4"),
        f"srun -N2 -n2 sleep 6 & sleep 1; srun -N2 -n2 {_NODE} | sort; srun -N1 -n1 {_NODE}; wait",
    ),
    "overlap": (
        ("-w", "node02", "-N1", "-n2"),
        f"srun -n1 sleep 4 & sleep 1; srun -n1 --overlap {_NODE}; echo rc=$?; wait",
    ),
    "memory": (
        ("-w", "node03", "-N1", "-n2", "--mem=1000"),
        f"srun -n1 --mem=400 sleep 3 & sleep 1; srun -n1 --mem=400 {_NODE}; sleep 1; "
        f"srun -n1 --mem=700 {_NODE}; srun -n1 --mem=1500 true; echo rc=$?; "
        "srun -n2 --mem=3000 true; echo rc=$?; wait",
    ),
    "two-nodes": (
        ("-w", "node[03-04]", "-N2", "-n2"),
        f"srun -n2 sleep 4 & sleep 1; srun -I -n1 true; echo rc=$?; srun -n1 {_NODE}; wait",
    ),
    "exact": (
        ("-w", "node04", "-N1", "-n2"),
        "srun --mem=abc true; echo rc=$?; srun --exact --whole true; echo rc=$?; "
        f"srun -n1 --exact sleep 6 & sleep 1; srun -n1 --exact {_NODE}; sleep 1; "
        f"srun -n1 -c1 {_NODE}; sleep 1; srun -n2 --exact {_NODE}; wait",
    ),
    "exact-nodes": (
        ("-w", "node[01-02]", "-N2", "-n4"),
        f"srun -N1 -n1 --exact sleep 5 & sleep 1; srun -N2 -n2 --exact {_NODE} | sort; "
        f"srun -w node03 -n1 true; echo rc=$?; srun -n 3 {_NODE} | sort; wait",
    ),
    "gpus": (
        ("-w", "node04", "-N1", "-n2", "--gres=gpu:4"),
        f"srun -n1 --exact --gres=gpu:2 bash -c '{_SHOW}; sleep 5' & sleep 1; "
        f"srun -n1 --exact --gres=gpu:2 {_GPUS} & sleep 2; "
        f"srun -n1 --overlap --gres=gpu:1 {_GPUS}; echo rc=$?; wait; "
        f"srun -n1 {_GPUS}; srun -n1 --gres=none {_GPUS}",
    ),
    "gpu-wait": (
        ("-w", "node03", "-N1", "-n2", "--gres=gpu:2"),
        "srun -n1 --exact --gres=gpu:2 sleep 4 & sleep 1; "
        f"srun -n1 --exact {_GPUS}; srun -n1 --gres=gpu:3 true; echo rc=$?; "
        "srun -n1 --gres=gpu:a100:1 true; echo rc=$?; wait",
    ),
    "gpu-nodes": (
        ("-w", "node[03-04]", "-N2", "-n2", "--gpus=3"),
        f"srun -n2 {_GPUS} | sort; srun -N1 -n1 true; echo rc=$?; "
        "srun -N2 -n2 --gpus=1 true; echo rc=$?",
    ),
}


# (each first step lasts long enough for the steps meant to run beside it to start under
# load: srun takes 30 ms on the cluster, 70 ms here, more on a busy CI machine)


def _rows(run: Run, job: str, steps: int) -> list[str] | None:
    """sacct's steps once all have ended: id, state, code, nodes, CPUs, TRES, and whether
    the step started while step 0 ran (`with`) or after it (`after`)."""
    fields = "JobID,State,ExitCode,NodeList,AllocCPUS,AllocTRES,Start,End"
    rows = run(["sacct", "-n", "-P", "-j", job, "-o", fields]).stdout.splitlines()
    numbered = [r.split("|") for r in rows if re.match(rf"{job}\.\d+\|", r)]
    if len(numbered) < steps or any(r[1] in ("RUNNING", "PENDING") for r in numbered):
        return None
    first_end = numbered[0][7]
    out = []
    for r in numbered:
        when = "" if r is numbered[0] else (" after" if r[6] >= first_end else " with")
        out.append("|".join(["JOB" + r[0][len(job) :], *r[1:6]]) + when)
    return out


def _scenarios(run: Run, submit: Callable[..., str], where: Path) -> dict[str, list[str]]:
    jobs = {
        name: submit("-p", "real", *opts, "-o", str(where / f"{name}-%j.out"), "--wrap", script)
        for name, (opts, script) in _SCENARIOS.items()
    }
    seen: dict[str, list[str]] = {}
    deadline = time.monotonic() + 180
    while len(seen) < len(jobs):
        assert time.monotonic() < deadline, f"not ended: {set(jobs) - set(seen)}"
        time.sleep(1)
        for name, job in jobs.items():
            out = where / f"{name}-{job}.out"
            if name in seen or not out.exists():
                continue
            rows = _rows(run, job, _SCENARIOS[name][1].count("srun ") - _refused(out))
            if rows is not None:
                text = re.sub(rf"(?<![\w\[\-]){job}\b", "JOB", out.read_text())
                seen[name] = [*text.splitlines(), *rows]
    return seen


def _refused(out: Path) -> int:
    """sruns of the script that never made a step (each says so once)."""
    text = out.read_text()
    return (
        text.count("Unable to create step")
        + text.count("srun: error: Invalid --")
        + (text.count("mutually exclusive"))
    )


def test_steps_share_the_job_as_on_slurm(cluster: SlurmStack) -> None:
    where = Path(tempfile.mkdtemp(prefix="step-share-", dir="/tmp"))
    where.chmod(0o777)
    try:
        with real_jobs() as submit:
            theirs = _scenarios(run_real, submit, where)
        # the scenarios ran as meant on the cluster
        busy = "srun: Job JOB step creation temporarily disabled, retrying (Requested nodes are "
        busy += "busy)"
        assert busy in theirs["whole"]
        assert "JOB.1|COMPLETED|0:0|node[03-04]|2|cpu=2,mem=200M,node=2 with" in theirs["nodes"]
        assert "node04 2,3 2,3 2" in theirs["gpus"]  # the second step's own GPUs
        config = f'[local]\nslurm_conf = "{cluster.slurm_conf}"\n'
        with running_gateway(config) as gw:
            ours = _scenarios(lambda argv: gw.run(argv), lambda *args: str(gw.sbatch(*args)), where)
        for name in _SCENARIOS:
            assert ours[name] == theirs[name], (name, theirs[name])
    finally:
        shutil.rmtree(where, ignore_errors=True)
