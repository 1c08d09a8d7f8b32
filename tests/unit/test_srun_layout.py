"""srun's step layout inside an allocation, against what real Slurm 22.05's srun did on
the test cluster in a `sbatch -N 2 -n 4 -w node01,node02` job (2 CPUs per node): each
case below is a line of that job's output (tests/unit data recorded by hand, 2026-11-25)."""

from __future__ import annotations

from pathlib import Path

import pytest

from containers.multi_prog import multi_prog
from containers.srun_io import task_file
from containers.srun_layout import SrunExit, plan_step
from gateway.cli.salloc_cmd import split_command

JOB = {
    "SLURM_JOB_ID": "14909",
    "SLURM_JOB_NODELIST": "node[01-02]",
    "SLURM_JOB_CPUS_PER_NODE": "2(x2)",
    "SLURM_TASKS_PER_NODE": "2(x2)",
    "SLURM_NTASKS": "4",
    "SLURM_NNODES": "2",
}


def _layout(*argv: str) -> tuple[tuple[str, ...], tuple[int, ...], tuple[str, ...]]:
    step = plan_step([*argv, "true"], JOB)
    return step.nodes, step.tasks_per_node, step.warnings


def test_a_plain_step_takes_the_jobs_tasks_on_its_nodes() -> None:
    assert _layout() == (("node01", "node02"), (2, 2), ())
    step = plan_step(["-n", "3", "-N", "2", "true"], JOB)
    assert [step.node_of(r) for r in range(3)] == [(0, 0), (0, 1), (1, 0)]


def test_fewer_tasks_than_nodes_warns_and_shrinks_as_srun_does() -> None:
    assert _layout("-n1") == (
        ("node01",),
        (1,),
        ("srun: Warning: can't run 1 processes on 2 nodes, setting nnodes to 1",),
    )


def test_an_inherited_task_count_overrides_ntasks_per_node_with_srun_warning() -> None:
    nodes, layout, warnings = _layout("--ntasks-per-node=1")
    assert (nodes, layout) == (("node01", "node02"), (2, 2))
    assert warnings == (
        "srun: Warning: can't honor --ntasks-per-node set to 1 which doesn't match the "
        "requested tasks 4 with the number of requested nodes 2. Ignoring --ntasks-per-node.",
    )


def test_openmpis_daemon_launch_gets_one_task_per_node() -> None:
    argv = "--ntasks-per-node=1 --kill-on-bad-exit --cpu-bind=none --nodes=2"
    nodes, layout, warnings = _layout(*argv.split(), "--nodelist=node[01-02]", "--ntasks=2")
    assert (nodes, layout) == (("node01", "node02"), (1, 1))
    # the one line the test cluster's srun prints for any --cpu-bind (TaskPlugin=task/none)
    assert warnings == ("srun: cluster configuration lacks support for cpu binding",)


def test_nodelist_names_required_nodes_and_the_count_is_still_the_jobs() -> None:
    assert _layout("-w", "node02")[:2] == (("node01", "node02"), (2, 2))


@pytest.mark.parametrize(
    ("argv", "lines", "status"),
    [
        (
            ["-n", "8"],
            [
                "srun: error: Unable to create step for job 14909: More processors requested than "
                "permitted"
            ],
            1,
        ),
        (["-N", "3"], ["srun: error: Only allocated 2 nodes asked for 3"], 1),
        (
            ["-w", "node04"],
            [
                "srun: error: Unable to create step for job 14909: Requested node configuration "
                "is not available"
            ],
            1,
        ),
        (
            ["-N", "1"],
            [
                "srun: error: Unable to create step for job 14909: More processors "
                "requested than permitted"
            ],
            1,
        ),
        (["-n", "0"], ['srun: error: Invalid numeric value "0" for --ntasks.'], 1),
        (
            ["--bogus"],
            ["srun: unrecognized option '--bogus'", 'Try "srun --help" for more information'],
            255,
        ),
        (
            ["--exclusive", "--overlap"],
            ["srun: error: --exclusive and --overlap are mutually exclusive"],
            1,
        ),
    ],
)
def test_refusals_are_sruns(argv: list[str], lines: list[str], status: int) -> None:
    with pytest.raises(SrunExit) as refused:
        plan_step([*argv, "true"], JOB)
    assert (list(refused.value.lines), refused.value.status) == (lines, status)


def test_no_command_is_sruns_fatal_error() -> None:
    with pytest.raises(SrunExit) as refused:
        plan_step([], JOB)
    assert refused.value.lines == ("srun: fatal: No command given to execute.",)


def test_per_task_file_names_and_multi_prog(tmp_path: Path) -> None:
    step = plan_step(["-n", "3", "true"], JOB)
    assert [task_file("out-%t-%N-%j.%s-%3t", step, 5, r, JOB) for r in range(3)] == [
        "out-0-node01-14909.5-000",
        "out-1-node01-14909.5-001",
        "out-2-node02-14909.5-002",
    ]
    conf = tmp_path / "mp.conf"
    conf.write_text("# ranks program\n0 echo first %t\n1-2 echo rest %o\n")
    assert multi_prog(str(conf), 3) == [
        ["echo", "first", "0"],
        ["echo", "rest", "0"],
        ["echo", "rest", "1"],
    ]


@pytest.mark.parametrize(
    ("argv", "options", "command"),
    [
        (
            ["-N", "2", "-p", "real", "hostname", "-s"],
            ["-N", "2", "-p", "real"],
            ["hostname", "-s"],
        ),
        (["--exclusive", "bash", "-c", "x"], ["--exclusive"], ["bash", "-c", "x"]),
        (["-N2", "--partition=real"], ["-N2", "--partition=real"], []),
        (["--nodes", "2", "--", "-weird"], ["--nodes", "2"], ["-weird"]),
        ([], [], []),
    ],
)
def test_salloc_finds_its_command_after_the_options(
    argv: list[str], options: list[str], command: list[str]
) -> None:
    assert split_command(argv) == (options, command)
