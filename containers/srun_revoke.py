"""srun in an allocation that salloc holds: its step ends when the allocation is revoked.

Inside a batch job the job's supervisor ends every process of the job, steps included. The
command salloc runs, and the steps its srun starts, live in the user's session instead, so
when the allocation is cancelled or times out nothing else would stop them: srun watches
its job (as srun hears it from slurmctld) and ends the step as slurmstepd does. What the
test cluster (Slurm 22.05, KillWait 5) printed for `srun sleep 30` under a salloc whose job
was cancelled: `srun: Job step aborted: Waiting up to 7 seconds for job step to finish.`,
`slurmstepd-node01: error: *** STEP J.0 ON node01 CANCELLED AT <time> ***` (the step's
first node), then `srun: error: node01: task 0: Terminated` per node; srun exited 143 and
sacct kept the step CANCELLED 0:15. The tasks get SIGCONT and SIGTERM at once, SIGKILL
after KillWait.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime

from gateway.model.values import INFINITE

__all__ = ["ALLOCATION_VAR", "RevocationWatch", "revocation"]

# set by salloc (and srun outside a job) in its command's environment to the job id: srun
# watches that job (a batch job submitted from the command inherits it with another id)
ALLOCATION_VAR = "CALDERA_ALLOCATION"
_HOLDING = ("PENDING", "RUNNING", "CONFIGURING", "SUSPENDED")
_POLL_S = 0.5


def revocation(job_id: str) -> str:
    """How the gateway revoked the allocation: "" while it holds (or the gateway does not
    answer), TIMEOUT past its time limit, else the job's state; revoked also while the job
    still shows RUNNING because its supervisor waits for these steps (cancelled, or past
    its time limit)."""
    from gateway.cli.common import GatewayError, call

    try:
        jobs = call("GET", f"/v1/jobs/{job_id}")["jobs"]
    except GatewayError:
        return ""
    if not jobs:
        return "UNKNOWN"
    job = jobs[0]
    state = str(job["state"])
    if state not in _HOLDING:
        return state
    limit, start = job.get("time_limit"), job.get("start_time")
    timed = isinstance(limit, int) and 0 < limit < INFINITE and isinstance(start, float | int)
    if timed and time.time() >= start + limit * 60:
        return "TIMEOUT"
    return "CANCELLED" if job.get("cancelled_by") is not None else ""


class RevocationWatch:
    """Polls the allocation while a step runs; once it is revoked, tells it as srun and
    slurmstepd do and has `terminate(grace)` end the tasks (in a thread of its own: it
    waits out KillWait for tasks that outlive SIGTERM)."""

    def __init__(
        self,
        job_id: str,
        ident: str,
        first_node: str,
        kill_wait_s: float,
        terminate: Callable[[float], None],
        revoked_now: Callable[[str], str] = revocation,
    ) -> None:
        self.job_id, self.ident, self.first_node = job_id, ident, first_node
        self.kill_wait_s, self.terminate, self.revoked_now = kill_wait_s, terminate, revoked_now
        self.revoked = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> RevocationWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(_POLL_S):
            if not self.revoked_now(self.job_id):
                continue
            self.revoked = True
            wait = int(self.kill_wait_s) + 2
            stamp = datetime.now().strftime("%Y-%m-%dT%H:%M:%S")
            node = self.first_node
            sys.stderr.write(
                f"srun: Job step aborted: Waiting up to {wait} seconds for job step to finish.\n"
                f"slurmstepd-{node}: error: *** STEP {self.ident} ON {node} CANCELLED AT "
                f"{stamp} ***\n"
            )
            sys.stderr.flush()
            ending = threading.Thread(target=self.terminate, args=(self.kill_wait_s,))
            ending.daemon = True  # srun waits for its tasks, not for this thread
            ending.start()
            return
