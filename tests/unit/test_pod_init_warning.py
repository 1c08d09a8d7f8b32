"""--signal on Kubernetes: rank 0's init (k8s_bridge/pod_init.py) sends the warning the job's
root ConfigMap describes (launch.warning_text) when slurmctld would: with `B:` to the batch
shell alone, else to the job's srun steps and not to the shell. Real processes, outside a
PID namespace (the steps are found by session, which is the same inside one); a shell script
named `srun` stands for the launcher's srun (found by its name, as python3 runs it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.model.values import SignalSpec
from k8s_bridge.launch import warning_text
from k8s_bridge.pod_init import WarnSignal, read_warning

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
    env = {**os.environ, "PYTHONPATH": str(REPO), "CALDERA_WARN_FILE": str(warn)}
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
    return json.dumps(
        {"signal": USR1, "lead_s": 2, "period_s": 0.5, "limit_s": 3, "batch_only": batch_only}
    )


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


def test_no_warning_file_or_an_empty_one_is_no_warning(tmp_path: Path) -> None:
    assert read_warning(str(tmp_path / "missing")) is None
    (tmp_path / "empty").write_text("\n")
    assert read_warning(str(tmp_path / "empty")) is None


@pytest.mark.parametrize("text", ["{", "[]", '{"signal": 10}', '{"signal": 99, "lead_s": 1}'])
def test_a_malformed_warning_is_ignored_with_a_line(
    tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "warn").write_text(text)
    assert read_warning(str(tmp_path / "warn")) is None
    assert capsys.readouterr().err.startswith(f"caldera init: {tmp_path / 'warn'}: ")


def test_a_signal_number_out_of_range_is_no_warning(tmp_path: Path) -> None:
    (tmp_path / "warn").write_text(
        json.dumps({"signal": 99, "lead_s": 1, "period_s": 1, "limit_s": 9, "batch_only": False})
    )
    assert read_warning(str(tmp_path / "warn")) is None


def test_the_gateway_writes_the_warning_in_real_seconds() -> None:
    spec = SignalSpec(USR1, 60, batch_only=True)
    text = warning_text(spec, 15, 0.25)  # -t 1 at a time scale of 1/4
    assert WarnSignal(**json.loads(text)) == WarnSignal(USR1, 15.0, 7.5, 15.0, True)
    assert warning_text(None, 15, 1.0) == ""
    assert warning_text(spec, None, 1.0) == ""  # no time limit, nothing to warn of
    assert warning_text(SignalSpec(USR1, 60, reservation=True), 15, 1.0) == ""
