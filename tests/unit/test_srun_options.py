"""srun's option table (containers/srun_options.py) and what srun says of options a step
inside a job has no use for, as the test cluster (Slurm 22.05.8) said it."""

from __future__ import annotations

import pytest

from containers.srun_layout import SrunExit, plan_step
from containers.srun_options import ALIASES, SRUN_OPTIONS, VERSION_TEXT
from gateway.compat.options_help import version_text
from k8s_bridge import pod_launch_plan as lp

ENV = {
    "SLURM_JOB_ID": "8",
    "SLURM_JOB_NODELIST": "node[01-02]",
    "SLURM_JOB_CPUS_PER_NODE": "2(x2)",
    "SLURM_TASKS_PER_NODE": "1(x2)",
    "SLURM_NNODES": "2",
    "SLURM_NTASKS": "2",
    "SLURM_JOB_UID": "1001",
}
WARN = "srun: Warning: can't run 1 processes on 2 nodes, setting nnodes to 1"


def _said(argv: list[str], pods_too: bool = True) -> tuple[list[str], int] | tuple[str, ...]:
    try:
        step = plan_step([*argv, "hostname"], ENV)
    except SrunExit as exc:
        local: tuple[list[str], int] | tuple[str, ...] = (list(exc.lines), exc.status)
    else:
        local = (*step.warnings, *step.nodes)
    if not pods_too:
        return local
    try:
        opts, _ = lp.parse([*argv, "hostname"], ENV)
        nodes, _, _, warnings = lp.plan(opts, ENV)
    except lp.SrunExit as exc:
        pods: tuple[list[str], int] | tuple[str, ...] = (list(exc.lines), exc.status)
    else:
        pods = (*warnings, *nodes)
    assert local == pods  # the pods' srun says the same
    return local


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["-n1", "--gpu-bind=closest", "--cpu-freq=high", "--hint=nomultithread", "-X"],
         (WARN, "node01")),
        (["-n1", "--tasks-per-node=1", "-N1"], ("node01",)),
        (["-O", "-n4", "-N1"], ("node01",)),  # overcommit: 4 tasks on a 2-CPU node
        (["-r", "1", "-N1", "-n1"], ("node02",)),
        (["--begin=now+1", "-n1"],
         (WARN, "srun: error: --begin is ignored because nodes are already allocated.", "node01")),
        (["--het-group=0", "-n1"],
         ([WARN, "srun: error: No directives to start application on any available hetjob "
           "components"], 1)),
        (["-Z", "-n1"],
         (["srun: error: must specify a node list with -Z, --no-allocate.", WARN], 1)),
        (["--uid=0", "-n1"], (["srun: error: --uid only permitted by root user"], 255)),
        (["--overlap=x", "-n1"], (WARN, "node01")),
        (["-n4", "-N1"], (["srun: error: Unable to create step for job 8: More processors "
                           "requested than permitted"], 1)),
        # -r past the allocation (2 nodes; the count is -N's or the job's own: 2026-11-27)
        (["-r1"], (["srun: error: --relative and SLURM_JOB_NUM_NODES option incompatible "
                    "with count of allocated nodes (1+2>2)"], 1)),
        (["-r2", "-N1"], (["srun: error: --relative and --nodes option incompatible with "
                           "count of allocated nodes (2+1>2)"], 1)),
        (["-r5"], (["srun: error: --relative and SLURM_JOB_NUM_NODES option incompatible "
                    "with count of allocated nodes (5+2>2)"], 1)),
        (["-r1", "-n1"], (WARN, "node02")),  # the count is 1 once ntasks has lowered it
        (["-r0", "-w", "node01"], (["srun: error: -r,--relative not allowed with "
                                    "-w,--nodelist or -x,--exclude."], 1)),
        (["-r1", "-x", "node01"], (["srun: error: -r,--relative not allowed with "
                                    "-w,--nodelist or -x,--exclude."], 1)),
    ],
)  # fmt: skip
def test_allocation_options_inside_a_job_as_the_cluster_answered(
    argv: list[str], said: object
) -> None:
    assert _said(argv) == said


def test_cpus_or_memory_per_gpu_ask_for_gpus() -> None:
    no_gres = "srun: error: Step requested GRES but job doesn't have GRES"
    for option in ("--cpus-per-gpu=1", "--mem-per-gpu=10"):
        # (not the pods': their jobs show no SLURM_JOB_GPUS, the device plugin's GPUs)
        lines, status = _said(["-n1", option], pods_too=False)  # type: ignore[misc]
        assert (lines[:2], status) == ([WARN, no_gres], 1)


def test_help_usage_and_version_go_to_stdout_and_exit_0() -> None:
    for option, start in (("--version", VERSION_TEXT), ("--usage", "Usage: srun"), ("-h", "Usage")):
        with pytest.raises(SrunExit) as got:
            plan_step([option], ENV)
        assert (got.value.status, got.value.stdout) == (0, True)
        assert got.value.lines[0].startswith(start)
    assert version_text() == VERSION_TEXT + "\n"  # srun says what sbatch says
    help_text = "\n".join(got.value.lines)
    assert all(f"--{name}" in help_text for name, _, _ in SRUN_OPTIONS if name not in ALIASES)


def test_the_table_is_srun_s_whole_table() -> None:
    names = {name for name, _, _ in SRUN_OPTIONS}
    assert len(SRUN_OPTIONS) == len(names) == 131  # srun 22.05's common_options[] for srun
    assert {"gpu-bind", "hint", "overcommit", "relative", "het-group", "pty"} <= names
