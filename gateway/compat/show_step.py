"""`scontrol show step`: a running step's record as `slurm_sprint_job_step_info` prints it.

The batch step has no CPUs, TRES, distribution or srun of its own (`CPUs=0 TRES=(null)`,
`SrunHost:Pid=(null):0`); an srun step shows what it was given (srun's pid; Dist=Cyclic
when it has no more tasks than nodes, as srun asks). A step's time limit is the job's only
when srun set one (`--time`), which Caldera does not record: UNLIMITED.
"""

from __future__ import annotations

from gateway.compat.fmt_common import make_time_str
from gateway.compat.hostlist import compress
from gateway.compat.job_fields import format_mem
from gateway.compat.tres import recorded_count, recorded_gpus
from gateway.model.job import Job, Step

__all__ = ["show_step"]

_NULL = "(null)"
# slurm_step_dist_string's words for the distributions srun sets
_DISTRIBUTIONS = frozenset({"Block", "Cyclic", "Plane", "Arbitrary", "Unknown"})


def _gres(step: Step, job: Job) -> str:
    """The GPUs a local step recorded per node, as TRES items (typed first)."""
    counts = recorded_gpus(step.extra.get("gpus"), len(step.nodes))
    if not counts or not sum(counts):
        return ""
    types = {p.node: p.gpu_type for p in job.placement}
    typed: dict[str, int] = {}
    for node, count in zip(step.nodes, counts, strict=True):
        gpu_type = types.get(node)
        if count and gpu_type:
            typed[gpu_type] = typed.get(gpu_type, 0) + count
    named = "".join(f"gres/gpu:{t}={n}," for t, n in sorted(typed.items()))
    return f"{named}gres/gpu={sum(counts)},"


def show_step(step: Step, job: Job, *, one_liner: bool = False) -> str:
    """One step record (ends with a blank line, or one newline with -o)."""
    numbered = step.step_id.isdigit()
    step_id = f"{job.job_id}.{step.step_id}"
    if job.array_job_id and job.array_task_id is not None:
        step_id = f"{job.array_job_id}_{job.array_task_id}.{step.step_id}"
    ex = step.extra
    cpus = step.cpus if numbered else 0
    mb = recorded_count(ex.get("mem_mb"))  # (a local step's record is its user's)
    mem = f"mem={format_mem(mb)}," if mb is not None else ""
    tres = ex.get("tres_alloc") or (
        f"cpu={step.cpus},{_gres(step, job)}{mem.replace('mem=0,', '')}node={len(step.nodes) or 1}"
        if numbered
        else _NULL
    )
    dist = ex.get("dist", "Block")
    dist = dist if dist in _DISTRIBUTIONS else "Block"  # (a local step's record is its user's)
    freq = "CPUFreqReq=Default" + (f" Dist={dist}" if numbered else "")
    host = ex.get("srun_host") or (job.nodes[0] if numbered and job.nodes else _NULL)
    pid = ex.get("srun_pid", "0")
    pid = pid if pid.isascii() and pid.isdigit() and len(pid) < 11 else "0"
    lines = [
        f"StepId={step_id} UserId={job.uid} StartTime={make_time_str(step.start_time)} "
        "TimeLimit=UNLIMITED",
        f"State={step.state.long} Partition={job.partition} NodeList={compress(step.nodes)}",
        f"Nodes={len(step.nodes)} CPUs={cpus} Tasks={step.ntasks} Name={step.name} Network={_NULL}",
        f"TRES={tres}",
        f"ResvPorts={_NULL}",
        freq,
        f"SrunHost:Pid={host}:{pid}",
    ]
    return (" ".join(lines) + "\n") if one_liner else ("\n   ".join(lines) + "\n\n")
