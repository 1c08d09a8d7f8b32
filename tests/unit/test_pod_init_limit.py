"""The time limit on Kubernetes: rank 0's init (k8s_bridge/pod_init.py) ends the job at its
limit as slurmctld and slurmstepd do (the `DUE TO TIME LIMIT` line, SIGTERM to every
process, SIGKILL KillWait later, its line in the termination message), and takes a new
limit from `launcher.py limit` (pod_signal.limit_main) while the job runs, raised or
lowered, counted from the start. Real processes, outside a PID namespace (the init's pid
stands for PID 1); the script and the test read one clock (`date +%s.%N`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from gateway.model.state import JobState
from gateway.model.values import INFINITE
from k8s_bridge.launch import init_text, limit_command
from k8s_bridge.lifecycle import parse_pod
from k8s_bridge.names import LABEL_JOB, LABEL_RANK
from k8s_bridge.pod_init import read_limit
from k8s_bridge.pod_signal import limit_main
from k8s_bridge.pod_wire import TIME_LIMIT_RECORD
from k8s_bridge.request import GangRequest
from k8s_bridge.states import pod_job_state
from tests.support.builders import make_job

REPO = Path(__file__).resolve().parents[2]
LAUNCHER = REPO / "k8s_bridge" / "pod_launcher.py"

# records its start, each SIGTERM it gets (and ignores), and that it is alive, until killed
SCRIPT = """now() { date +%s.%N; }
echo "start $(now)" >>"$1"
trap 'echo "TERM $(now)" >>"$1"' TERM
while :; do echo "alive $(now)" >>"$1"; sleep 0.1; done
"""


class Job:
    """A job's init, run as `launcher.py init`, with its files under `tmp_path`."""

    def __init__(self, tmp_path: Path, settings: dict[str, object]) -> None:
        (tmp_path / "init").write_text(json.dumps(settings))
        (tmp_path / "termination-log").write_text("")
        self.tmp, self.log = tmp_path, tmp_path / "log"
        self.env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "CALDERA_INIT_FILE": str(tmp_path / "init"),
            "CALDERA_STEP_LOG": str(tmp_path / "termination-log"),
            "SLURM_JOB_ID": "42",
            "SLURMD_NODENAME": "caldera-42-0",
            "TMPDIR": str(tmp_path),
            "CALDERA_LIMIT_FILE": str(tmp_path / "limit"),
        }
        argv = [sys.executable, str(LAUNCHER), "init", "sh", "-c", SCRIPT, "sh", str(self.log)]
        self.err = tmp_path / "stderr"
        with self.err.open("ab") as err:  # as files.batch_command opens the job's files
            self.init = subprocess.Popen(argv, env=self.env, stderr=err)
        deadline = time.monotonic() + 20
        while not self.lines("start") and time.monotonic() < deadline:
            time.sleep(0.02)
        self.started = self.lines("start")[0]

    def lines(self, what: str) -> list[float]:
        text = self.log.read_text() if self.log.exists() else ""
        return [float(t) for w, t in (line.split() for line in text.splitlines()) if w == what]

    def limit(self, value: str, monkeypatch: pytest.MonkeyPatch) -> None:
        """`launcher.py limit VALUE` as the backend's exec runs it in the container."""
        monkeypatch.setenv("CALDERA_LIMIT_FILE", str(self.tmp / "limit"))
        assert limit_main([value], init=self.init.pid) == 0

    def wait(self) -> int:
        return self.init.wait(timeout=60)


def _ended_at_limit(job: Job, limit_s: float, kill_wait_s: float) -> None:
    """SIGTERM at the limit from the start, alive through KillWait, then killed."""
    code = job.wait()
    assert code == 128 + 9  # the shell, killed after KillWait: the container's exit code
    (term,) = job.lines("TERM")
    assert limit_s - 0.3 <= term - job.started <= limit_s + 1.5
    alive = job.lines("alive")
    assert kill_wait_s - 0.5 <= alive[-1] - term <= kill_wait_s + 1.5
    said = job.err.read_text().splitlines()
    (line,) = [line for line in said if line != "Terminated"]  # (the shell's, of its sleep)
    assert line.startswith("slurmstepd-caldera-42-0: error: *** JOB 42 ON caldera-42-0 ")
    assert line.endswith(" DUE TO TIME LIMIT ***")
    assert (job.tmp / "termination-log").read_text() == f"{TIME_LIMIT_RECORD}\n"


def test_the_init_ends_the_job_at_its_limit_with_term_then_kill_after_killwait(
    tmp_path: Path,
) -> None:
    job = Job(tmp_path, {"limit_s": 1.5, "kill_wait_s": 1})
    _ended_at_limit(job, 1.5, 1.0)


def test_a_raised_limit_lets_the_job_run_past_the_old_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = Job(tmp_path, {"limit_s": 2, "kill_wait_s": 1})
    job.limit("4", monkeypatch)
    _ended_at_limit(job, 4.0, 1.0)


def test_a_lowered_limit_counts_from_the_start_and_one_passed_ends_the_job_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = Job(tmp_path, {"limit_s": 60, "kill_wait_s": 1})
    time.sleep(1.0)
    job.limit("0.5", monkeypatch)  # already over
    asked = float(subprocess.check_output(["date", "+%s.%N"], text=True))
    code = job.wait()
    assert code == 128 + 9
    (term,) = job.lines("TERM")
    assert term - asked <= 1.0


def test_a_limit_removed_lets_the_job_end_by_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = Job(tmp_path, {"limit_s": 1.5, "kill_wait_s": 1})
    job.limit("none", monkeypatch)
    time.sleep(2.5)
    assert job.init.poll() is None
    assert job.lines("TERM") == []
    job.limit("0", monkeypatch)
    assert job.wait() == 128 + 9


def test_a_limit_written_before_the_init_ran_is_read_at_its_start(tmp_path: Path) -> None:
    (tmp_path / "limit").write_text("1.5\n")
    job = Job(tmp_path, {"limit_s": 60, "kill_wait_s": 1})
    _ended_at_limit(job, 1.5, 1.0)


def test_limit_values_malformed_or_not_finite_are_refused_or_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CALDERA_LIMIT_FILE", str(tmp_path / "limit"))
    for bad in (["-1"], ["nan"], ["inf"], ["1e999"], ["x"], [], ["1", "2"], ["; rm -rf /"]):
        assert limit_main(bad, init=os.getpid()) == 2, bad
    assert "usage: launcher.py limit SECONDS|none" in capsys.readouterr().err
    path = tmp_path / "limit"
    for text, read in (("12.5", 12.5), ("none", None), ("nan", 7.0), ("inf", 7.0), ("", 7.0)):
        path.write_text(text)
        assert read_limit(7.0, str(path)) == read, text
    assert read_limit(7.0, str(tmp_path / "missing")) == 7.0
    path.write_bytes(b"\xff\xfe")
    assert read_limit(7.0, str(path)) == 7.0


def test_the_backends_command_carries_a_number_only() -> None:
    argv = limit_command(90.0)
    assert argv[:2] == ["/bin/sh", "-c"]
    assert argv[-1] == "90.0"
    assert limit_command(None)[-1] == "none"
    assert 'limit "$@"' in argv[2]


def _pod(message: str, reason: str | None = None, code: int = 137) -> dict[str, object]:
    terminated = {"exitCode": code, "reason": "Error", "message": message}
    return {
        "metadata": {"name": "p", "labels": {LABEL_JOB: "42", LABEL_RANK: "0"}},
        "spec": {"nodeName": "n1"},
        "status": {
            "phase": "Failed",
            **({"reason": reason} if reason else {}),
            "containerStatuses": [{"state": {"terminated": terminated}}],
        },
    }


def test_the_inits_line_in_the_termination_message_is_a_timeout() -> None:
    pod = parse_pod(_pod(f'caldera-step {{"id": 0}}\n{TIME_LIMIT_RECORD}\n'))
    assert pod is not None
    assert pod_job_state(pod.phase, pod.reason, pod.preempted) is JobState.TIMEOUT
    assert pod.message is None
    assert pod.steps == ('{"id": 0}',)
    plain = parse_pod(_pod("something else"))
    assert plain is not None
    assert plain.message == "something else"
    assert pod_job_state(plain.phase, plain.reason, plain.preempted) is JobState.FAILED
    evicted = parse_pod(_pod(TIME_LIMIT_RECORD, reason="Evicted"))
    assert evicted is not None
    assert evicted.reason == "Evicted"  # the pod's own reason wins


def test_a_zero_limit_is_one_already_over_and_infinite_none() -> None:
    """`scontrol update TimeLimit=0` (sbatch's `-t 0` is INFINITE already), as the local
    runner reads it: the init ends the job at once."""
    spec = make_job(1).build().spec

    def limit(minutes: int | None) -> int | None:
        req = GangRequest(job_id=1, spec=spec, user="u", uid=1, gid=1, script="#!/bin/sh\n")
        return replace(req, time_limit=minutes).deadline_s(0.25)

    assert [limit(m) for m in (0, 1, INFINITE, None)] == [0, 15, None, None]
    assert json.loads(init_text(None, 0, 1.0, 2)) == {"kill_wait_s": 2, "limit_s": 0}
