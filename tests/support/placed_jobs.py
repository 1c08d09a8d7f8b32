"""One request run to completion on one idle partition, and where it was placed: what the
node-list and node-range differential tests compare between Caldera and the real cluster."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tests.support.slurm_stack import cancel, job_id_from_sbatch

__all__ = ["Run", "placed"]

Run = Callable[[list[str]], subprocess.CompletedProcess[str]]

_SCRIPT = "echo $SLURM_JOB_NODELIST $SLURM_NNODES $SLURM_TASKS_PER_NODE"


def placed(run: Run, where: Path, args: tuple[str, ...]) -> list[str]:
    """What sbatch said, then (when accepted) the job's view and sacct's, once it ended."""
    out = where / f"w-{time.time_ns()}.out"
    done = run(["sbatch", "--parsable", "-p", "real", *args, "-o", str(out), "--wrap", _SCRIPT])
    if done.returncode != 0:
        return [done.stderr.strip(), f"rc={done.returncode}"]
    job = job_id_from_sbatch(done.stdout)
    deadline = time.monotonic() + 60
    while True:  # (scontrol, not sacct: slurmdbd may name the batch host alone for a while)
        text = run(["scontrol", "-o", "show", "job", job]).stdout
        got = dict(re.findall(r"(\w+)=(\S*)", text))
        if got.get("JobState") == "COMPLETED" and out.exists() and out.read_text():
            fields = ("JobState", "NodeList", "NumNodes", "NumCPUs", "NumTasks", "TRES")
            return [out.read_text().strip(), "|".join(got.get(f, "?") for f in fields)]
        if time.monotonic() > deadline:
            cancel(job)
            raise AssertionError(f"{args}: {text!r}")
        time.sleep(0.5)
