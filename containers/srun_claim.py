"""srun getting its step's resources in a job (local, or in a Kubernetes gang's pods), as
Slurm 22.05's srun does: ask, and while the job's other steps hold what it needs, say so
and wait for one of them to end.

Lines and statuses as on the test cluster: `srun: Job J step creation temporarily
disabled, retrying (Requested nodes are busy)` at the first refusal, `... still disabled
...` each time a step's end wakes it and it still does not fit (and every 60-69 s, srun's
step_wait), `srun: Step created for job J` once it runs; a step that can never fit is
`srun: error: Unable to create step for job J: <reason>` (status 1), as is a busy one under
`-I`. A signal while waiting ends srun: `srun: Cancelled pending job step with signal N`,
then the step refused as "Job/step already completing or completed"; when the job itself
ends only the refusal is said (slurmctld answers the retry before the signal lands).

Standard library only (with step_alloc.py and step_book.py): Kubernetes job pods run it
beside their launcher (k8s_bridge/launch.py ships it).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from containers.step_alloc import Grant, JobShare, Refused, StepAsk, megabytes
from containers.step_book import Claimed, StepBook
from containers.step_rules import JOB_ENDING

__all__ = ["claim_step", "job_share", "step_ask"]

_POLL_S = 0.1
# step_ctx.c's step_signals: any of them (but SIGCONT) cancels a step still waiting
_CANCELLING = (
    signal.SIGINT,
    signal.SIGQUIT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGALRM,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGPIPE,
)
_ALREADY_DONE = "Job/step already completing or completed"


def job_share(
    nodes: Sequence[str], cpus_per_node: Sequence[int], env: Mapping[str, str]
) -> JobShare | None:
    """What the job holds per node: its nodes and CPUs (from SLURM_JOB_NODELIST and
    SLURM_JOB_CPUS_PER_NODE) and its memory (SLURM_MEM_PER_NODE/CPU); None when the CPUs
    are unknown (nothing is then held back)."""
    if not cpus_per_node or len(cpus_per_node) != len(nodes) or not all(cpus_per_node):
        return None
    per_node = megabytes(env.get("SLURM_MEM_PER_NODE", ""))
    per_cpu = megabytes(env.get("SLURM_MEM_PER_CPU", ""))
    nodes, cpus = tuple(nodes), tuple(cpus_per_node)
    if per_node:
        return JobShare(nodes, cpus, (per_node,) * len(nodes), per_node)
    if per_cpu:
        return JobShare(nodes, cpus, tuple(per_cpu * c for c in cpus))
    return JobShare(nodes, cpus, None)


def step_ask(
    tasks_per_node: Sequence[int],
    cpus_per_task: int,
    options: Mapping[str, str | None],
    nodelist: Sequence[str],
    env: Mapping[str, str],
) -> StepAsk:
    """The step as srun asks slurmctld for it: its memory from the command line, else
    from the batch environment (SLURM_MEM_PER_NODE/CPU); `--exact` implied by -c and
    `--exclusive`. The sizes were checked with srun's options."""
    cpus_set = "cpus-per-task" in options
    per_cpu = per_node = None
    if "mem-per-cpu" in options:
        per_cpu = megabytes(options["mem-per-cpu"] or "")
    elif "mem" in options:
        per_node = megabytes(options["mem"] or "")
    else:
        per_node = megabytes(env.get("SLURM_MEM_PER_NODE", "")) or None
        per_cpu = None if per_node else megabytes(env.get("SLURM_MEM_PER_CPU", "")) or None
    exact = "exact" in options or "exclusive" in options or cpus_set
    return StepAsk(
        tasks_per_node=tuple(tasks_per_node),
        cpus_per_task=cpus_per_task,
        cpu_count=sum(tasks_per_node) * (cpus_per_task if cpus_set else 1),
        nodelist=tuple(nodelist),
        whole=not exact or "whole" in options,
        overlap="overlap" in options,
        mem_per_cpu=per_cpu or None,
        mem_per_node=per_node or None,
    )


Record = Callable[[int, Grant], dict[str, Any]]


def claim_step(
    step_dir: Path,
    job: JobShare,
    ask: StepAsk,
    options: Mapping[str, str | None],
    job_id: str,
    record: Record,
) -> Claimed | int:
    """The step's resources (its id, hold and first record), waiting as srun waits; or
    srun's exit status once it gives up (the lines said)."""
    book = StepBook(step_dir)
    got: list[int] = []

    def note(signum: int, frame: Any) -> None:
        got.append(signum)

    saved = {sig: signal.signal(sig, note) for sig in _CANCELLING}
    try:
        immediate = _immediate(options.get("immediate", "0"), "immediate" in options)
        return _until_created(book, job, ask, record, job_id, got, step_dir, immediate)
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def _until_created(
    book: StepBook,
    job: JobShare,
    ask: StepAsk,
    record: Record,
    job_id: str,
    got: list[int],
    step_dir: Path,
    immediate: bool,
) -> Claimed | int:
    refused = f"srun: error: Unable to create step for job {job_id}: "
    step_wait = 60 + os.getpid() % 10
    tries = 0
    while True:
        answer = book.claim(job, ask, record)
        if isinstance(answer, Claimed):
            if tries:
                _say(f"srun: Step created for job {job_id}")
            return answer
        reason, running = answer
        if reason is not Refused.BUSY or immediate:
            _say(refused + reason.value)
            return 1
        state = "temporarily" if tries == 0 else "still"
        _say(f"srun: Job {job_id} step creation {state} disabled, retrying ({reason.value})")
        tries += 1
        deadline = time.monotonic() + step_wait
        ending = step_dir / JOB_ENDING
        while not got and time.monotonic() < deadline and not ending.exists():
            time.sleep(_POLL_S)
            if not running <= book.snapshot():  # a step ended: slurmctld wakes the waiting
                break
        if got or ending.exists():
            if got and not ending.exists():
                _say(f"srun: Cancelled pending job step with signal {got[0]}")
            _say(refused + _ALREADY_DONE)
            return 1


def _immediate(value: str | None, given: bool) -> bool:
    """`-I`/`--immediate[=secs]`: a busy step is refused at once (as the test cluster did
    for -I and --immediate=2); -I0 waits as usual."""
    return given and not (value is not None and value.strip() == "0")


def _say(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
