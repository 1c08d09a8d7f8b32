"""srun's --cpu-bind values and the options it takes from its environment, as Slurm 22.05's
srun reads them (slurm_verify_cpu_bind, its env_vars table), and where it finds a program."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from containers.srun import resolved
from containers.srun_layout import NO_CPU_BINDING, SrunExit, plan_step

JOB = {
    "SLURM_JOB_ID": "14909",
    "SLURM_JOB_NODELIST": "node[01-02]",
    "SLURM_JOB_CPUS_PER_NODE": "4(x2)",
    "SLURM_TASKS_PER_NODE": "2(x2)",
    "SLURM_NTASKS": "4",
    "SLURM_NNODES": "2",
}
_FATAL = "srun: fatal: Failed to parse --cpu-bind= values."


@pytest.mark.parametrize(
    "value",
    [
        # LUMI's example: hex masks without 0x, a `,` before a letter included
        "mask_cpu:E000000000000000,00000000000E0000,0000000000E00000,FE",
        "mask_cpu:0x3,0xc",
        "map_cpu:0,1*2,3",
        "MAP_LDOM:0,1",
        "maskldom=f,f0",
        "verbose,map_cpu:1,2",
        "cores,v",
        "rank_ldom",
        "q,none",
    ],
)
def test_cpu_bind_values_slurm_accepts_run_the_step(value: str) -> None:
    step = plan_step([f"--cpu-bind={value}", "true"], JOB)
    assert step.warnings == (NO_CPU_BINDING,)


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("boards", 'unrecognized --cpu-bind argument "boards"'),
        ("verbose,gpu", 'unrecognized --cpu-bind argument "gpu"'),
        ("map_cpu", 'missing list for "--cpu-bind=map_cpu:<list>"'),
        ("map_cpu:0,a", "Failed to validate number: a, the offending character is a"),
        ("mask_cpu:3*x", "Failed to validate number: *x, the offending character is x"),
        ("mask_cpu:3*0", "Invalid mask_cpu multiplier: 0"),
    ],
)
def test_cpu_bind_values_slurm_refuses_are_refused_as_srun(value: str, error: str) -> None:
    with pytest.raises(SrunExit) as refused:
        plan_step([f"--cpu-bind={value}", "true"], JOB)
    assert refused.value.lines == (NO_CPU_BINDING, f"srun: error: {error}", _FATAL)


def test_slurm_cpu_bind_in_the_environment_is_a_cpu_bind() -> None:
    """ULHPC's scoop launcher exports SLURM_CPU_BIND=none: the test cluster's srun then
    prints its line about cpu binding, as for --cpu-bind=none."""
    step = plan_step(["true"], {**JOB, "SLURM_CPU_BIND": "none"})
    assert step.warnings == (NO_CPU_BINDING,)
    assert step.options["cpu-bind"] == "none"
    with pytest.raises(SrunExit):
        plan_step(["true"], {**JOB, "SLURM_CPU_BIND": "bogus"})


def test_srun_cpus_per_task_is_read_and_the_command_line_wins() -> None:
    env = {**JOB, "SRUN_CPUS_PER_TASK": "2"}
    assert plan_step(["-n2", "true"], env).cpus_per_task == 2
    assert plan_step(["-n2", "-c1", "true"], env).cpus_per_task == 1
    with pytest.raises(SrunExit) as refused:  # 4 tasks of 2 CPUs on 2 nodes of 4: 2 too many
        plan_step(["-N1", "-n4", "true"], env)
    assert "More processors requested than permitted" in refused.value.lines[-1]


def test_labelio_and_output_modes_come_from_the_environment() -> None:
    env = {**JOB, "SLURM_LABELIO": "1", "SLURM_STDOUTMODE": "out-%t"}
    options = plan_step(["true"], env).options
    assert "label" in options
    assert options["output"] == "out-%t"
    assert plan_step(["-o", "x", "true"], env).options["output"] == "x"


def test_a_bare_name_not_in_path_stays_bare_for_execve_in_the_cwd(tmp_path: Path) -> None:
    """slurmstepd's _build_path: PATH only; execve then finds `inner_job.sh` in the working
    directory (ULHPC's gurobi launcher), and the task sees the bare name as $0."""
    script = tmp_path / "inner_job.sh"
    script.write_text("#!/bin/sh\n")
    os.chmod(script, 0o755)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "tool").write_text("")  # found even when not executable (stat only)
    cwd = str(tmp_path)
    path = f":{bindir}::/usr/bin"
    assert resolved("inner_job.sh", path, cwd) == "inner_job.sh"
    assert resolved("tool", path, cwd) == f"{bindir}/tool"
    assert resolved("./inner_job.sh", path, cwd) == f"{cwd}/./inner_job.sh"
    assert resolved("/bin/true", path, cwd) == "/bin/true"
    assert resolved("bin", "/nonexistent:" + cwd, cwd) == "bin"  # a directory is skipped
