"""Every scheduler plugin Caldera ships, by the name `plugins = [...]` in caldera.toml uses,
and the list a gateway runs when the configuration names none.

The default adds topology awareness to Slurm's own order and checks: `rdma` and
`gpu-memory` filter nodes (`-C ib`, `#CALDERA --gpu-memory`), `fabric` steers MPI jobs to
RDMA nodes and single-node jobs away from them, and `topology` places a gang on the fewest
leaf switches (it declines where nodes report no switch, leaving the plain placement).
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.scheduler import builtin, topology_plugin

__all__ = ["DEFAULT_PLUGINS", "FACTORIES"]

FACTORIES: dict[str, Callable[[], object]] = {**builtin.FACTORIES, **topology_plugin.FACTORIES}

DEFAULT_PLUGINS = (*builtin.DEFAULT_PLUGINS, "rdma", "gpu-memory", "fabric", "topology")
