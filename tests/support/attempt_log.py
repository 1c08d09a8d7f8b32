"""Jobs that record each of their runs, for the "never twice" tests.

Every record is one line appended under flock: `kind job attempt pid time`. A job's batch
script records `start`, then `beat`s, and `end` when it finishes normally; it also leaves a
double-forked daemon (`setsid`, out of the job's session) that beats until it is killed. So an
earlier attempt still running after the next one started shows as a beat later than the next
attempt's start.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import psutil

__all__ = ["AttemptLog", "Record"]

_REC = """#!/bin/sh
# rec KIND PID: one record, under flock
exec flock "$NT_LOG" sh -c 'printf "%s %s %s %s %s\\n" "$1" "$SLURM_JOB_ID" \\
  "${SLURM_RESTART_COUNT:-0}" "$2" "$(date +%s.%N)" >> "$NT_LOG"' rec "$1" "$2"
"""


@dataclass(frozen=True, slots=True)
class Record:
    kind: str
    job: int
    attempt: int
    pid: int
    time: float


class AttemptLog:
    """The log file and recorder in a directory every job user can write to."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "attempts.log"
        self.rec = directory / "rec.sh"
        self.path.touch()
        self.path.chmod(0o666)
        self.rec.write_text(_REC)
        self.rec.chmod(0o755)

    def script(self, final: int, *directives: str) -> str:
        """A batch script that runs until killed in attempts before `final`, and for about
        half a second in attempt `final` (then ends normally)."""
        head = "".join(f"#SBATCH {d}\n" for d in directives)
        return f"""#!/bin/sh
{head}export NT_LOG={self.path}
R={self.rec}
A=${{SLURM_RESTART_COUNT:-0}}
$R start $$
setsid sh -c 'while :; do "$0" beat $$; sleep 0.05; done' "$R" </dev/null >/dev/null 2>&1 &
if [ "$A" -lt {final} ]; then while :; do $R beat $$; sleep 0.05; done; fi
i=0
while [ $i -lt 10 ]; do $R beat $$; sleep 0.05; i=$((i+1)); done
$R end $$
"""

    def records(self, job: int | None = None) -> list[Record]:
        out = []
        for line in self.path.read_text().splitlines():
            kind, jid, attempt, pid, when = line.split()
            rec = Record(kind, int(jid), int(attempt), int(pid), float(when))
            if job is None or rec.job == job:
                out.append(rec)
        return out

    def wait_for(self, job: int, attempt: int, kind: str = "beat", timeout: float = 30) -> None:
        """Until the attempt has a record of this kind from its daemon too (for beats)."""
        deadline = time.monotonic() + timeout
        while True:
            recs = [r for r in self.records(job) if r.attempt == attempt and r.kind == kind]
            starts = {
                r.pid for r in self.records(job) if r.attempt == attempt and r.kind == "start"
            }
            if kind != "beat" and recs:
                return
            if kind == "beat" and any(r.pid not in starts for r in recs):
                return  # the double-forked daemon runs
            assert time.monotonic() < deadline, f"job {job} attempt {attempt}: no {kind}"
            time.sleep(0.05)

    def assert_never_twice(self, job: int, attempts: int) -> None:
        """Attempts 0..attempts-1 each recorded, the last one ended normally, and no record of
        an attempt later than the next attempt's first: no two attempts ever overlapped."""
        by: dict[int, list[Record]] = defaultdict(list)
        for rec in self.records(job):
            by[rec.attempt].append(rec)
        assert sorted(by) == list(range(attempts)), sorted(by)
        for a in range(attempts):
            assert any(r.kind == "start" for r in by[a]), f"attempt {a} never started"
        assert any(r.kind == "end" for r in by[attempts - 1]), "the last attempt did not end"
        for a in range(attempts - 1):
            last = max(r.time for r in by[a])
            first = min(r.time for r in by[a + 1])
            assert last < first, (
                f"job {job}: attempt {a} still ran {last - first:.3f} s after attempt "
                f"{a + 1} started"
            )

    def assert_all_gone(self, job: int, timeout: float = 5.0) -> None:
        """No process that recorded for the job is alive (the daemons included)."""
        pids = {r.pid for r in self.records(job)}
        deadline = time.monotonic() + timeout
        while True:
            alive = [p for p in pids if _alive(p)]
            if not alive:
                return
            assert time.monotonic() < deadline, f"job {job}: still alive: {alive}"
            time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
