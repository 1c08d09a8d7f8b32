"""Jobs that ask for an image run in a container on the Slurm node: a generated wrapper.

Why a wrapper around `podman run` and not Slurm's own OCI support (`--container`): 22.05's
OCI support needs an `oci.conf` on every node (a site change Caldera cannot make), takes
an unpacked OCI *bundle* path rather than an image (no pull, no image store), and runs the
runtime as the job's user, which on this hybrid cgroup-v1 host fails for crun and needs
rootless runc set up per node. Podman is packaged by Debian 12, runs rootless as the job's
user (`--userns=keep-id`: files the job writes belong to the user; subuid/subgid ranges
are needed for that user), and rootful when the job's user is root. The batch script
Slurm runs is the wrapper; the user's script runs inside the image with the job's whole
environment (`--env-host`), the same working directory (bind-mounted at the same path),
the node's network (so srun/MPI peers and services are reachable) and the user's extra
`--container-mounts`. A `JobSpec.container` (an OCI bundle path) is still passed through
to Slurm as `--container` for sites that configured oci.conf.

No registry is assumed: when the image is not in the user's store on the node, the
wrapper loads `<image_archive_dir>/<image with / and : as _>.tar` (`podman save` output).

Limits (documented): the container gets no Slurm commands, so `srun`/`mpirun` inside it
are not available (use a non-container job, or an image with Slurm and PMIx); GPUs are
not passed in (a site would add CDI `--device nvidia.com/gpu=...` through extra_args); a
container killed by signal N ends with exit code 128+N (podman's convention).
"""

from __future__ import annotations

import re
import secrets
import shlex

from slurm_plugin.config import ContainerConfig

__all__ = ["ContainerError", "archive_name", "container_wrapper"]


class ContainerError(ValueError):
    """The container request cannot be run with this configuration."""


def archive_name(image: str) -> str:
    """The archive file an image is loaded from: `localhost/x:1` -> `localhost_x_1.tar`."""
    return re.sub(r"[/:@]", "_", image) + ".tar"


def _delimiter(script: str) -> str:
    while True:
        token = f"CALDERA_SCRIPT_{secrets.token_hex(8)}"
        if token not in script:
            return token


def container_wrapper(
    script: str,
    image: str,
    workdir: str,
    config: ContainerConfig,
    *,
    container_workdir: str | None = None,
    mounts: tuple[str, ...] = (),
    name: str | None = None,
) -> str:
    """The batch script that runs `script` inside `image` with podman."""
    if config.runtime == "none":
        raise ContainerError("containers are not enabled on this cluster (containers.runtime)")
    if not image or any(c.isspace() for c in image):
        raise ContainerError(f"invalid container image {image!r}")
    q = shlex.quote
    rt = q(config.runtime_path)
    body = script if script.endswith("\n") else script + "\n"
    delim = _delimiter(body)
    inner_dir = container_workdir or workdir
    # shell words: quoted values, plus the two that expand at run time
    run = [
        q(a)
        for a in (
            "run",
            "--rm",
            f"--network={config.network}",
            "--env-host",
            "-v",
            f"{workdir}:{workdir}",
            "-w",
            inner_dir,
            "-v",
        )
    ]
    run.append('"$caldera_dir/script:/.caldera/script:ro"')
    for mount in mounts:
        run += ["-v", q(mount)]
    if name:
        run.append(q(f"--name={name}-") + '"$SLURM_JOB_ID"')
    run += [q(a) for a in config.extra_args]
    run_args = " ".join(run)
    lines = [
        "#!/bin/sh",
        f"# Caldera: the job's script runs in the image {image} (slurm_plugin/container.py)",
        f"caldera_image={q(image)}",
    ]
    if config.containers_conf:
        lines.append(f"export CONTAINERS_CONF={q(config.containers_conf)}")
    lines += [
        'caldera_dir=$(mktemp -d "${TMPDIR:-/tmp}/caldera-job.XXXXXX") || exit 125',
        f"cat >\"$caldera_dir/script\" <<'{delim}'",
        body.rstrip("\n"),
        delim,
        'chmod 700 "$caldera_dir/script"',
        f'if ! {rt} image exists "$caldera_image" >/dev/null 2>&1; then',
    ]
    if config.image_archive_dir:
        archive = f"{config.image_archive_dir.rstrip('/')}/{archive_name(image)}"
        lines += [
            f"  if [ -f {q(archive)} ]; then",
            f"    {rt} load -q -i {q(archive)} >/dev/null ||",
            '      { rm -rf "$caldera_dir"; exit 125; }',
            "  fi",
        ]
    lines += [
        "fi",
        'caldera_userns=""',
        '[ "$(id -u)" = 0 ] || caldera_userns=--userns=keep-id',
        f'{rt} {run_args} $caldera_userns "$caldera_image" /.caldera/script "$@" &',
        "caldera_pid=$!",
        'caldera_fwd() { kill -"$1" "$caldera_pid" 2>/dev/null; }',
        "for caldera_sig in TERM INT HUP USR1 USR2 CONT; do",
        '  trap "caldera_fwd $caldera_sig" "$caldera_sig"',
        "done",
        'wait "$caldera_pid"; caldera_rc=$?',
        'while kill -0 "$caldera_pid" 2>/dev/null; do wait "$caldera_pid"; caldera_rc=$?; done',
        'rm -rf "$caldera_dir"',
        'exit "$caldera_rc"',
        "",
    ]
    return "\n".join(lines)
