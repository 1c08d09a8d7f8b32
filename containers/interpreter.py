"""Which Python other users can run: jobs' `srun` and users' command shims need one."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["shared_python"]


def shared_python(python: str) -> str:
    """The given interpreter, or the system's python3 when the given one sits in a private
    directory (root's pyenv, say). Callers import only the standard library and Caldera."""
    system = "/usr/bin/python3"
    private = any(
        not os.stat(p).st_mode & 0o001 for p in Path(python).parents if p.exists() and str(p) != "/"
    )
    return system if private and os.path.exists(system) else python
