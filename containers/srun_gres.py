"""slurmctld's checks of a step's GPU request against its job's (gres.c
`_validate_step_counts`), with its words: what the batch environment can answer. A job
shows its GPUs there (SLURM_JOB_GPUS) and no other GRES, so only GPUs count as the job's;
their request is the runner's JOB_GPUS_VAR (containers/srun_claim.py)."""

from __future__ import annotations

from collections.abc import Mapping

from containers.srun_claim import gpu_ask, job_gpus

__all__ = ["check_gres"]


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit()


def _gres_asked(options: Mapping[str, str | None]) -> list[tuple[str, str | None]]:
    """The (name, type) of each GRES a step's --gres and --gpus* ask a count above 0 of."""
    items: list[tuple[str, str | None]] = []
    for part in (options.get("gres") or "").split(","):
        fields = part.removeprefix("gres/").split(":")
        if fields[0] in ("", "none"):
            continue
        count = fields.pop() if len(fields) > 1 and _digits(fields[-1]) else "1"
        if int(count):
            items.append((fields[0], fields[1] if len(fields) > 1 else None))
    for name in ("gpus", "gpus-per-node", "gpus-per-task"):
        gpus = (options.get(name) or "0").split(":")
        if not _digits(gpus[-1]) or int(gpus[-1]):
            items.append(("gpu", gpus[0] if len(gpus) > 1 else None))
    if "cpus-per-gpu" in options or "mem-per-gpu" in options:  # srun's cpus/mem_per_tres
        items.append(("gpu", None))
    return items


def check_gres(
    options: Mapping[str, str | None], env: Mapping[str, str], refused: str, nodes: int
) -> list[str]:
    """srun's lines when slurmctld refuses the step's GPU request ([] when it does not)."""
    if options.get("gres") == "":
        return [refused + "Invalid Trackable RESource (TRES) specification"]
    asked = _gres_asked(options)
    if not asked:
        return []
    invalid = refused + "Invalid generic resource (gres) specification"
    if not env.get("SLURM_JOB_GPUS"):
        return ["srun: error: Step requested GRES but job doesn't have GRES", invalid]
    job = job_gpus(env)
    for name, gtype in asked:
        if name != "gpu" or (gtype is not None and job is not None and gtype != job.gpu_type):
            shown = f"{name}:{gtype or '(null)'}"
            return [f"srun: error: Step requested GRES ({shown}) not found in the job", invalid]
    gpu = gpu_ask(options, job)
    if job is None or gpu is None:
        return []
    said = ""
    if gpu.per_step and gpu.per_step < nodes:
        said = f"gres=gpu:{gpu.per_step} is less than the requested min nodes={nodes}"
    elif gpu.per_step and job.per_job and job.per_job < gpu.per_step:
        said = f"gres=gpu:{gpu.per_step} is more than the job's gres=gpu:{job.per_job}"
    elif gpu.per_node and job.per_node and job.per_node < gpu.per_node:
        said = (
            f"gres_per_node=gpu:{gpu.per_node} is more than the job's "
            f"gres_per_node=gpu:{job.per_node}"
        )
    elif gpu.per_task and job.per_task and job.per_task < gpu.per_task:
        said = (
            f"gres_per_task=gpu:{gpu.per_task} is more than the job's "
            f"gres_per_task=gpu:{job.per_task}"
        )
    return [f"srun: error: Step requested {said}", invalid] if said else []
