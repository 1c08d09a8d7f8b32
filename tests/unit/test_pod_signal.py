"""scancel's signals inside rank 0's pod (k8s_bridge/pod_signal.py, run there by the API's
exec): the job's steps by default, the batch shell with --batch, step N alone with --step.
Real processes under the launcher's init, outside a PID namespace: the init's pid stands for
the pod's PID 1. Shell scripts named `srun` stand for the launcher's srun (one names its step
as pod_launcher._mark_step does)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from k8s_bridge.launch import signal_command
from k8s_bridge.pod_exec import exit_status
from k8s_bridge.pod_init import step_dir
from k8s_bridge.pod_signal import NOT_PASSED, batch_shell, main

REPO = Path(__file__).resolve().parents[2]
LAUNCHER = REPO / "k8s_bridge" / "pod_launcher.py"

# srun STEP LOG: names its step, records each USR1 it gets
FAKE_SRUN = """#!/bin/sh
mkdir -p "$TMPDIR/.caldera-steps-$(id -u)/$1" && echo $$ >"$TMPDIR/.caldera-steps-$(id -u)/$1/pid"
trap 'echo "step $1 USR1" >>"$2"' USR1
echo "step $1 ready" >>"$2"
while :; do sleep 0.05; done
"""
SCRIPT = """trap 'echo "batch USR1" >>"$1"' USR1
"$2" 0 "$1" & "$2" 1 "$1" &
echo "batch ready" >>"$1"
while :; do sleep 0.05; done
"""


def _wait_for(path: Path, lines: set[str], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not lines <= set(path.read_text().splitlines() if path.exists() else []):
        assert time.monotonic() < deadline, f"{lines} never in {path}"
        time.sleep(0.05)


@pytest.fixture
def job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[int, Path]]:
    """An init running SCRIPT with two steps (0 and 1); (the init's pid, the log)."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    srun = tmp_path / "srun"
    srun.write_text(FAKE_SRUN)
    srun.chmod(0o755)
    log = tmp_path / "log"
    env = {**os.environ, "PYTHONPATH": str(REPO), "CALDERA_WARN_FILE": str(tmp_path / "none")}
    init = subprocess.Popen(
        [sys.executable, str(LAUNCHER), "init", "sh", "-c", SCRIPT, "sh", str(log), str(srun)],
        env=env,
    )
    batch = None
    try:
        _wait_for(log, {"batch ready", "step 0 ready", "step 1 ready"})
        batch = batch_shell(init.pid)
        yield init.pid, log
    finally:  # its process group outlives a batch shell a test killed: the steps too
        if batch is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(batch, signal.SIGKILL)
        init.wait(timeout=20)


def _after(log: Path, wanted: str) -> list[str]:
    _wait_for(log, {wanted})
    time.sleep(0.3)  # nothing else comes
    ready = {"batch ready", "step 0 ready", "step 1 ready"}
    return sorted(set(log.read_text().splitlines()) - ready)


def test_the_batch_shell_is_the_inits_child(job: tuple[int, Path]) -> None:
    init, _ = job
    batch = batch_shell(init)
    assert batch is not None
    assert os.getsid(batch) == batch
    assert Path(f"/proc/{batch}/cmdline").read_bytes().split(b"\0")[:2] == [b"sh", b"-c"]


def test_by_default_every_step_gets_the_signal_and_the_batch_shell_does_not(
    job: tuple[int, Path],
) -> None:
    init, log = job
    assert main(["10"], init=init) == 0
    assert _after(log, "step 1 USR1") == ["step 0 USR1", "step 1 USR1"]


def test_with_batch_the_batch_shell_alone_gets_it(job: tuple[int, Path]) -> None:
    init, log = job
    assert main(["--batch", "10"], init=init) == 0
    assert _after(log, "batch USR1") == ["batch USR1"]


def test_a_step_named_alone_gets_it_and_a_step_that_does_not_run_nothing(
    job: tuple[int, Path],
) -> None:
    init, log = job
    assert main(["--step", "1", "10"], init=init) == 0
    assert main(["--step", "7", "10"], init=init) == 0  # no such step: nothing, as Slurm
    assert _after(log, "step 1 USR1") == ["step 1 USR1"]


def test_a_signal_srun_cannot_pass_on_is_refused_for_steps_not_for_the_batch_shell(
    job: tuple[int, Path],
) -> None:
    init, _ = job
    assert main(["9"], init=init) == NOT_PASSED
    assert main(["--step", "0", "19"], init=init) == NOT_PASSED
    batch = batch_shell(init)
    assert main(["--batch", "9"], init=init) == 0
    deadline = time.monotonic() + 10
    while batch_shell(init) == batch:
        assert time.monotonic() < deadline, "the batch shell was not killed"
        time.sleep(0.05)


@pytest.mark.parametrize(
    "argv",
    [[], ["x"], ["10", "12"], ["--step"], ["--step", "a", "10"], ["0"], ["65"], ["--batch"]],
)
def test_bad_arguments_are_a_usage_error(argv: list[str]) -> None:
    assert main(argv, init=os.getpid()) == 2


def test_without_a_batch_shell_the_job_is_ending() -> None:
    init = subprocess.Popen(["sh", "-c", "sleep 5 & wait"])  # its child leads no session
    try:
        deadline = time.monotonic() + 10
        while not Path(f"/proc/{init.pid}/task/{init.pid}/children").read_text().split():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert batch_shell(init.pid) is None
        assert main(["10"], init=init.pid) == 1
    finally:
        subprocess.run(["pkill", "-P", str(init.pid)], check=False)
        init.wait()


def test_the_step_directory_is_the_sruns(tmp_path: Path) -> None:
    assert step_dir({"TMPDIR": str(tmp_path)}) == str(tmp_path / f".caldera-steps-{os.getuid()}")
    assert step_dir({}) == f"/tmp/.caldera-steps-{os.getuid()}"


def test_the_exec_command_carries_numbers_only() -> None:
    assert signal_command(10)[-1:] == ["10"]
    assert signal_command(10, batch_only=True)[-2:] == ["--batch", "10"]
    assert signal_command(12, step=3)[-3:] == ["--step", "3", "12"]
    assert signal_command(10)[:4] == ["/bin/sh", "-c", signal_command(12)[2], "caldera-signal"]


def test_the_exit_status_is_read_from_the_exec_status_channel() -> None:
    assert exit_status('{"metadata":{},"status":"Success"}') == 0
    failure = (
        '{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit '
        'code: error executing command [sh -c exit 3], exit code 3","reason":"NonZeroExitCode",'
        '"details":{"causes":[{"reason":"ExitCode","message":"3"}]}}'
    )
    assert exit_status(failure) == 3
    internal = '{"metadata":{},"status":"Failure","message":"Internal error occurred: exec"}'
    assert exit_status(internal) is None
    assert exit_status("") is None
    assert exit_status("[1]") is None
