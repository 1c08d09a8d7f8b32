"""The per-job supervisor (Caldera's slurmstepd): runs one batch job and records how it went.

Started detached, forked by the spool's fork server (containers.forkserver, itself
`python -m containers.supervisor --fork-server SPOOL`), or on its own with
`python -m containers.supervisor --detach JOBDIR`: a new session and a double fork either
way, so it outlives the gateway and the fork server, even a SIGKILL of them. It:

- records its pid and start time (`supervisor.json`), becomes a child subreaper so that no
  descendant of the job escapes it, opens the job's files as the user and starts the script
  (as a process, or in a container);
- enforces the time limit (SIGCONT+SIGTERM to every process of the job, SIGKILL after
  KillWait; TIMEOUT), delivers `--signal` ahead of the limit (to the batch shell with `B:`,
  else to the srun steps), enforces the memory limit like OverMemoryKill (sums the RSS of the
  job's processes; SIGKILL; OUT_OF_MEMORY with Slurm's SIG_OOM status), and serves requests
  in `ctl/` (cancel, signal, a step's signal or cancel: containers/step_signals.py, suspend
  and resume: containers/suspend.py, the time limit clock standing still while suspended);
  SIGTERM to the supervisor itself cancels the job; a job that ends waits for its srun steps
  to record their end (slurmstepd's COMPLETING), SIGKILL to their tasks after KillWait;
- writes the `batch` step and `result.json` (atomically), then exits.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil

from containers.notify import announce_change
from containers.proc import set_child_subreaper
from containers.proctrack import ENDED_FILE, RECORD_FILE, from_record
from containers.runner import (
    BatchRunner,
    IOSetupError,
    OpenedIO,
    ProcessRunner,
    StartError,
    Tracking,
    open_job_io,
)
from containers.spool import LOG_ONLY, JobPlan, JobResult, read_json, step_to_json, write_json
from containers.step_orphans import OrphanWatch, close_steps, killed_step
from containers.step_rules import warning_time
from containers.step_signals import Telling, abort_steps, cancel_step, running_steps, signal_steps
from containers.steprecords import BATCH_STEP, read_steps
from containers.suspend import Pause
from gateway.model.job import Step, batch_step_state, exit_code_pair, wait_status
from gateway.model.state import JobState, Reason

__all__ = ["SIG_IO_FAILURE", "SIG_OOM", "Supervisor", "main"]

SIG_OOM = 253  # Slurm's dummy status for out of memory (sacct: 0:125)
SIG_IO_FAILURE = 53  # the signal slurmstepd reports when the job's files cannot be opened
_MEMORY_POLL_S = 0.2


def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%Y-%m-%dT%H:%M:%S")


class Supervisor:
    """Runs the job of one spool directory to its end."""

    def __init__(self, jobdir: Path) -> None:
        self.dir = jobdir
        data = read_json(jobdir / "plan.json")
        if not isinstance(data, dict):
            raise SystemExit(f"supervisor: no plan in {jobdir}")
        self.plan = JobPlan.from_json(data)
        self.cancel_requested = False
        self.cancelled = False
        self.preempted = False  # the cancel is a preemption's (slurmstepd says so)
        self.preempted_at: float | None = None  # when slurmctld's record says it was ended
        self.requeued = False  # the cancel is scontrol requeue's (slurmstepd says so)
        self.timed_out = False
        self.oom = False
        self.kill_at: float | None = None
        self.ending_at: float | None = None  # when the job's end sent its SIGTERM
        self.started = 0.0
        self.deadline: float | None = None  # the time limit, as a clock time
        self.signal_at: float | None = None  # --signal, ahead of the deadline (sent once)
        self.signal_sent = False
        self.told: set[str] = set()  # steps whose CANCELLED line is written (once each)
        self.max_rss_kb = 0
        self.io: OpenedIO | None = None
        self.pause = Pause(jobdir)
        batch_process = self.plan.batch and self.plan.container is None
        self.orphans = (
            OrphanWatch(jobdir, self.plan.job_id, self.plan.uid) if batch_process else None
        )

    # --- messages into the job's stderr, as slurmstepd writes them ---------------------------

    def _say(self, text: str) -> None:
        if self.io is not None:
            with contextlib.suppress(OSError):
                # slurmstepd names its node (`slurmstepd-node01: error: *** JOB 12 ON ...`)
                line = f"slurmstepd-{self.plan.node}: error: {text}\n"
                os.write(self.io.stderr, line.encode())

    # --- control -----------------------------------------------------------------------------

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        self.cancel_requested = True

    def _read_requests(self) -> list[dict[str, Any]]:
        ctl = self.dir / "ctl"
        requests: list[dict[str, Any]] = []
        with contextlib.suppress(FileNotFoundError):
            for path in sorted(ctl.iterdir()):
                if path.name.startswith("."):
                    continue
                data = read_json(path)
                path.unlink(missing_ok=True)
                if isinstance(data, dict):
                    requests.append(data)
        return requests

    def _signal_steps(self, sig: int, only: str | None = None) -> None:
        signal_steps(self.dir, self.plan.uid, sig, only, self._telling(time.time(), ""))

    def _telling(self, now: float, why: str) -> Telling:
        plan = self.plan
        return Telling(
            str(plan.job_id), plan.kill_wait_s, _stamp(now), why, self._write_line, self.told
        )

    def _write_line(self, line: str) -> None:
        if self.io is not None:
            with contextlib.suppress(OSError):
                os.write(self.io.stderr, f"{line}\n".encode())

    def _terminate(self, runner: BatchRunner, now: float) -> None:
        if self.kill_at is not None:
            return
        self.ending_at = now
        runner.signal_all(signal.SIGCONT)
        runner.signal_all(signal.SIGTERM)
        self.kill_at = now + self.plan.kill_wait_s

    def _serve(self, runner: BatchRunner, now: float) -> None:
        for req in self._read_requests():
            action = req.get("action")
            if action == "cancel":
                self.cancel_requested = True
                self.requeued = self.requeued or req.get("requeue") is True
                if req.get("preempt") and not self.preempted:
                    self.preempted = True
                    at = req.get("at")
                    self.preempted_at = float(at) if isinstance(at, (int, float)) else None
            elif action == "time_limit":  # scontrol update TimeLimit= of the running job
                seconds = req.get("seconds")
                self._set_limit(None if seconds is None else float(seconds))
            elif action in ("suspend", "resume"):
                self._resumed_after(self.pause.apply(runner, action, req.get("token"), now))
            elif action == "signal_step":
                step, sig, by = str(req.get("step")), req.get("signal"), req.get("by")
                if sig is None or sig == signal.SIGKILL:  # scancel's terminate_job_step
                    who = by if isinstance(by, int) else 0
                    cancel_step(self.dir, self.plan.uid, step, who, self._telling(now, ""))
                elif isinstance(sig, int) and 0 < sig <= signal.SIGRTMAX:
                    self._signal_steps(sig, step)
            elif action == "signal":
                sig = int(req.get("signal", 0))
                if sig <= 0:
                    continue
                if req.get("batch_only"):
                    runner.signal_batch(sig)
                else:
                    self._signal_steps(sig)
        if self.cancel_requested and not self.cancelled and not self.timed_out:
            self.cancelled = True
            why = " DUE TO JOB REQUEUE" if self.requeued else ""
            why = " DUE TO PREEMPTION" if self.preempted else why
            at, plan = _stamp(self.preempted_at or now), self.plan  # the record's PreemptTime
            telling = None if self.preempted else self._telling(now, why)  # (not compared yet)
            abort_steps(self.dir, plan.uid, telling)
            self._say(f"*** JOB {plan.job_id} ON {plan.node} CANCELLED AT {at}{why} ***")
            self._terminate(runner, now)

    # --- the run -----------------------------------------------------------------------------

    def _runner(self, io: OpenedIO) -> BatchRunner:
        if self.plan.container is not None:
            from containers.docker_runner import ContainerRunner

            return ContainerRunner(self.plan, io)
        return ProcessRunner(self.plan, io, self._tracking())

    def _tracking(self) -> Tracking | None:
        """The attempt's process group the backend made (None: an old spool without one)."""
        found = from_record(read_json(self.dir / RECORD_FILE))
        if found is None:
            return None
        return Tracking(found[0], found[1], self.dir / ENDED_FILE)

    def run(self) -> int:
        plan = self.plan
        start = time.time()
        me = psutil.Process()
        write_json(
            self.dir / "supervisor.json",
            {"pid": me.pid, "create_time": me.create_time(), "start_time": start},
            durable=False,
        )
        set_child_subreaper()
        signal.signal(signal.SIGTERM, self._on_sigterm)
        signal.signal(signal.SIGINT, self._on_sigterm)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        if (self.dir / ENDED_FILE).exists():  # requeued or lost before it started: never run
            self._finish(
                JobResult(
                    JobState.CANCELLED, 0, 0, Reason.NONE, start, time.time(), message="ended"
                )
            )
            return 0
        self._write_batch_step(JobState.RUNNING, start, None, 0)
        try:
            self.io = open_job_io(plan)
            runner = self._runner(self.io)
            runner.start()
        except StartError as exc:
            sys.stderr.write(f"supervisor: job {plan.job_id}: {exc}\n")
            self._say(str(exc))
            if self.io is not None:
                self.io.close()
            self._launch_failed(exc, start)
            return 0
        status = self._loop(runner, start)
        if self.plan.batch and self.kill_at is not None:
            self._await_steps(runner)
        runner.cleanup()
        self._conclude(status, start, runner)
        return 0

    def _launch_failed(self, exc: StartError, start: float) -> None:
        """FAILED with JobLaunchFailure. Files that cannot be opened end as slurmstepd's failed
        IO setup does: status SIG_IO_FAILURE for the job and its CANCELLED batch step, the
        words only in the node's log (here the gateway's: `extra`), none for scontrol. Other
        failures (an image that cannot be run: Caldera's own) keep exit 1 and their words."""
        end = time.time()
        if isinstance(exc, IOSetupError):
            status = wait_status(signal=SIG_IO_FAILURE)
            self._write_batch_step(JobState.CANCELLED, start, end, status)
            result = JobResult(
                JobState.FAILED,
                status,
                0,
                Reason.JOB_LAUNCH_FAILURE,
                start,
                end,
                extra={LOG_ONLY: str(exc)},
            )
        else:
            status = wait_status(1)
            self._write_batch_step(JobState.FAILED, start, end, status)
            result = JobResult(
                JobState.FAILED, status, 0, Reason.JOB_LAUNCH_FAILURE, start, end, str(exc)
            )
        self._finish(result)

    def _resumed_after(self, paused_s: float) -> None:
        """The time limit clock stood still while the job was suspended (as slurmctld moves
        end_time on resume): the deadline and the --signal time move by the pause."""
        if paused_s <= 0:
            return
        self.started += paused_s
        if self.deadline is not None:
            self.deadline += paused_s
        self._plan_signal()

    def _set_limit(self, limit_s: float | None) -> None:
        """The deadline (and the --signal time before it) for a limit counted from the start;
        a limit already passed ends the job at the next check, as Slurm does."""
        self.deadline = self.started + limit_s if limit_s is not None else None
        self._plan_signal()

    def _plan_signal(self) -> None:
        """When --signal's warning goes out (once), from now on: see warning_time."""
        self.signal_at = None
        if self.plan.signal is not None and self.deadline is not None and not self.signal_sent:
            lead, period = self.plan.signal[1], self.plan.check_period_s
            self.signal_at = warning_time(self.deadline, lead, period, time.time())

    def _loop(self, runner: BatchRunner, start: float) -> int:
        plan = self.plan
        self.started = start
        self._set_limit(plan.time_limit_s)
        next_memory = start
        while True:
            status = runner.poll()
            if status is not None:
                return status
            now = time.time()
            self._serve(runner, now)
            stopped = self.pause.stopped  # suspended: neither the limit nor --signal is due
            if (
                not stopped
                and self.signal_at is not None
                and now >= self.signal_at
                and plan.signal is not None
            ):
                sig, _, batch_only = plan.signal
                if batch_only:
                    runner.signal_batch(sig)
                else:
                    self._signal_steps(sig)
                self.signal_at = None
                self.signal_sent = True
            deadline = self.deadline
            due = deadline is not None and now >= deadline and not stopped
            if due and not (self.timed_out or self.cancelled):
                self.timed_out = True
                self._say(
                    f"*** JOB {plan.job_id} ON {plan.node} CANCELLED AT {_stamp(now)} "
                    "DUE TO TIME LIMIT ***"
                )
                abort_steps(self.dir, plan.uid, self._telling(now, " DUE TO TIME LIMIT"))
                self._terminate(runner, now)
            if now >= next_memory:
                next_memory = now + _MEMORY_POLL_S
                rss = runner.rss_kb()
                self.max_rss_kb = max(self.max_rss_kb, rss)
                limit_kb = plan.memory_limit_mb * 1024
                if limit_kb and rss > limit_kb and not self.oom:
                    self.oom = True
                    self._say(
                        f"Job {plan.job_id} exceeded memory limit ({rss} > {limit_kb}), "
                        "being killed"
                    )
                    runner.signal_all(signal.SIGKILL)
            if self.orphans is not None and self.kill_at is None:
                self.orphans.check(now)
            if self.kill_at is not None and now >= self.kill_at:
                runner.signal_all(signal.SIGKILL)
                self.kill_at = now + 1.0
            runner.wait(plan.poll_interval_s)

    def _conclude(self, status: int, start: float, runner: BatchRunner) -> None:
        end = time.time()
        oom = self.oom or runner.out_of_memory()
        if oom and not (self.cancelled or self.timed_out):
            self._say("Exceeded job memory limit")
        steps = self._close_steps(end)
        # slurmctld records a cancelled or timed-out job's end before the steps it ends: only
        # steps that ended before count in its DerivedExitCode (0:0 when none had)
        until = math.inf if self.ending_at is None or self.preempted else self.ending_at
        ends = [s.exit_code for s in steps if s.step_id != "batch" and (s.end_time or end) < until]
        derived = max(ends, default=0)
        _, sig = exit_code_pair(status)
        batch_state = batch_step_state(status, oom)
        self._write_batch_step(batch_state, start, end, SIG_OOM if oom else status)
        if self.cancelled and self.preempted:
            # slurmctld keeps the batch shell's status (0:15 for the SIGTERM, 0:9 when KillWait
            # ran out) for scontrol; sacct's job row keeps 0:0 (recorded on the burst cluster)
            result = JobResult(JobState.PREEMPTED, status, derived, Reason.NONE, start, end)
        elif self.cancelled:
            result = JobResult(JobState.CANCELLED, 0, derived, Reason.NONE, start, end)
        elif self.timed_out:
            # slurmctld keeps the batch shell's status (0:15 for the SIGTERM) for scontrol; its
            # accounting record, written at the limit before that status came, keeps 0:0. An
            # allocation has no batch shell: 0:0 in both (salloc -t 1 on the test cluster)
            kept = status if self.plan.batch else 0
            result = JobResult(JobState.TIMEOUT, kept, derived, Reason.TIME_LIMIT, start, end)
        elif oom:
            result = JobResult(
                JobState.OUT_OF_MEMORY,
                SIG_OOM,
                derived,
                Reason.NONE,
                start,
                end,
                message="Exceeded job memory limit",
            )
        elif sig:
            result = JobResult(
                JobState.FAILED, status, derived, Reason.JOB_LAUNCH_FAILURE, start, end
            )
        elif status:
            result = JobResult(
                JobState.FAILED, status, derived, Reason.NON_ZERO_EXIT_CODE, start, end
            )
        else:
            result = JobResult(JobState.COMPLETED, 0, derived, Reason.NONE, start, end)
        self._finish(result)

    def _await_steps(self, runner: BatchRunner) -> None:
        """The batch shell is gone; a job ends once its steps are (slurmstepd's COMPLETING):
        each srun records its own end (the SIGTERM's 0:15, or SIGKILL's after KillWait)."""
        assert self.kill_at is not None
        until, tasks_killed = self.kill_at + 2.0, False
        while running_steps(self.dir, self.plan.uid) and time.time() < until:
            if time.time() >= self.kill_at:  # the tasks first: srun tells `task 0: Killed`
                if tasks_killed:
                    runner.signal_all(signal.SIGKILL)
                self._signal_steps(signal.SIGKILL)
                self.kill_at, tasks_killed = time.time() + 1.0, True
            time.sleep(0.05)

    def _close_steps(self, end: float) -> list[Step]:
        """srun steps still RUNNING when the job ended were killed with it. The verdict goes
        into the supervisor's own `closed_steps.json` (never into the user's `steps/`).
        An allocation's steps run outside the job, in salloc's session: their srun ends them
        when it sees the allocation revoked (containers/srun_revoke.py), so they get
        KillWait and a poll to record their own end first."""
        if not self.plan.batch:
            deadline = time.monotonic() + self.plan.kill_wait_s + 2
            while time.monotonic() < deadline and any(
                s.state is JobState.RUNNING and s.step_id != "batch"
                for s in read_steps(self.dir, self.plan.job_id, self.plan.uid)
            ):
                time.sleep(0.2)
        steps: list[Step] = []
        ended: list[Step] = []
        for step in read_steps(self.dir, self.plan.job_id, self.plan.uid):
            if step.state is JobState.RUNNING and step.step_id != "batch":
                step = killed_step(step, end)
                ended.append(step)
            steps.append(step)
        close_steps(self.dir, ended)
        return steps

    def _write_batch_step(
        self, state: JobState, start: float, end: float | None, status: int
    ) -> None:
        plan = self.plan
        if not plan.batch:  # an allocation: slurmd runs no batch step for salloc
            return
        step = Step(
            job_id=plan.job_id,
            step_id="batch",
            name="batch",
            state=state,
            start_time=start,
            end_time=end,
            exit_code=status,
            nodes=(plan.node,),
            ntasks=1,
            cpus=plan.cpus,
            max_rss_kb=self.max_rss_kb,
        )
        write_json(self.dir / BATCH_STEP, step_to_json(step), durable=end is not None)

    def _finish(self, result: JobResult) -> None:
        data = result.to_json()
        data["max_rss_kb"] = self.max_rss_kb
        write_json(self.dir / "result.json", data)
        announce_change(self.dir.parent.parent)  # the spool's gateway polls now


def _detach() -> None:
    """Double fork: the caller's child returns at once; the grandchild goes on alone."""
    if os.fork() > 0:
        os._exit(0)
    with contextlib.suppress(OSError):
        os.setsid()
    if os.fork() > 0:
        os._exit(0)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--fork-server"]:  # every supervisor, forked from one pre-imported process
        from containers.forkserver import main as serve

        return serve(args[1:])
    detach = "--detach" in args
    args = [a for a in args if a != "--detach"]
    if len(args) != 1:
        sys.stderr.write(
            "usage: python -m containers.supervisor [--detach] JOBDIR\n"
            "       python -m containers.supervisor --fork-server SPOOL\n"
        )
        return 2
    if detach:
        _detach()
    os.chdir("/")
    os.umask(0o077)  # what the supervisor itself creates is private
    return Supervisor(Path(args[0])).run()


if __name__ == "__main__":
    sys.exit(main())
