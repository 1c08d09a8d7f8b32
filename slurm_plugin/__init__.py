"""Everything that talks to or extends a real Slurm cluster.

    from slurm_plugin import load_slurm_config, make_slurm_backends
    backends = make_slurm_backends(load_slurm_config("/etc/caldera/slurm.toml"))

See slurm_plugin/README.md for the design (transports, tags, reconciliation, containers)
and slurm_plugin/clusters.example.toml for the configuration file.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from gateway.model.job import Job
from slurm_plugin.accounting import AccountingRecord
from slurm_plugin.backend import SlurmBackend
from slurm_plugin.config import (
    SlurmClusterConfig,
    SlurmConfigError,
    SlurmSiteConfig,
    load_slurm_config,
    parse_slurm_config,
)
from slurm_plugin.errors import SlurmError, SlurmRejected, SlurmUnreachable

__all__ = [
    "AccountingRecord",
    "JobControl",
    "SlurmBackend",
    "SlurmClusterConfig",
    "SlurmConfigError",
    "SlurmError",
    "SlurmRejected",
    "SlurmSiteConfig",
    "SlurmUnreachable",
    "load_slurm_config",
    "make_slurm_backends",
    "parse_slurm_config",
]


@runtime_checkable
class JobControl(Protocol):
    """What a backend that queues jobs itself (Slurm) offers beyond `Backend`: control of
    a job the gateway handed over but that the backend has not started yet."""

    def hold(self, job: Job, admin: bool = False) -> None:
        """scontrol uhold / hold."""
        ...

    def release(self, job: Job) -> None:
        """scontrol release."""
        ...

    def requeue(self, job: Job, hold: bool = False) -> None:
        """scontrol requeue / requeuehold."""
        ...

    def update_time_limit(self, job: Job, minutes: int) -> None:
        """scontrol update TimeLimit."""
        ...


def make_slurm_backends(site: SlurmSiteConfig) -> dict[str, SlurmBackend]:
    """One SlurmBackend per configured cluster, by Caldera's cluster name."""
    return {c.name: SlurmBackend(c) for c in site.clusters}
