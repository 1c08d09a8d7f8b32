"""--signal and the time limit on Kubernetes: rank 0's init (k8s_bridge/pod_init.py) sends
the warning the job's root ConfigMap describes (launch.init_text) when slurmctld would: with
`B:` to the batch shell alone, else to the job's srun steps and not to the shell; and when
the pod is stopped it writes slurmstepd's `*** JOB ... CANCELLED AT ... ***` line into the
job's stderr, `DUE TO TIME LIMIT` at the limit. Real processes, outside a PID namespace (the
steps are found by session, which is the same inside one); a shell script named `srun`
stands for the launcher's srun (found by its name, as python3 runs it)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gateway.model.values import SignalSpec
from k8s_bridge.files import JobFiles
from k8s_bridge.launch import init_text
from k8s_bridge.pod_init import Settings, WarnSignal, read_settings

REPO = Path(__file__).resolve().parents[2]
LAUNCHER = REPO / "k8s_bridge" / "pod_launcher.py"
USR1 = 10

# a step: records the signal it gets and ends
FAKE_SRUN = """#!/bin/sh
trap 'echo "step USR1 $(date +%s.%N)" >>"$1"; exit 0' USR1
echo "step ready" >>"$1"
while :; do sleep 0.05; done
"""


def _run_init(tmp_path: Path, warning: str, script: str) -> tuple[int, list[list[str]], float]:
    """Run the init with `warning` as its warn file; (exit code, log lines split, start)."""
    (tmp_path / "bin").mkdir()
    srun = tmp_path / "bin" / "srun"
    srun.write_text(FAKE_SRUN)
    srun.chmod(0o755)
    warn = tmp_path / "warn"
    warn.write_text(warning)
    log = tmp_path / "log"
    env = {**os.environ, "PYTHONPATH": str(REPO), "CALDERA_INIT_FILE": str(warn)}
    started = float(subprocess.check_output(["date", "+%s.%N"], text=True))
    done = subprocess.run(
        [sys.executable, str(LAUNCHER), "init", "sh", "-c", script, "sh", str(log), str(srun)],
        env=env,
        timeout=30,
        capture_output=True,
        text=True,
    )
    assert done.stderr == ""
    return done.returncode, [line.split() for line in log.read_text().splitlines()], started


def _warning(batch_only: bool) -> str:
    # limit 3 s, lead 2 s, checks every 0.5 s: due 0.5 s after the start, on the 0.5 s grid
    warn = {"signal": USR1, "lead_s": 2, "period_s": 0.5, "batch_only": batch_only}
    return json.dumps({"limit_s": 3, "warn": warn})


def test_without_b_the_steps_get_the_warning_and_the_batch_shell_does_not(
    tmp_path: Path,
) -> None:
    script = (
        'trap \'echo "batch USR1"  >>"$1"\' USR1; "$2" "$1"; '
        'sleep 0.3; echo "batch after $(date +%s.%N)" >>"$1"'
    )
    code, lines, started = _run_init(tmp_path, _warning(False), script)
    assert code == 0
    assert [line[:2] for line in lines] == [["step", "ready"], ["step", "USR1"], ["batch", "after"]]
    assert 0.4 <= float(lines[1][2]) - started <= 2.5


def test_with_b_the_batch_shell_alone_gets_it(tmp_path: Path) -> None:
    script = (
        '"$2" "$1" & step=$!; '
        'trap \'echo "batch USR1 $(date +%s.%N)" >>"$1"; kill $step; exit 3\' USR1; wait'
    )
    code, lines, started = _run_init(tmp_path, _warning(True), script)
    assert code == 3
    assert [line[:2] for line in lines] == [["step", "ready"], ["batch", "USR1"]]
    assert 0.4 <= float(lines[1][2]) - started <= 2.5


def test_a_job_that_ends_first_gets_no_warning(tmp_path: Path) -> None:
    code, lines, _ = _run_init(tmp_path, _warning(True), 'echo "batch done" >>"$1"')
    assert (code, lines) == (0, [["batch", "done"]])


def test_no_settings_file_or_an_empty_one_is_no_setting(tmp_path: Path) -> None:
    assert read_settings(str(tmp_path / "missing")) == Settings()
    (tmp_path / "empty").write_text("\n")
    assert read_settings(str(tmp_path / "empty")) == Settings()


@pytest.mark.parametrize(
    "text", ["{", "[]", '{"limit_s": "x"}', '{"limit_s": 9, "warn": {"signal": 10}}']
)
def test_malformed_settings_are_ignored_with_a_line(
    tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "init").write_text(text)
    assert read_settings(str(tmp_path / "init")) == Settings()
    assert capsys.readouterr().err.startswith(f"caldera init: {tmp_path / 'init'}: ")


def test_a_signal_number_out_of_range_or_no_limit_is_no_warning(tmp_path: Path) -> None:
    warn = {"signal": 99, "lead_s": 1, "period_s": 1, "batch_only": False}
    (tmp_path / "init").write_text(json.dumps({"limit_s": 9, "warn": warn}))
    assert read_settings(str(tmp_path / "init")) == Settings(9.0, None)
    (tmp_path / "init").write_text(json.dumps({"warn": {**warn, "signal": 10}}))
    assert read_settings(str(tmp_path / "init")) == Settings(None, None)


def test_the_gateway_writes_the_settings_in_real_seconds() -> None:
    spec = SignalSpec(USR1, 60, batch_only=True)
    settings = json.loads(init_text(spec, 15, 0.25, 2))  # -t 1 at a time scale of 1/4
    assert settings["limit_s"] == 15
    assert settings["kill_wait_s"] == 2
    assert WarnSignal(**settings["warn"]) == WarnSignal(USR1, 15.0, 7.5, True)
    assert json.loads(init_text(None, 15, 1.0, 30)) == {"limit_s": 15, "kill_wait_s": 30}
    # no time limit, nothing to warn of; KillWait for a limit an update may give
    assert json.loads(init_text(spec, None, 1.0, 30)) == {"kill_wait_s": 30}
    reservation = json.loads(init_text(SignalSpec(USR1, 60, reservation=True), 15, 1.0, 30))
    assert reservation == {"limit_s": 15, "kill_wait_s": 30}
    assert read_settings_text(init_text(None, 15, 1.0, 2)) == Settings(15.0, None, 2.0)


def read_settings_text(text: str) -> Settings:
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"init-{os.getpid()}"
    path.write_text(text)
    try:
        return read_settings(str(path))
    finally:
        path.unlink()


# a step that names itself as the launcher's srun does (`PID NODE` in its step directory)
STEP = """#!/bin/sh
d="$TMPDIR/.caldera-steps-$(id -u)/3"; mkdir -p "$d" && echo "$$ caldera-42-1" >"$d/pid"
trap 'exit 0' TERM; while :; do sleep 0.05; done
"""


def _stopped(
    tmp_path: Path, settings: str, after_s: float, append: bool, step: bool = False
) -> list[str]:
    """The job's output once its init, run as files.batch_command runs the script, got the
    pod's SIGTERM `after_s` seconds after the script started (`step`: with step 3 running)."""
    (tmp_path / "init").write_text(settings)
    out = tmp_path / "job.out"
    out.write_text("before\n")
    (tmp_path / "srun").write_text(STEP)
    (tmp_path / "srun").chmod(0o755)
    script = tmp_path / "job.sh"
    run_step = f"{tmp_path / 'srun'} & " if step else ""
    script.write_text(f"#!/bin/sh\n{run_step}echo started; trap 'echo TERM; exit 0' TERM\n"
                      "while :; do sleep 0.05; done\n")  # fmt: skip
    script.chmod(0o755)
    command = JobFiles(stdout=str(out), workdir=str(tmp_path), append=append).batch_command(
        str(script), []
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "CALDERA_INIT_FILE": str(tmp_path / "init"),
        "SLURM_JOB_ID": "42",
        "SLURMD_NODENAME": "caldera-42-0",
        "TMPDIR": str(tmp_path),
    }
    init = subprocess.Popen([sys.executable, str(LAUNCHER), "init", *command], env=env)
    # counted from the script's first line, not from the interpreter's start (slow under
    # load): the init blocks SIGTERM before it starts the script, so none is lost
    deadline = time.monotonic() + 20
    while "started" not in out.read_text() and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(after_s)
    init.send_signal(signal.SIGTERM)
    assert init.wait(timeout=20) == 0
    return out.read_text().splitlines()


def test_a_stopped_job_says_cancelled_after_what_it_wrote(tmp_path: Path) -> None:
    lines = _stopped(tmp_path, json.dumps({"limit_s": 60}), 1.0, append=False)
    assert lines[0] == "started"  # truncated, as slurmstepd opens it
    assert re.fullmatch(
        r"slurmstepd-caldera-42-0: error: \*\*\* JOB 42 ON caldera-42-0 CANCELLED AT "
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d \*\*\*",
        lines[1],
    ), lines
    assert lines[-1] == "TERM"
    assert set(lines[2:-1]) <= {"Terminated"}  # the shell's `sleep`, when the TERM hit it


def test_at_the_time_limit_it_says_due_to_time_limit(tmp_path: Path) -> None:
    """The kubelet's SIGTERM near the limit (the gateway's backstop deleting the pods) says
    it too; the init's own enforcement is tests/unit/test_pod_init_limit.py."""
    lines = _stopped(tmp_path, json.dumps({"limit_s": 2.5}), 2.0, append=True)
    assert lines[:2] == ["before", "started"]  # --open-mode=append keeps what was there
    assert lines[2].endswith(" DUE TO TIME LIMIT ***"), lines
    assert lines[-1] == "TERM"
    assert set(lines[3:-1]) <= {"Terminated"}


def test_each_running_step_is_said_cancelled_on_its_first_node(tmp_path: Path) -> None:
    lines = _stopped(tmp_path, "", 1.0, append=False, step=True)
    assert lines[1].startswith("slurmstepd-caldera-42-0: error: *** JOB 42 ON caldera-42-0 ")
    assert re.fullmatch(
        r"slurmstepd-caldera-42-1: error: \*\*\* STEP 42\.3 ON caldera-42-1 "
        r"CANCELLED AT \S+ \*\*\*",
        lines[2],
    ), lines
