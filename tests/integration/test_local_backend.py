"""The local backend runs batch jobs as Slurm does: real processes, real users, real signals."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from containers.backend import LocalBackend
from gateway.model.backend import Backend, BackendEvent, EventKind
from gateway.model.job import exit_code_pair, wait_status
from gateway.model.state import JobState, Reason
from tests.integration.test_local_backend_support import (
    NODE,
    Env,
    finish,
    make_launch,
    temporary_env,
    wait_for,
    wait_until,
)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="runs jobs as other users (root)")


@pytest.fixture
def local_env() -> Iterator[Env]:
    yield from temporary_env()


def out_of(env: Env, job_id: int) -> str:
    return (env.work / f"slurm-{job_id}.out").read_text()


def test_local_backend_satisfies_the_backend_protocol(local_env: Env) -> None:
    assert isinstance(local_env.backend(), Backend)


def test_describe_reports_the_node_and_its_partition(local_env: Env) -> None:
    state = local_env.backend(cpus=3, memory_mb=1234).describe()
    assert [(n.name, n.cpus, n.memory_mb) for n in state.nodes] == [(NODE, 3, 1234)]
    assert state.default_partition is not None
    assert state.default_partition.nodes == (NODE,)


def test_exit_zero_completes_with_exit_code_0_0(local_env: Env) -> None:
    backend = local_env.backend()
    launch = make_launch(local_env, "#!/bin/bash\necho hello from $SLURM_JOB_ID\n")
    event = finish(backend, launch)
    assert event.state is JobState.COMPLETED
    assert event.exit_code == 0
    assert out_of(local_env, launch.job.job_id) == f"hello from {launch.job.job_id}\n"
    batch = backend.steps(launch.job.job_id)[0]
    assert (batch.step_id, batch.state, batch.exit_code) == ("batch", JobState.COMPLETED, 0)


def test_non_zero_exit_fails_with_n_0(local_env: Env) -> None:
    backend = local_env.backend()
    event = finish(backend, make_launch(local_env, "#!/bin/bash\nexit 3\n"))
    assert event.state is JobState.FAILED
    assert event.reason is Reason.NON_ZERO_EXIT_CODE
    assert exit_code_pair(event.exit_code) == (3, 0)


def test_death_by_signal_fails_with_0_s_and_a_cancelled_batch_step(local_env: Env) -> None:
    backend = local_env.backend()
    launch = make_launch(local_env, "#!/bin/bash\nkill -9 $$\n")
    event = finish(backend, launch)
    assert event.state is JobState.FAILED
    assert event.reason is Reason.JOB_LAUNCH_FAILURE
    assert exit_code_pair(event.exit_code) == (0, 9)
    batch = backend.steps(launch.job.job_id)[0]
    assert batch.state is JobState.CANCELLED
    assert exit_code_pair(batch.exit_code) == (0, 9)


def test_time_limit_sends_sigterm_then_sigkill_after_kill_wait(local_env: Env) -> None:
    backend = local_env.backend(kill_wait=1.0)
    script = (
        "#!/bin/bash\ntrap 'echo got TERM; date +%s.%N > term_at' TERM\n"
        "sleep 60 & wait\nwhile true; do sleep 0.05; done\n"
    )
    launch = make_launch(local_env, script, ["-t", "1"])  # 1 s with time_scale 1/60
    t0 = time.time()
    event = finish(backend, launch)
    assert event.state is JobState.TIMEOUT
    assert event.reason is Reason.TIME_LIMIT
    assert exit_code_pair(event.exit_code) == (0, 9)  # the batch shell's, as scontrol shows
    output = out_of(local_env, launch.job.job_id)
    assert "got TERM" in output
    assert f"*** JOB {launch.job.job_id} ON {NODE} CANCELLED AT" in output
    assert "DUE TO TIME LIMIT ***" in output
    term_at = float((local_env.work / "term_at").read_text())
    assert 0.8 < term_at - t0 < 3.0
    assert event.time - term_at >= 0.9  # SIGKILL only after KillWait
    batch = backend.steps(launch.job.job_id)[0]
    assert batch.state is JobState.CANCELLED
    assert exit_code_pair(batch.exit_code) == (0, 9)


def test_time_limit_sigterm_ends_a_script_that_does_not_trap_it(local_env: Env) -> None:
    backend = local_env.backend(kill_wait=5.0)
    launch = make_launch(local_env, "#!/bin/bash\nsleep 60\n", ["-t", "1"])
    event = finish(backend, launch)
    assert event.state is JobState.TIMEOUT
    assert event.time - launch.job.submit_time < 4.5  # no need to wait for SIGKILL
    assert exit_code_pair(backend.steps(launch.job.job_id)[0].exit_code) == (0, 15)


def test_signal_option_reaches_the_batch_shell_before_the_limit(local_env: Env) -> None:
    """At slurmctld's first periodic check (every 30 s, here 0.5 s, on one clock) where the
    end is at most the lead plus that period away (tests/unit/test_signal_timing.py)."""
    backend = local_env.backend()
    script = (
        "#!/bin/bash\necho $EPOCHREALTIME > start.t\n"
        "trap 'echo $EPOCHREALTIME > got.t; echo got USR1; exit 0' USR1\n"
        "for i in $(seq 1 400); do sleep 0.02; done\necho no signal\n"
    )
    # -t 2 is 2 s here; USR1@60 leads by 1 s: due 1.5 s before the limit (0.5 s after the
    # start), sent at the next check, less than 1 s after the start
    launch = make_launch(local_env, script, ["-t", "2", "--signal=B:USR1@60"])
    event = finish(backend, launch)
    assert out_of(local_env, launch.job.job_id) == "got USR1\n"
    assert event.state is JobState.COMPLETED
    start, got = (float((local_env.work / f).read_text()) for f in ("start.t", "got.t"))
    assert 0.4 < got - start < 1.1
    assert got % 0.5 < 0.15  # on the checks' grid (plus the supervisor's poll)


def test_a_script_whose_interpreter_is_missing_fails_as_slurmstepd_says(local_env: Env) -> None:
    """The test cluster (no zsh on its nodes), `#!/bin/zsh` scripts: FAILED 2:0, batch step
    FAILED 2:0, and in the output `slurmstepd-node01: error: execve(): bad
    interpreter(/bin/zsh): No such file or directory` (the errno is the exit status)."""
    backend = local_env.backend()
    launch = make_launch(local_env, "#!/bin/no-such-shell -l\necho hi\n")
    event = finish(backend, launch)
    assert (event.state, exit_code_pair(event.exit_code)) == (JobState.FAILED, (2, 0))
    batch = backend.steps(launch.job.job_id)[0]
    assert (batch.state, exit_code_pair(batch.exit_code)) == (JobState.FAILED, (2, 0))
    node = launch.placement[0].node
    assert out_of(local_env, launch.job.job_id) == (
        f"slurmstepd-{node}: error: execve(): bad interpreter(/bin/no-such-shell -l): "
        "No such file or directory\n"
    )


def test_signal_without_b_goes_to_the_steps_not_the_batch_shell(local_env: Env) -> None:
    backend = local_env.backend()
    script = (
        "#!/bin/bash\ntrap 'echo batch got USR1' USR1\n"
        'srun -n1 bash -c \'trap "echo step got USR1; exit 0" USR1; '
        "sleep 8; echo no USR1'\necho step rc=$?\n"
    )
    launch = make_launch(local_env, script, ["-t", "2", "--signal=USR1@60"])
    event = finish(backend, launch)
    lines = out_of(local_env, launch.job.job_id).splitlines()
    # the task's sleep got it too (bash's line, on srun's stderr: in either order with the
    # trap's, as on the test cluster), as slurmstepd signals the step's whole cgroup (one
    # sleep: a loop of short ones let a loaded CI run signal bash between two of them)
    assert sorted(lines[:2]) == ["User defined signal 1", "step got USR1"], lines
    assert lines[2:] == ["step rc=0"]
    assert event.state is JobState.COMPLETED


def test_cancel_terminates_the_job_and_records_cancelled(local_env: Env) -> None:
    backend = local_env.backend()
    launch = make_launch(local_env, "#!/bin/bash\necho started\nsleep 60\n")
    backend.submit(launch)
    wait_until(
        lambda: (
            "started" in (local_env.work / f"slurm-{launch.job.job_id}.out").read_text()
            if (local_env.work / f"slurm-{launch.job.job_id}.out").exists()
            else False
        )
    )
    backend.cancel(launch.job)
    wait_for(backend, launch.job.job_id)
    events = backend.poll()
    finished = [e for e in events if e.kind is EventKind.FINISHED]
    assert [e.state for e in finished] == [JobState.CANCELLED]
    assert finished[0].exit_code == 0
    assert "CANCELLED AT" in out_of(local_env, launch.job.job_id)
    assert exit_code_pair(backend.steps(launch.job.job_id)[0].exit_code) == (0, 15)


def test_cancel_runs_the_scripts_term_trap_once_as_slurm_does(local_env: Env) -> None:
    """The test cluster (22.05, scancel of this script as `tester`) wrote: started, the
    CANCELLED line, bash's `Terminated` for its sleep, got-TERM once; the loop ran on until
    KillWait's SIGKILL (batch step CANCELLED 0:9). Caldera's trap ran twice: the script was
    signalled through its process group and again as one of the job's processes."""
    backend = local_env.backend(kill_wait=1.0)
    script = (
        "#!/bin/bash\ntrap 'echo got-TERM' TERM\necho started\n"
        "for i in $(seq 1 600); do sleep 0.1; done\necho end\n"
    )
    launch = make_launch(local_env, script)
    backend.submit(launch)
    out = local_env.work / f"slurm-{launch.job.job_id}.out"
    wait_until(lambda: out.exists() and "started" in out.read_text())
    backend.cancel(launch.job)
    wait_for(backend, launch.job.job_id)
    lines = out.read_text().splitlines()
    assert lines[0] == "started"
    assert lines[1].startswith(f"slurmstepd-{NODE}: error: *** JOB {launch.job.job_id} ON")
    assert lines[2:] == ["Terminated", "got-TERM"], lines
    assert exit_code_pair(backend.steps(launch.job.job_id)[0].exit_code) == (0, 9)


def test_cancel_with_a_signal_and_batch_only_signals_the_shell(local_env: Env) -> None:
    backend = local_env.backend()
    script = (
        "#!/bin/bash\ntrap 'echo got USR2; exit 4' USR2\necho ready\n"
        "for i in $(seq 1 500); do sleep 0.02; done\n"
    )
    launch = make_launch(local_env, script)
    backend.submit(launch)
    out = local_env.work / f"slurm-{launch.job.job_id}.out"
    wait_until(lambda: out.exists() and "ready" in out.read_text())
    backend.cancel(launch.job, signal=signal.SIGUSR2, batch_only=True)
    wait_for(backend, launch.job.job_id)
    result = backend.result(launch.job.job_id)
    assert result is not None
    assert (result.state, exit_code_pair(result.exit_code)) == (JobState.FAILED, (4, 0))
    assert out.read_text() == "ready\ngot USR2\n"


@pytest.mark.parametrize(
    ("argv", "array", "expected"),
    [
        ((), None, "slurm-{j}.out"),
        ((), (500, 7), "slurm-500_7.out"),
        (("-o", "o-%j-%x-%u-%N.txt"), None, "o-{j}-named-root-localnode.txt"),
        (("-o", "o-%A_%a-%3a-%5j.txt"), (500, 7), "o-500_7-007-00{j}.txt"),
        (("-o", "o-%%-%A.txt"), None, "o-%-{j}.txt"),
    ],
)
def test_output_file_names_follow_slurms_patterns(
    local_env: Env, argv: tuple[str, ...], array: tuple[int, int] | None, expected: str
) -> None:
    backend = local_env.backend()
    launch = make_launch(local_env, "#!/bin/bash\necho out\n", ["-J", "named", *argv], array=array)
    finish(backend, launch)
    path = local_env.work / expected.format(j=launch.job.job_id)
    assert path.read_text() == "out\n"


def test_error_file_is_separate_with_e_and_shared_without(local_env: Env) -> None:
    backend = local_env.backend()
    script = "#!/bin/bash\necho to-out\necho to-err >&2\n"
    split = make_launch(local_env, script, ["-o", "split.out", "-e", "split.err"])
    finish(backend, split)
    assert (local_env.work / "split.out").read_text() == "to-out\n"
    assert (local_env.work / "split.err").read_text() == "to-err\n"
    joined = make_launch(local_env, script, ["-o", "joined.out"])
    finish(backend, joined)
    assert (local_env.work / "joined.out").read_text() == "to-out\nto-err\n"


@pytest.mark.parametrize(("mode", "expected"), [("append", "old\nnew\n"), ("truncate", "new\n")])
def test_open_mode_appends_or_truncates(local_env: Env, mode: str, expected: str) -> None:
    backend = local_env.backend()
    (local_env.work / "o.txt").write_text("old\n")
    launch = make_launch(
        local_env,
        "#!/bin/bash\necho new\necho $SLURM_OPEN_MODE > mode\n",
        ["-o", "o.txt", f"--open-mode={mode}"],
    )
    finish(backend, launch)
    assert (local_env.work / "o.txt").read_text() == expected
    assert (local_env.work / "mode").read_text() == mode[0] + "\n"


def test_input_file_is_the_scripts_stdin(local_env: Env) -> None:
    backend = local_env.backend()
    (local_env.work / "in.txt").write_text("from input\n")
    launch = make_launch(local_env, "#!/bin/bash\ncat\n", ["-i", "in.txt"])
    finish(backend, launch)
    assert out_of(local_env, launch.job.job_id) == "from input\n"


@pytest.mark.parametrize(
    ("export", "present", "absent"),
    [
        (None, {"FOO": "bar", "A": "1"}, set()),
        ("NONE", {"SLURM_EXPORT_ENV": "NONE", "SLURM_GET_USER_ENV": "1"}, {"FOO", "A"}),
        ("NONE,A,B=2", {"A": "1", "B": "2"}, {"FOO"}),
        ("ALL,C=3", {"A": "1", "FOO": "bar", "C": "3"}, set()),
    ],
)
def test_export_rules_shape_the_job_environment(
    local_env: Env, export: str | None, present: dict[str, str], absent: set[str]
) -> None:
    backend = local_env.backend()
    argv = [f"--export={export}"] if export else []
    launch = make_launch(
        local_env, "#!/bin/bash\nenv > env.txt\n", argv, submit_env={"FOO": "bar", "A": "1"}
    )
    finish(backend, launch)
    lines = (local_env.work / "env.txt").read_text().splitlines()
    env = dict(line.split("=", 1) for line in lines if "=" in line)
    for key, value in present.items():
        assert env.get(key) == value, key
    assert not absent & env.keys()
    assert env["SLURM_JOB_ID"] == str(launch.job.job_id)
    assert env["SLURM_JOB_NODELIST"] == NODE
    assert env["ENVIRONMENT"] == "BATCH"
    assert env["SLURM_TASK_PID"].isdigit()
    assert "HOME" in env  # from the login environment when not exported


@pytest.mark.parametrize(("user", "uid"), [("tester", 1001), ("tester2", 1002)])
def test_jobs_run_as_their_users(local_env: Env, user: str, uid: int) -> None:
    backend = local_env.backend()
    launch = make_launch(
        local_env,
        "#!/bin/bash\nid -u; id -g; echo $SLURM_JOB_USER\n",
        ["-o", f"{user}.out"],
        user=user,
    )
    finish(backend, launch)
    path = local_env.work / f"{user}.out"
    assert path.read_text() == f"{uid}\n{uid}\n{user}\n"
    assert path.stat().st_uid == uid


def test_a_user_cannot_write_output_where_only_another_user_may(local_env: Env) -> None:
    private = local_env.work / "private"
    private.mkdir()
    os.chown(private, 1002, 1002)
    private.chmod(0o700)
    backend = local_env.backend()
    launch = make_launch(
        local_env, "#!/bin/bash\necho hi\n", ["-o", f"{private}/x.out"], user="tester"
    )
    event = finish(backend, launch)
    assert event.state is JobState.FAILED
    assert event.reason is Reason.JOB_LAUNCH_FAILURE
    # slurmstepd's failed IO setup: signal 53, a CANCELLED batch step, no words for scontrol
    assert exit_code_pair(event.exit_code) == (0, 53)
    assert event.message is None
    batch = backend.steps(launch.job.job_id)[0]
    assert (batch.state, exit_code_pair(batch.exit_code)) == (JobState.CANCELLED, (0, 53))
    assert not (private / "x.out").exists()


def test_memory_over_the_limit_is_killed_as_out_of_memory(local_env: Env) -> None:
    backend = local_env.backend()
    script = (
        "#!/bin/bash\n/usr/bin/python3 -c 'b = bytearray(300 * 2**20); "
        "import time; time.sleep(20)'\necho survived\n"
    )
    launch = make_launch(local_env, script, ["--mem=100M"], memory_mb=100)
    event = finish(backend, launch)
    assert event.state is JobState.OUT_OF_MEMORY
    assert exit_code_pair(event.exit_code) == (0, 125)
    output = out_of(local_env, launch.job.job_id)
    assert "exceeded memory limit" in output
    assert "survived" not in output
    assert backend.steps(launch.job.job_id)[0].state is JobState.OUT_OF_MEMORY


def test_processes_left_behind_by_the_script_are_killed_at_its_end(local_env: Env) -> None:
    backend = local_env.backend()
    script = "#!/bin/bash\n(setsid sleep 120 & echo $! > orphan.pid)\nsleep 0.2\n"
    launch = make_launch(local_env, script)
    finish(backend, launch)
    pid = int((local_env.work / "orphan.pid").read_text())
    wait_until(
        lambda: (
            not Path(f"/proc/{pid}").exists()
            or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
        ),
        timeout=5,
    )


def test_submitting_the_same_job_twice_starts_it_once(local_env: Env) -> None:
    backend = local_env.backend()
    launch = make_launch(local_env, "#!/bin/bash\necho run >> runs.txt\nsleep 0.3\n")
    first = backend.submit(launch)
    second = backend.submit(launch)
    again = LocalBackend(local_env.spool, node_name=NODE).submit(launch)
    assert first == second == again
    wait_for(backend, launch.job.job_id)
    assert (local_env.work / "runs.txt").read_text() == "run\n"
    kinds = [e.kind for e in backend.poll()]
    assert kinds.count(EventKind.FINISHED) == 1
    assert kinds.count(EventKind.STARTED) == 1
    assert backend.poll() == []


def test_started_event_carries_the_backend_id_and_leaves_nodes_to_the_placement(
    local_env: Env,
) -> None:
    """The gateway placed the job on (virtual) nodes: the backend, which runs every one of
    them on this machine, does not replace them with its own name."""
    backend = local_env.backend()
    launch = make_launch(local_env, "#!/bin/bash\nsleep 0.3\n")
    bid = backend.submit(launch)
    wait_for(backend, launch.job.job_id)
    started = [e for e in backend.poll() if e.kind is EventKind.STARTED]
    assert [(e.nodes, e.backend_id, e.state) for e in started] == [((), bid, JobState.RUNNING)]


def test_a_supervisor_killed_without_a_result_is_reported_lost(local_env: Env) -> None:
    backend = local_env.backend()
    launch = make_launch(local_env, "#!/bin/bash\nsleep 30\n")
    backend.submit(launch)
    wait_until(lambda: backend.supervisor_pid(launch.job.job_id) is not None)
    pid = backend.supervisor_pid(launch.job.job_id)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    lost: list[BackendEvent] = []
    while not lost and time.monotonic() < deadline:
        lost = [e for e in backend.poll() if e.kind is EventKind.LOST]
        time.sleep(0.05)
    assert [e.state for e in lost] == [JobState.NODE_FAIL]
    fresh = LocalBackend(local_env.spool, node_name=NODE)
    assert [e.kind for e in fresh.reconcile([launch.job])] == [
        EventKind.STARTED,
        EventKind.STEP,
        EventKind.LOST,
    ]


def test_forget_removes_only_finished_jobs(local_env: Env) -> None:
    backend = local_env.backend()
    launch = make_launch(local_env, "#!/bin/bash\nsleep 0.2\n")
    backend.submit(launch)
    assert not backend.forget(launch.job.job_id)
    finish(backend, launch)
    assert backend.forget(launch.job.job_id)
    assert not backend.job_dir(launch.job.job_id).exists()


def test_reconcile_reports_jobs_it_never_ran_as_lost(local_env: Env) -> None:
    launch = make_launch(local_env, "#!/bin/bash\ntrue\n")
    events = local_env.backend().reconcile([launch.job])
    assert [(e.kind, e.state) for e in events] == [(EventKind.LOST, JobState.NODE_FAIL)]


def test_wait_status_helpers_match_slurms_records() -> None:
    assert exit_code_pair(wait_status(exit_code=3)) == (3, 0)
    assert exit_code_pair(253) == (0, 125)


def test_a_time_limit_updated_while_the_job_runs_moves_its_deadline(local_env: Env) -> None:
    backend = local_env.backend(kill_wait=1.0)
    # -t 1 is 1 s with time_scale 1/60; raised to 4 (4 s) once the job is running
    launch = make_launch(local_env, "#!/bin/bash\nsleep 2.5\necho done\n", ["-t", "1"])
    t0 = time.time()
    backend.submit(launch)
    spawned = backend.job_dir(launch.job.job_id) / "spawned"
    wait_until(spawned.exists)
    backend.update_time_limit(launch.job, 4)
    event = finish(backend, launch)  # submit is idempotent: this only waits
    assert (event.state, event.exit_code) == (JobState.COMPLETED, 0)
    assert out_of(local_env, launch.job.job_id) == "done\n"
    assert event.time - t0 > 2.0
    # lowered below what has already run: the job ends at the supervisor's next check
    short = make_launch(local_env, "#!/bin/bash\nsleep 30\n", ["-t", "10"])
    backend.submit(short)
    time.sleep(1.5)
    backend.update_time_limit(short.job, 1)
    ended = finish(backend, short)
    assert (ended.state, ended.reason) == (JobState.TIMEOUT, Reason.TIME_LIMIT)
    assert ended.time - short.job.submit_time < 6
