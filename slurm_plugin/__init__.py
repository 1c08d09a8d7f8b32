"""Everything that talks to or extends a real Slurm cluster.

    from slurm_plugin import load_slurm_config, make_slurm_backends
    backends = make_slurm_backends(load_slurm_config("/etc/caldera/slurm.toml"))

See slurm_plugin/README.md for the design (transports, tags, reconciliation, containers)
and slurm_plugin/clusters.example.toml for the configuration file.
"""

from __future__ import annotations

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


def make_slurm_backends(site: SlurmSiteConfig) -> dict[str, SlurmBackend]:
    """One SlurmBackend per configured cluster, by Caldera's cluster name."""
    return {c.name: SlurmBackend(c) for c in site.clusters}
