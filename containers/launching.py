"""Launching one run: its spool directory made safely, then its detached supervisor started.

Also the `srun` shim in `<spool>/bin` that every job finds first on its PATH, and the
profile hook that puts it back when a login shell (`#!/bin/bash -l`) resets PATH.
"""

from __future__ import annotations

import contextlib
import os
import shlex
from pathlib import Path

from containers.forkserver import ForkServerClient, pythonpath
from containers.spool import JobPlan, open_dir, write_json
from gateway.model.backend import BackendError, Launch

__all__ = [
    "PROFILE_HOOK",
    "SHIMS_DIR_VAR",
    "SRUN_DIR_VAR",
    "prepare",
    "shims_dir",
    "spawn",
    "write_profile_hook",
    "write_srun_shim",
]

SRUN_DIR_VAR = "CALDERA_SRUN_DIR"  # the shim's directory, in every job's environment
PROFILE_HOOK = Path("/etc/profile.d/caldera-srun.sh")
SHIMS_DIR_VAR = "CALDERA_SHIMS_DIR"  # the submitter's Caldera commands (scontrol...), if any
SHIMS_MARKER = ".caldera-shims"  # what `caldera shims` leaves in its directory
# /etc/profile sets PATH afresh and then sources /etc/profile.d/*.sh: on a Slurm node the
# real srun is in that PATH, here the job's shim is not, so a login shell would find no srun
# (or the machine's own Slurm srun). Static text: nothing in it comes from a user.
_PROFILE_TEXT = f"""# Caldera: inside a job of Caldera's local backend, a login shell
# (#!/bin/bash -l) has just reset PATH; put the job's srun first again, and
# Caldera's other Slurm commands (scontrol...) the job was submitted with.
if [ -n "${{{SRUN_DIR_VAR}:-}}" ] && [ -d "${SRUN_DIR_VAR}" ]; then
  for caldera_dir in "${{{SHIMS_DIR_VAR}:-}}" "${SRUN_DIR_VAR}"; do
    [ -n "$caldera_dir" ] && [ -d "$caldera_dir" ] || continue
    case ":$PATH:" in
      *":$caldera_dir:"*) ;;
      *) PATH="$caldera_dir:$PATH" ;;
    esac
  done
  unset caldera_dir
  export PATH
fi
"""


def shims_dir(path: str) -> str | None:
    """The first directory of `path` holding Caldera's command shims (a login shell's
    /etc/profile drops it, as it drops the job's srun)."""
    for entry in path.split(":"):
        if entry.startswith("/") and os.path.isfile(os.path.join(entry, SHIMS_MARKER)):
            return entry
    return None


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def prepare(jobdir: Path, launch: Launch, plan: JobPlan) -> None:
    """The job's directory, root's (0711: the user reaches the script and `steps/`);
    everything in it made through descriptors, nothing followed: `ctl/` (0700), the
    user's `steps/` (0700) and `slurm_script` (0700), then `plan.json` (0600)."""
    root = os.geteuid() == 0
    with contextlib.suppress(FileExistsError):
        jobdir.mkdir(mode=0o700)
    dir_fd = open_dir(jobdir)
    if dir_fd is None or os.fstat(dir_fd).st_uid != os.geteuid():
        raise BackendError(f"{jobdir} is not a directory of uid {os.geteuid()}")
    owner = (plan.uid, plan.gid) if root else None
    try:
        os.fchmod(dir_fd, 0o711)
        for name, sub_owner in (("ctl", None), ("steps", owner)):
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o700, dir_fd=dir_fd)
            sub = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
            try:
                if sub_owner is not None:
                    os.fchown(sub, *sub_owner)
                os.fchmod(sub, 0o700)
            finally:
                os.close(sub)
        with contextlib.suppress(FileNotFoundError):
            os.unlink("slurm_script", dir_fd=dir_fd)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open("slurm_script", flags, 0o700, dir_fd=dir_fd)
        with os.fdopen(fd, "wb") as fh:
            fh.write(launch.script.encode("utf-8", "surrogateescape"))
            fh.flush()
            os.fchmod(fd, 0o700)
            if owner is not None:
                os.fchown(fd, *owner)
    finally:
        os.close(dir_fd)
    # no fsync: the plan matters to a supervisor, and none outlives a machine crash
    write_json(jobdir / "plan.json", plan.to_json(), mode=0o600, durable=False)


def spawn(server: ForkServerClient, jobdir: Path) -> None:
    """Start the run's supervisor detached, forked by the spool's fork server."""
    try:
        server.spawn(jobdir)
    except (OSError, ValueError) as exc:
        raise BackendError(
            f"cannot start the supervisor of {jobdir.name}: {exc}", retryable=True
        ) from exc


def write_srun_shim(bin_dir: Path, srun_python: str) -> None:
    """`<bin_dir>/srun`: runs containers.srun with `srun_python` (rewritten when it differs)."""
    shim = bin_dir / "srun"
    text = (
        f"#!/bin/sh\n# Caldera's srun for jobs of the local backend\n"
        f"PYTHONPATH={shlex.quote(pythonpath())}${{PYTHONPATH:+:$PYTHONPATH}} "
        f'exec {shlex.quote(srun_python)} -m containers.srun "$@"\n'
    )
    if not shim.exists() or shim.read_text() != text:
        tmp = shim.with_name(f".srun.{os.getpid()}")
        tmp.write_text(text)
        tmp.chmod(0o755)
        os.replace(tmp, shim)


def write_profile_hook(path: Path = PROFILE_HOOK) -> bool:
    """Install the login-shell hook (root, where the profile directory exists): False if not."""
    if os.geteuid() != 0 or not path.parent.is_dir():
        return False
    if path.exists() and path.read_text() == _PROFILE_TEXT:
        return True
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(_PROFILE_TEXT)
    tmp.chmod(0o644)
    os.replace(tmp, path)
    return True
