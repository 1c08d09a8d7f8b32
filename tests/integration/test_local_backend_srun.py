"""srun inside local jobs: task ranks, step records, exit codes, labelled output."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from gateway.model.job import exit_code_pair
from gateway.model.state import JobState
from tests.integration.test_local_backend_support import (
    Env,
    finish,
    make_launch,
    temporary_env,
)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="runs jobs as other users (root)")


@pytest.fixture
def local_env() -> Iterator[Env]:
    yield from temporary_env()


def test_srun_tasks_get_ranks_and_the_step_layout(local_env: Env) -> None:
    backend = local_env.backend()
    script = (
        "#!/bin/bash\nsrun bash -c 'echo $SLURM_PROCID $SLURM_LOCALID $SLURM_NODEID "
        "$SLURM_STEP_ID $SLURM_STEP_NUM_TASKS $SLURM_NTASKS $SLURM_GTIDS "
        "$SLURM_STEP_NODELIST $SLURM_JOB_ID' | sort\n"
        "srun -n1 -c2 bash -c 'echo second $SLURM_STEP_ID $SLURM_CPUS_PER_TASK'\n"
    )
    launch = make_launch(local_env, script, ["-n3"], user="tester", tasks=3, cpus=3)
    event = finish(backend, launch)
    assert event.state is JobState.COMPLETED
    jid = launch.job.job_id
    lines = (local_env.work / f"slurm-{jid}.out").read_text().splitlines()
    assert lines == [
        f"0 0 0 0 3 3 0,1,2 localnode {jid}",
        f"1 1 0 0 3 3 0,1,2 localnode {jid}",
        f"2 2 0 0 3 3 0,1,2 localnode {jid}",
        "second 1 2",
    ]
    steps = backend.steps(jid)
    assert [(s.step_id, s.name, s.ntasks, s.state) for s in steps] == [
        ("batch", "batch", 1, JobState.COMPLETED),
        ("0", "bash", 3, JobState.COMPLETED),
        ("1", "bash", 1, JobState.COMPLETED),
    ]


def test_srun_exit_code_is_the_highest_of_its_tasks(local_env: Env) -> None:
    backend = local_env.backend()
    script = (
        "#!/bin/bash\nsrun -n2 bash -c '[ $SLURM_PROCID = 1 ] && exit 5; exit 2'\n"
        "echo rc=$?\nsrun -n2 bash -c 'kill -9 $$'\necho rc=$?\n"
        "srun -n1 true\necho rc=$?\n"
    )
    launch = make_launch(local_env, script, ["-n2"], tasks=2, cpus=2)
    event = finish(backend, launch)
    out = (local_env.work / f"slurm-{launch.job.job_id}.out").read_text()
    assert "rc=5\n" in out
    assert "rc=137\n" in out
    assert "rc=0\n" in out
    assert "srun: error: localnode: task 0: Exited with exit code 2" in out
    assert "srun: error: localnode: task 1: Exited with exit code 5" in out
    assert "srun: error: localnode: tasks 0-1: Killed" in out
    states = [
        (s.step_id, s.state, exit_code_pair(s.exit_code)) for s in backend.steps(launch.job.job_id)
    ]
    assert states == [
        ("batch", JobState.COMPLETED, (0, 0)),
        ("0", JobState.FAILED, (5, 0)),
        ("1", JobState.CANCELLED, (0, 9)),
        ("2", JobState.COMPLETED, (0, 0)),
    ]
    assert event.state is JobState.COMPLETED
    assert exit_code_pair(event.derived_exit_code) == (5, 0)


def test_srun_label_prefixes_each_line_with_the_rank(local_env: Env) -> None:
    backend = local_env.backend()
    launch = make_launch(
        local_env, "#!/bin/bash\nsrun -l -n2 echo hi | sort\n", ["-n2"], tasks=2, cpus=2
    )
    finish(backend, launch)
    out = (local_env.work / f"slurm-{launch.job.job_id}.out").read_text()
    assert out == "0: hi\n1: hi\n"


def test_srun_refuses_steps_beyond_the_allocation_as_slurm(local_env: Env) -> None:
    """Real Slurm 22.05, in a job of one node and one CPU: the same two lines."""
    backend = local_env.backend()
    script = "#!/bin/bash\nsrun -N2 true\necho rc=$?\nsrun -n2 true\necho rc=$?\n"
    launch = make_launch(local_env, script)
    finish(backend, launch)
    out = (local_env.work / f"slurm-{launch.job.job_id}.out").read_text()
    assert out == (
        "srun: error: Only allocated 1 nodes asked for 2\nrc=1\n"
        f"srun: error: Unable to create step for job {launch.job.job_id}: More processors "
        "requested than permitted\nrc=1\n"
    )


def test_srun_steps_still_running_when_the_job_is_cancelled_are_cancelled(
    local_env: Env,
) -> None:
    backend = local_env.backend()
    launch = make_launch(local_env, "#!/bin/bash\nsrun -n1 sleep 60\n", ["-t", "1"])
    event = finish(backend, launch)
    assert event.state is JobState.TIMEOUT
    step = backend.steps(launch.job.job_id)[1]
    assert step.step_id == "0"
    assert step.state is JobState.CANCELLED


def test_srun_kill_on_bad_exit_terminates_the_other_tasks(local_env: Env) -> None:
    """As real Slurm 22.05 on one node: task 0 exits 4, task 1 is terminated at once, srun
    exits 143 and sacct shows the step CANCELLED 0:15; without -K the task runs on."""
    backend = local_env.backend()
    body = "bash -c '[ $SLURM_PROCID = 0 ] && exit 4; sleep 20'"
    script = (
        f"#!/bin/bash\nsrun -K -n2 {body}\necho rc=$?\n"
        "srun --kill-on-bad-exit=0 -n2 bash -c '[ $SLURM_PROCID = 0 ] && exit 4; sleep 1'\n"
        "echo rc=$?\n"
    )
    launch = make_launch(local_env, script, ["-n2"], tasks=2, cpus=2)
    event = finish(backend, launch)
    jid = launch.job.job_id
    lines = (local_env.work / f"slurm-{jid}.out").read_text().splitlines()
    stamp = next(x for x in lines if x.startswith("slurmstepd-"))
    assert lines == [
        "srun: error: localnode: task 0: Exited with exit code 4",
        f"srun: launch/slurm: _step_signal: Terminating StepId={jid}.0",
        stamp,
        "srun: error: localnode: task 1: Terminated",
        f"srun: Force Terminated StepId={jid}.0",
        "rc=143",
        "srun: error: localnode: task 0: Exited with exit code 4",
        "rc=4",
    ]
    assert stamp.startswith(f"slurmstepd-localnode: error: *** STEP {jid}.0 ON localnode CAN")
    steps = backend.steps(jid)
    assert [(s.step_id, s.state, exit_code_pair(s.exit_code)) for s in steps[1:]] == [
        ("0", JobState.CANCELLED, (0, 15)),
        ("1", JobState.COMPLETED, (0, 0)),
    ]
    assert (steps[1].end_time or 0) - (steps[1].start_time or 0) < 15
    assert event.state is JobState.COMPLETED


def test_srun_relays_each_tasks_output_in_whole_lines(local_env: Env) -> None:
    """Two tasks writing halves of a line at the same moment: srun relays whole lines (as
    the test cluster's, for stas00's torchrun launcher); the output of a task killed by -K
    is still relayed."""
    backend = local_env.backend()
    half = "x" * 3000
    body = f'printf %s {half}; sleep 0.5; printf "end%s\\n" $SLURM_PROCID'
    script = (
        f"#!/bin/bash\nsrun -n2 bash -c '{body}' 2>&1 | cat\n"
        f"srun -n2 bash -c 'exec >&2; {body}' 2>&1 | cat\n"
        "srun -K -n2 bash -c '[ $SLURM_PROCID = 0 ] && { sleep 1; exit 1; }; echo tail; sleep 20'\n"
    )
    launch = make_launch(local_env, script, ["-n2"], tasks=2, cpus=2)
    finish(backend, launch)
    lines = (local_env.work / f"slurm-{launch.job.job_id}.out").read_text().splitlines()
    assert sorted(lines[:4]) == [f"{half}end0", f"{half}end0", f"{half}end1", f"{half}end1"]
    assert "tail" in lines[4:]


def test_srun_reads_its_options_from_the_environment_and_runs_programs_in_the_cwd(
    local_env: Env,
) -> None:
    """ULHPC's scoop launcher (SLURM_CPU_BIND=none: srun's line about cpu binding, as on
    the test cluster) and gurobi launcher (`srun inner_job.sh` with the script only in the
    working directory: slurmstepd's execve finds it there, $0 is the bare name)."""
    backend = local_env.backend()
    script = (
        "#!/bin/bash\nexport SLURM_CPU_BIND=none\nsrun true\nunset SLURM_CPU_BIND\n"
        "printf '#!/bin/bash\\necho \"$0\" $SLURM_PROCID\\n' > inner_job.sh\n"
        "chmod +x inner_job.sh\nsrun -n1 inner_job.sh\necho rc=$?\n"
        "srun -n1 --cpu-bind=mask_cpu:E0,0E,FE true\necho rc=$?\n"
    )
    launch = make_launch(local_env, script, ["-n2"], tasks=2, cpus=2)
    finish(backend, launch)
    out = (local_env.work / f"slurm-{launch.job.job_id}.out").read_text()
    assert out == (
        "srun: cluster configuration lacks support for cpu binding\n"
        "inner_job.sh 0\nrc=0\n"
        "srun: cluster configuration lacks support for cpu binding\nrc=0\n"
    )
