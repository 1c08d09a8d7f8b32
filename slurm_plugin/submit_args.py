"""Launch -> SubmitRequest: what is sent to Slurm for one Caldera job.

The user's request goes through unchanged (rendered to sbatch options, or to slurmrestd's
job description from the same JobSpec) except for what Caldera owns:
- the partition is the Slurm partition behind Caldera's name for it;
- the comment starts with the tag `caldera:<instance>:<job id>[/<run>]`, then the user's;
- `%j`/`%A`/`%a` in --output/--error (and the default `slurm-%j.out`) name Caldera's ids;
- an array task is submitted as the one-task array `--array=<index>`;
- dependencies become Slurm's own when their targets are jobs of the same cluster (the
  backend computes that); Caldera evaluated the others before releasing the job;
- `--hold` was Caldera's to honour (the job is released when it reaches Slurm), and so
  are `--burst` and `--gpu-memory`, which sbatch does not know;
- an image request wraps the script in a container launcher (slurm_plugin.container);
- the job's environment gets CALDERA_JOB_ID (and CALDERA_ARRAY_JOB_ID) and CALDERA_CLUSTER.
"""

from __future__ import annotations

import os
from dataclasses import replace

from gateway.compat.render import render_argv
from gateway.model.backend import Launch
from slurm_plugin.client import Identity, SubmitRequest
from slurm_plugin.config import SlurmClusterConfig
from slurm_plugin.container import ContainerError, container_wrapper
from slurm_plugin.errors import SlurmRejected
from slurm_plugin.mapping import caldera_output_path, make_tag, tagged_comment

__all__ = ["build_request", "slurm_partition_for"]


def without_shims(path: str) -> str:
    """A PATH without directories of Caldera's command shims."""
    from slurm_plugin.cli import SHIMS_MARKER

    return ":".join(
        d for d in path.split(":") if d and not os.path.exists(os.path.join(d, SHIMS_MARKER))
    )


def slurm_partition_for(launch: Launch, config: SlurmClusterConfig) -> str | None:
    """The Slurm partition to submit to (None: the cluster's default)."""
    wanted = launch.partition or launch.job.partition.split(",")[0]
    if not wanted:
        default = next((p for p in config.partitions if p.default), None)
        return default.slurm if default else None
    slurm = config.slurm_partition(wanted)
    if slurm is None:
        offered = ", ".join(p.name for p in config.partitions)
        raise SlurmRejected(
            f"Batch job submission failed: Invalid partition name specified "
            f"(cluster {config.name} offers {offered}, not {wanted})",
            errno=2000,
        )
    return slurm


def build_request(
    launch: Launch,
    config: SlurmClusterConfig,
    identity: Identity,
    dependency: str | None = None,
) -> SubmitRequest:
    """The submission of `launch.job` to the cluster `config` describes."""
    job = launch.job
    spec = job.spec
    partition = slurm_partition_for(launch, config)
    script = launch.script
    if spec.container_image:
        try:
            script = container_wrapper(
                launch.script,
                spec.container_image,
                spec.workdir,
                config.containers,
                container_workdir=spec.container_workdir,
                mounts=spec.container_mounts,
                name=spec.container_name,
            )
        except ContainerError as exc:
            raise SlurmRejected(f"Batch job submission failed: {exc}") from exc
    sent = replace(
        spec,
        partitions=(partition,) if partition else (),
        clusters=(),
        comment=tagged_comment(config.instance, job.job_id, spec.comment, job.restart_count),
        stdout=caldera_output_path(spec.stdout, job),
        stderr=caldera_output_path(spec.stderr, job, stderr=True),
        dependency=None,
        array=None,
        hold=False,
        uid=None,
        gid=None,
        container_image=None,
        container_mounts=(),
        container_workdir=None,
        container_name=None,
        gpu_memory_mb=None,
        burst=None,
        script_args=(),
        het=(),
    )
    options = render_argv(sent)
    env = dict(launch.environment)
    env.update(launch.env_extra)
    if "PATH" in env:  # on Slurm's nodes `srun` must be Slurm's, not Caldera's shim
        env["PATH"] = without_shims(env["PATH"])
    env["CALDERA_JOB_ID"] = str(job.job_id)
    env["CALDERA_CLUSTER"] = config.name
    if job.array_task_id is not None:
        env["CALDERA_ARRAY_JOB_ID"] = str(job.array_job_id)
        env["CALDERA_ARRAY_TASK_ID"] = str(job.array_task_id)
    return SubmitRequest(
        script=script,
        options=tuple(options),
        spec=sent,
        environment=env,
        workdir=spec.workdir,
        identity=identity,
        tag=make_tag(config.instance, job.job_id, job.restart_count),
        array_task=job.array_task_id,
        dependency=dependency,
        script_args=spec.script_args,
        export_none=(spec.export or "").upper().split(",")[0] == "NONE",
    )
