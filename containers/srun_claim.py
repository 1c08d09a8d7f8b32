"""srun getting its step's resources in a job (local, or in a Kubernetes gang's pods), as
Slurm 22.05's srun does: ask, and while the job's other steps hold what it needs, say so
and wait for one of them to end.

Lines and statuses as on the test cluster: `srun: Job J step creation temporarily
disabled, retrying (Requested nodes are busy)` once its first wait is over (a step ended,
or srun's step_wait of 60-69 s), `... still disabled ...` after each later wait, `srun:
Step created for job J` once it runs; a step that can never fit is
`srun: error: Unable to create step for job J: <reason>` (status 1), as is a busy one under
`-I`. A signal while waiting ends srun: `srun: Cancelled pending job step with signal N`,
then the step refused as "Job/step already completing or completed"; when the job itself
ends only the refusal is said (slurmctld answers the retry before the signal lands).

Standard library only (with step_alloc.py and step_book.py): Kubernetes job pods run it
beside their launcher (k8s_bridge/launch.py ships it).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from containers.step_alloc import GpuAsk, Grant, JobShare, Refused, StepAsk, megabytes
from containers.step_book import Claimed, StepBook
from containers.step_rules import JOB_ENDING, WAITING_PREFIX

__all__ = [
    "JOB_GPUS_VAR",
    "STEP_GPU_VARS",
    "JobGpus",
    "claim_step",
    "gpu_ask",
    "gpu_env",
    "job_gpus",
    "job_share",
    "step_ask",
]

# The job's GPUs as its steps need them (set by the runner): a JSON object, see JobGpus.
JOB_GPUS_VAR = "CALDERA_JOB_GPUS"
# what Slurm's gres/gpu plugin sets in a step's tasks (the step's own GPUs)
_GPU_VARS = (
    "CUDA_VISIBLE_DEVICES",
    "GPU_DEVICE_ORDINAL",
    "ROCR_VISIBLE_DEVICES",
    "ZE_AFFINITY_MASK",
)
STEP_GPU_VARS = (*_GPU_VARS, "SLURM_STEP_GPUS", "SLURM_GPUS_ON_NODE")

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


@dataclass(frozen=True, slots=True)
class JobGpus:
    """The job's GPU request (its type, per node / per job / per task counts, 0 if unset:
    slurmctld checks a step's against it) and the GPU indices it holds on each node."""

    gpu_type: str | None = None
    per_node: int = 0
    per_job: int = 0
    per_task: int = 0
    nodes: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def render(self) -> str:
        """The JOB_GPUS_VAR value."""
        counts = {"type": self.gpu_type, "per_node": self.per_node, "per_job": self.per_job}
        data = {**counts, "per_task": self.per_task, "nodes": self.nodes}
        return json.dumps(data, separators=(",", ":"), sort_keys=True)


def job_gpus(env: Mapping[str, str]) -> JobGpus | None:
    """JOB_GPUS_VAR read back; None when unset or not as the runner writes it."""
    try:
        data = json.loads(env.get(JOB_GPUS_VAR, ""))
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), dict):
        return None
    gpu_type = data.get("type")
    counts = [data.get(k, 0) for k in ("per_node", "per_job", "per_task")]
    nodes: dict[str, tuple[int, ...]] = {}
    for name, ids in data["nodes"].items():
        if not isinstance(ids, list) or not all(type(i) is int and i >= 0 for i in ids):
            return None
        nodes[str(name)] = tuple(ids)
    if not all(type(c) is int and c >= 0 for c in counts):
        return None
    if gpu_type is not None and not isinstance(gpu_type, str):
        return None
    return JobGpus(gpu_type, counts[0], counts[1], counts[2], nodes)


def _count(text: str | None) -> int | None:
    """A `[type:]count` value's count (None when not a plain number)."""
    tail = (text or "").rsplit(":", 1)[-1]
    return int(tail) if tail.isascii() and tail.isdigit() and len(tail) < 10 else None


def gpu_ask(options: Mapping[str, str | None], job: JobGpus | None) -> GpuAsk | None:
    """The step's GPUs as slurmctld takes them (`_copy_job_tres_to_step`): `--gres=none`
    or only zero counts, none; no GPU option at all, the job's own request."""
    gres = options.get("gres")
    if gres is not None and gres.strip().lower() == "none":
        return None
    per_node = None
    for part in (gres or "").split(","):
        fields = part.removeprefix("gres/").split(":")
        if fields[0] == "gpu":
            per_node = _count(part) if len(fields) > 1 else 1
    if per_node is None:
        per_node = _count(options.get("gpus-per-node"))
    asked = GpuAsk(
        per_node or 0,
        _count(options.get("gpus-per-task")) or 0,
        _count(options.get("gpus")) or 0,
    )
    if asked != GpuAsk():
        return asked
    named = ("gres", "gpus-per-node", "gpus-per-task", "gpus")
    if any(name in options for name in named) or job is None:
        return None  # zeros only: the step takes no GPUs
    own = GpuAsk(job.per_node, job.per_task, job.per_job)
    # a job holding GPUs it did not ask for (--exclusive) gives its steps none
    return own if job.nodes and own != GpuAsk() else None


def tres_per_node(options: Mapping[str, str | None]) -> str | None:
    """The step's `--gres` as slurmctld keeps it (squeue -s %b): each item prefixed
    `gres:` (`gpu:1` -> `gres:gpu:1`); None without it or with `--gres=none`."""
    gres = (options.get("gres") or "").strip()
    if not gres or gres.lower() == "none":
        return None
    items = [i if i.startswith(("gres:", "gres/")) else f"gres:{i}" for i in gres.split(",") if i]
    return ",".join(items) or None


def gpu_env(gpus: Sequence[int] | None) -> dict[str, str]:
    """What the gres/gpu plugin sets in a task for its node's share of the step's GPUs
    (SLURM_JOB_GPUS stays the job's); an empty dict for no GPUs (the caller unsets)."""
    if not gpus:
        return {}
    ids = ",".join(str(i) for i in gpus)
    env = dict.fromkeys(_GPU_VARS, ids)
    env.update(SLURM_STEP_GPUS=ids, SLURM_GPUS_ON_NODE=str(len(gpus)))
    return env


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
    held = job_gpus(env)
    gpus = tuple(held.nodes.get(n, ()) for n in nodes) if held is not None else ()
    if per_node:
        return JobShare(nodes, cpus, (per_node,) * len(nodes), per_node, gpus)
    if per_cpu:
        return JobShare(nodes, cpus, tuple(per_cpu * c for c in cpus), gpus=gpus)
    return JobShare(nodes, cpus, None, gpus=gpus)


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
    overcommit = "overcommit" in options
    relative = _count(options.get("relative")) if "relative" in options else None
    return StepAsk(
        tasks_per_node=tuple(tasks_per_node),
        cpus_per_task=cpus_per_task,
        cpu_count=0 if overcommit else sum(tasks_per_node) * (cpus_per_task if cpus_set else 1),
        nodelist=tuple(nodelist),
        whole=not exact or "whole" in options,
        overlap="overlap" in options,
        mem_per_cpu=per_cpu or None,
        mem_per_node=per_node or None,
        gpu=gpu_ask(options, job_gpus(env)),
        relative=relative,
        overcommit=overcommit,
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
    marker = step_dir / f"{WAITING_PREFIX}{os.getpid()}"
    try:
        immediate = _immediate(options.get("immediate", "0"), "immediate" in options)
        return _until_created(book, job, ask, record, job_id, got, step_dir, immediate)
    finally:
        if not (step_dir / JOB_ENDING).exists():  # (else kept: the job's end waits for
            with contextlib.suppress(OSError):  # this srun to be gone, its shell told)
                marker.unlink()
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
    """srun's loop (launch.c, step_ctx.c): a busy step waits for a step to end (or
    step_wait, 60-69 s), then says it is still disabled as it asks again; its first
    refusal is said only then, after that first wait, as slurm_step_ctx_create_timeout
    returns only once its wait is over."""
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
        if tries == 0:
            _mark_waiting(step_dir)
        deadline = time.monotonic() + step_wait
        ending = step_dir / JOB_ENDING
        while not got and time.monotonic() < deadline and not ending.exists():
            time.sleep(_POLL_S)
            if not running <= book.snapshot():  # a step ended: slurmctld wakes the waiting
                break
        state = "temporarily" if tries == 0 else "still"
        disabled = f"srun: Job {job_id} step creation {state} disabled, retrying ({reason.value})"
        if got or ending.exists():
            if got and not ending.exists():
                _say(f"srun: Cancelled pending job step with signal {got[0]}")
            else:  # woken by the job's end: still busy, then refused at the next try
                _say(disabled)
            _say(refused + _ALREADY_DONE)
            return 1
        _say(disabled)
        tries += 1


def _mark_waiting(step_dir: Path) -> None:
    """`.waiting-PID` in the step directory while this srun waits (step_rules.py)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with contextlib.suppress(OSError):
        os.close(os.open(step_dir / f"{WAITING_PREFIX}{os.getpid()}", flags, 0o600))


def _immediate(value: str | None, given: bool) -> bool:
    """`-I`/`--immediate[=secs]`: a busy step is refused at once (as the test cluster did
    for -I and --immediate=2); -I0 waits as usual."""
    return given and not (value is not None and value.strip() == "0")


def _say(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
