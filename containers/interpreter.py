"""Which Python other users can run: jobs' `srun` and users' command shims need one."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

__all__ = ["problem_for_others", "shared_python"]

_NOBODY = 65534  # Debian's nobody/nogroup


def shared_python(python: str) -> str:
    """The given interpreter, or the system's python3 when the given one sits in a private
    directory (root's pyenv, say). Callers import only the standard library and Caldera."""
    system = "/usr/bin/python3"
    private = any(
        not os.stat(p).st_mode & 0o001 for p in Path(python).parents if p.exists() and str(p) != "/"
    )
    return system if private and os.path.exists(system) else python


def problem_for_others(
    python: str, roots: list[str], module: str = "gateway.cli.squeue_cmd"
) -> str | None:
    """Why users other than root cannot run Caldera's commands with `python` and these
    import roots (None: they can). Checked for real, as `nobody`, because a root-made
    install can sit where only root may read (a checkout or virtualenv under /root)."""
    if os.geteuid() != 0:
        return None
    code = f"import sys; sys.path[:0] = {roots!r}; import {module}"
    try:
        proc = subprocess.run(
            [python, "-IS", "-c", code],
            user=_NOBODY,
            group=_NOBODY,
            extra_groups=[],
            cwd="/",
            env={"PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except OSError as exc:
        return f"{python}: {exc.strerror}"
    except subprocess.TimeoutExpired:
        return f"{python} did not start within 30 s"
    if proc.returncode == 0:
        return None
    last = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
    return f"{python} cannot import Caldera as another user: {last}"
