"""srun's and slurmctld's exit statuses of a step, against real Slurm 22.05 on the test
cluster (2026-11-26, jobs of `sbatch -p real`; tests/unit data recorded by hand): sacct's
step ExitCode and srun's `$?` for the task statuses each case below produced."""

from __future__ import annotations

from containers.srun_io import kill_on_bad_exit, srun_status, step_status
from containers.srun_layout import plan_step
from gateway.model.job import exit_code_pair, wait_status

TWO_NODES = {
    "SLURM_JOB_ID": "47088",
    "SLURM_JOB_NODELIST": "node[03-04]",
    "SLURM_JOB_CPUS_PER_NODE": "2(x2)",
    "SLURM_TASKS_PER_NODE": "2(x2)",
    "SLURM_NTASKS": "4",
    "SLURM_NNODES": "2",
}
ONE_NODE = {**TWO_NODES, "SLURM_JOB_NODELIST": "node01", "SLURM_JOB_CPUS_PER_NODE": "2"}
ONE_NODE |= {"SLURM_TASKS_PER_NODE": "2", "SLURM_NTASKS": "2", "SLURM_NNODES": "1"}
TERM, KILL, USR1 = wait_status(signal=15), wait_status(signal=9), wait_status(signal=10)


def test_one_node_keeps_its_last_tasks_status_not_the_highest() -> None:
    step = plan_step(["-N1", "-n2", "true"], ONE_NODE)
    # task 0 exit 3, task 1 exit 0: sacct COMPLETED 0:0, srun's $? 3
    statuses = {0: wait_status(3), 1: 0}
    assert exit_code_pair(step_status(step, statuses)) == (0, 0)
    assert srun_status(statuses) == 3
    statuses = {0: 0, 1: wait_status(3)}
    assert exit_code_pair(step_status(step, statuses)) == (3, 0)


def test_a_signalled_task_decides_its_node() -> None:
    step = plan_step(["-N1", "-n2", "true"], ONE_NODE)
    # --kill-on-bad-exit: task 0 exit 4, task 1 Terminated: CANCELLED 0:15, srun 143
    statuses = {0: wait_status(4), 1: TERM}
    assert exit_code_pair(step_status(step, statuses)) == (0, 15)
    assert srun_status(statuses) == 143
    # task 0 SIGUSR1, task 1 exit 5: CANCELLED 0:10, srun 138
    statuses = {0: USR1, 1: wait_status(5)}
    assert exit_code_pair(step_status(step, statuses)) == (0, 10)
    assert srun_status(statuses) == 138


def test_slurmctld_keeps_the_highest_nodes_status() -> None:
    step = plan_step(["-N2", "-n2", "true"], TWO_NODES)
    # -K: task 1 (node04) exit 3, task 0 (node03) Terminated: FAILED 3:0, srun 143
    assert exit_code_pair(step_status(step, {0: TERM, 1: wait_status(3)})) == (3, 0)
    assert srun_status({0: TERM, 1: wait_status(3)}) == 143
    # -K: task 1 Killed, task 0 Terminated: CANCELLED 0:15
    assert exit_code_pair(step_status(step, {0: TERM, 1: KILL})) == (0, 15)


def test_kill_on_bad_exit_reads_the_option_then_the_environment() -> None:
    assert kill_on_bad_exit({"kill-on-bad-exit": None}, {})
    assert kill_on_bad_exit({"kill-on-bad-exit": "1"}, {})
    assert not kill_on_bad_exit({"kill-on-bad-exit": "0"}, {"SLURM_KILL_BAD_EXIT": "1"})
    assert kill_on_bad_exit({}, {"SLURM_KILL_BAD_EXIT": "1"})
    assert not kill_on_bad_exit({}, {})  # KillOnBadExit's default, 0
