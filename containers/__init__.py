"""Container runtime layer: the local backend (supervised batch jobs), srun, Docker-API runner.

- `LocalBackend` (containers.backend): the Backend protocol on one machine; it plans a run
  (containers.planning), launches it (containers.launching), reports it from the spool
  (containers.events: the one table from spool records to the gateway's events) and ends
  it for good (containers.attempts, containers.proctrack).
- `containers.supervisor`: the detached per-job supervisor (Caldera's slurmstepd), forked
  by `containers.forkserver` (one pre-imported process per spool: no interpreter start per
  job).
- `containers.srun`: `srun` inside local jobs (`python -m containers.srun`, or `srun` in the
  job's PATH, a shim written by the backend into `<spool>/bin`). It needs only the standard
  library, so any Python 3.11 on the node runs it.
- `containers.docker_runner`: the batch script in a container through the Docker API.
"""

from __future__ import annotations

from typing import Any

__all__ = ["STEP_DIR_VAR", "LocalBackend"]


def __getattr__(name: str) -> Any:
    # Lazy: `python -m containers.srun` must not import psutil or docker.
    if name in __all__:
        from containers import backend

        return getattr(backend, name)
    raise AttributeError(name)
