"""The batch environment of gateway.compat.job_env against real Slurm 22.05, live.

Every shape of tests/unit/test_job_env.py is submitted to the project's real Slurm cluster;
the environment the job saw is compared with what `batch_environment` builds for the same
request and placement. With CALDERA_UPDATE_GOLDEN=1 the golden files are rewritten from
what Slurm set (then tests/unit/test_job_env.py checks them offline).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.support.slurm_stack import (
    SlurmStack,
    job_id_from_sbatch,
    run_sbatch,
    wait_job,
)
from tests.unit.test_job_env import (
    GOLDEN,
    SHAPES,
    SUBMIT_VARS,
    NodeLine,
    Shape,
    compared,
    expected_environment,
)

pytestmark = pytest.mark.slurm

_PLACEHOLDER_KEYS = {
    "SLURM_JOB_ID": "job_id",
    "SLURM_JOBID": "job_id",
    "SLURM_ARRAY_JOB_ID": "array_job_id",
    "SLURM_SUBMIT_DIR": "submit_dir",
    "SLURM_SUBMIT_HOST": "submit_host",
    "SLURM_CONF": "slurm_conf",
}


def _expand(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        if "(x" in part:
            value, reps = part.rstrip(")").split("(x")
            out += [int(value)] * int(reps)
        else:
            out.append(int(part))
    return out


def _hostnames(stack: SlurmStack, nodelist: str) -> list[str]:
    from tests.support.slurm_stack import scontrol_lines

    return scontrol_lines(["show", "hostnames", nodelist], env=stack.env).split()


def _nodes_of(stack: SlurmStack, env: dict[str, str]) -> list[NodeLine]:
    names = _hostnames(stack, env["SLURM_JOB_NODELIST"])
    cpus = _expand(env["SLURM_JOB_CPUS_PER_NODE"])
    tasks = _expand(env["SLURM_TASKS_PER_NODE"])
    gpus = tuple(int(g) for g in env.get("SLURM_JOB_GPUS", "").split(",") if g)
    return [NodeLine(n, c, t, gpus) for n, c, t in zip(names, cpus, tasks, strict=True)]


def _read_env(path: Path) -> dict[str, str]:
    env: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if "=" in line:
            key, value = line.split("=", 1)
            env[key] = value
    return env


def _golden_text(shape: Shape, nodes: list[NodeLine], env: dict[str, str]) -> str:
    lines = [
        f"# Recorded from real Slurm 22.05: sbatch -J {shape.name} {' '.join(shape.argv)}"
        + (f" (as {shape.user})" if shape.user != "root" else ""),
    ]
    lines += [
        f"# node {n.node} cpus={n.cpus} tasks={n.tasks} gpus={','.join(map(str, n.gpus))}"
        for n in nodes
    ]
    for key in sorted(env):
        value = env[key]
        if key in _PLACEHOLDER_KEYS:
            value = "{" + _PLACEHOLDER_KEYS[key] + "}"
        lines.append(f"{key}={value}")
    return "\n".join(lines) + "\n"


def test_batch_environment_equals_real_slurms(slurm_cluster: SlurmStack) -> None:
    stack = slurm_cluster
    dump_dir = stack.jobs_dir / f"caldera-envdump-{os.getpid()}-{int(time.time())}"
    dump_dir.mkdir(mode=0o1777)
    dump_dir.chmod(0o1777)
    submitted: dict[str, str] = {}
    for shape in SHAPES:
        script = f'#!/bin/bash\nenv > "{dump_dir}/{shape.name}.${{SLURM_ARRAY_TASK_ID:-0}}.env"\n'
        env = {
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": "/root" if shape.user == "root" else f"/home/{shape.user}",
            "SLURM_CONF": str(stack.slurm_conf),
            **SUBMIT_VARS,
        }
        proc = run_sbatch(
            script,
            ["-J", shape.name, "-o", "/dev/null", *shape.argv],
            env,
            cwd=dump_dir,
            user=None if shape.user == "root" else shape.user,
        )
        assert proc.returncode == 0, proc.stderr
        submitted[shape.name] = job_id_from_sbatch(proc.stdout)
    for job_id in submitted.values():
        wait_job(job_id, timeout=180, env=stack.env)

    update = os.environ.get("CALDERA_UPDATE_GOLDEN") == "1"
    mismatches: list[str] = []
    for shape in SHAPES:
        task = shape.array_task if shape.array_task is not None else 0
        real = compared(_read_env(dump_dir / f"{shape.name}.{task}.env"))
        nodes = _nodes_of(stack, real)
        if update:
            GOLDEN.mkdir(parents=True, exist_ok=True)
            (GOLDEN / f"{shape.name}.env").write_text(_golden_text(shape, nodes, real))
        ours = expected_environment(
            shape,
            nodes,
            job_id=int(real["SLURM_JOB_ID"]),
            array_job_id=int(real.get("SLURM_ARRAY_JOB_ID", "0")),
            submit_dir=real["SLURM_SUBMIT_DIR"],
            submit_host=real["SLURM_SUBMIT_HOST"],
            slurm_conf=real["SLURM_CONF"],
        )
        if ours != real:
            diff = sorted(set(ours.items()) ^ set(real.items()))
            mismatches.append(f"{shape.name}: {diff}")
    assert not mismatches, "\n".join(mismatches)
