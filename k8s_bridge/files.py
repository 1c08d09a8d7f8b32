"""The job's files on Kubernetes nodes: its working directory and its -o/-e/-i files, in
the user's own directories as on the submit host (pure; render.py puts it in the pods).

The cluster's filesystem map (K8sOptions.filesystem) says which submit-host directories the
nodes have too. A job whose working directory is below one gets that directory as a hostPath
volume at the same path in every rank's pod, starts there, and rank 0's batch script writes
its output where Slurm's slurmstepd would: `-o/-e` expanded as slurmstepd expands them
(gateway.compat.filename; default `slurm-%j.out`, `slurm-%A_%a.out` for an array task, in
the working directory), truncated unless --open-mode=append, created by the pod's user (the
submitter's uid/gid) with the submitter's umask (SLURM_UMASK). Without a map nothing changes
(the output stays in the pod's log); with one, a job whose directory or files lie outside it
is refused with a message, since it could not write where the user will look.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gateway.compat.filename import NO_TASK, PatternContext, default_output, expand_for_open
from gateway.compat.job_env import submit_umask
from k8s_bridge.names import GangNames
from k8s_bridge.options import K8sOptions, SharedDir
from k8s_bridge.request import GangRequest, TranslationError

__all__ = ["JobFiles", "job_files"]

Manifest = dict[str, Any]


@dataclass(frozen=True, slots=True)
class JobFiles:
    """What every rank's pod mounts, where it starts, and how rank 0 runs the script."""

    volumes: tuple[Manifest, ...] = ()
    mounts: tuple[Manifest, ...] = ()
    workdir: str | None = None
    stdout: str | None = None
    stderr: str | None = None  # None: with stdout
    stdin: str = "/dev/null"
    umask: int = 0o022
    append: bool = False

    def batch_command(self, script: str, args: Sequence[str]) -> list[str]:
        """Rank 0's command: the script with its files opened as slurmstepd opens them,
        truncated unless --open-mode=append, then open for appending: the init's lines
        (pod_init.py: `*** JOB ... CANCELLED AT ... ***`) go to the end of the file through
        a descriptor of its own and never overwrite what the script wrote."""
        if self.stdout is None:
            return [script, *args]
        out = shlex.quote(self.stdout)
        together = self.stderr in (None, self.stdout)
        err = "2>&1" if together else f"2>>{shlex.quote(self.stderr or '')}"
        files = [out] if together else [out, shlex.quote(self.stderr or "")]
        truncate = "" if self.append else "".join(f": >{f} && " for f in files)
        line = (
            f"umask {self.umask:04o}; cd {shlex.quote(self.workdir or '/')} && {truncate}"
            f'exec "$0" "$@" <{shlex.quote(self.stdin)} >>{out} {err}'
        )
        return ["/bin/sh", "-c", line, script, *args]


def _shared(path: str, fs: Sequence[SharedDir]) -> SharedDir | None:
    return max((d for d in fs if d.holds(path)), key=lambda d: len(d.prefix), default=None)


def job_files(req: GangRequest, names: GangNames, opts: K8sOptions) -> JobFiles:
    """The job's files on this cluster (see the module doc)."""
    if not opts.filesystem:
        return JobFiles()
    spec = req.spec
    workdir = posixpath.normpath(spec.workdir or "/")
    home = _shared(workdir, opts.filesystem)
    if home is None:
        raise TranslationError(
            f"working directory {workdir} is not shared with cluster {req.cluster} "
            f"(its filesystem map: {', '.join(d.prefix for d in opts.filesystem)})"
        )
    ctx = PatternContext(
        job_id=req.job_id,
        job_name=spec.name,
        user=req.user,
        workdir=workdir,
        array_job_id=req.array_job_id,
        array_task_id=req.array_task_id if req.array_task_id is not None else NO_TASK,
        node_name=names.pod(0),
    )
    stdout = expand_for_open(spec.stdout or default_output(req.array_task_id is not None), ctx)
    stderr = expand_for_open(spec.stderr, ctx) if spec.stderr else None
    stdin = expand_for_open(spec.stdin, ctx) if spec.stdin else "/dev/null"
    used = {home}
    for what, path in (("-o", stdout), ("-e", stderr), ("-i", stdin)):
        if path is None or path.startswith("/dev/"):
            continue
        where = _shared(posixpath.normpath(path), opts.filesystem)
        if where is None:
            raise TranslationError(
                f"{what} {path} is not in a directory shared with cluster {req.cluster}"
            )
        used.add(where)
    ordered = sorted(used, key=lambda d: d.prefix)
    return JobFiles(
        volumes=tuple(
            {"name": f"shared-{i}", "hostPath": {"path": d.source, "type": "Directory"}}
            for i, d in enumerate(ordered)
        ),
        mounts=tuple({"name": f"shared-{i}", "mountPath": d.prefix} for i, d in enumerate(ordered)),
        workdir=workdir,
        stdout=stdout,
        stderr=stderr,
        stdin=stdin,
        umask=submit_umask(req.environment),
        append=spec.open_mode == "append",
    )
