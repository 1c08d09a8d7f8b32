"""The supervisor's watch for srun steps whose srun died (containers/step_orphans.py): a
real process stands for each srun, the step records are srun's own format."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from containers.spool import read_json, step_to_json, write_json
from containers.step_orphans import OrphanWatch
from containers.steprecords import CANCELLED_STEPS, CLOSED_STEPS, read_steps
from gateway.model.job import Step
from gateway.model.state import JobState


def _record(jobdir: Path, sid: int, state: JobState, srun_pid: int, tasks: list[int]) -> None:
    step = Step(
        job_id=7,
        step_id=str(sid),
        name="sleep",
        state=state,
        start_time=1000.0,
        end_time=None if state is JobState.RUNNING else 1001.0,
        nodes=("node01",),
        extra={"srun_pid": str(srun_pid), "tres_per_node": "gres/gpu:1"},
    )
    data = step_to_json(step)
    data["task_pids"] = tasks
    write_json(jobdir / "steps" / f"{sid}.json", data, durable=False)


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_a_step_whose_srun_died_is_cancelled_and_its_tasks_killed(tmp_path: Path) -> None:
    (tmp_path / "steps").mkdir()
    gone = _sleeper()
    gone.kill()
    gone.wait()  # an srun that is no more (reaped)
    alive, task, other = _sleeper(), _sleeper(), _sleeper()
    try:
        _record(tmp_path, 0, JobState.RUNNING, gone.pid, [task.pid])  # orphaned
        _record(tmp_path, 1, JobState.RUNNING, alive.pid, [other.pid])  # its srun lives
        _record(tmp_path, 2, JobState.COMPLETED, gone.pid, [])  # ended: left alone
        watch = OrphanWatch(tmp_path, 7, os.getuid())
        watch.check(2000.0)
        assert task.wait(timeout=10) == -9  # the orphaned step's task, SIGKILLed
        assert other.poll() is None
        steps = {s.step_id: s for s in read_steps(tmp_path, 7, os.getuid())}
        assert steps["0"].state is JobState.CANCELLED
        assert steps["0"].exit_code == 9
        assert steps["0"].end_time == 2000.0
        assert steps["0"].extra["requid"] == str(os.getuid())  # sacct: CANCELLED by the user
        assert steps["0"].extra["tres_per_node"] == "gres/gpu:1"  # the step's own extras kept
        assert steps["1"].state is JobState.RUNNING
        assert steps["2"].state is JobState.COMPLETED
        assert read_json(tmp_path / CANCELLED_STEPS) == {"0": os.getuid()}
        watch.check(2000.5)  # not before a second has passed
        alive.kill()
        alive.wait()
        watch.check(2001.0)  # now step 1's srun is gone too; step 0's verdict is kept
        closed = read_json(tmp_path / CLOSED_STEPS)
        assert isinstance(closed, dict)
        assert sorted(closed) == ["0", "1"]
        assert other.wait(timeout=10) == -9
    finally:
        for proc in (alive, task, other):
            proc.kill()
            proc.wait()
