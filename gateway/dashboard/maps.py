"""The fair-share tree and the topology map as the dashboard draws them (pure: no IO).

The fair-share tree is sshare's (gateway/policy/shares.py): every association in sshare's
order with its depth, so the page indents it without rebuilding the tree, and with the
cells sshare prints for it. The topology map
groups each cluster's nodes by their leaf switch (`Node.switch`, from topology.conf, node
labels or agent discovery) and names the switches above a leaf where a topology knows them
(the node agents' fabric reports), with what is allocated on each node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gateway.dashboard.views import NodeUse
from gateway.model.cluster import ClusterState
from gateway.model.topology import Topology
from gateway.policy.printfields import Mode
from gateway.policy.priority import PriorityConfig
from gateway.policy.shares import ShareRow, SshareOptions, render_sshare

__all__ = ["NO_SWITCH", "share_tree", "topology_map"]

NO_SWITCH = "(no switch)"


_SSHARE_FIELDS = ("RawShares", "NormShares", "RawUsage", "EffectvUsage", "FairShare")


def share_tree(rows: Sequence[ShareRow], cfg: PriorityConfig, cluster: str) -> list[dict[str, Any]]:
    """sshare's rows (`sshare -a`, every association in its order) with their depth: the
    values are sshare's own cells, so the page shows what the command prints ("" where it
    prints nothing)."""
    opts = SshareOptions(all_users=True, header=False, mode=Mode.PARSABLE2, fields=_SSHARE_FIELDS)
    text = render_sshare(rows, opts, cfg, cluster, "", ())
    lines = text.splitlines()
    if len(lines) != len(rows):
        raise ValueError(f"sshare printed {len(lines)} rows for {len(rows)} associations")
    out: list[dict[str, Any]] = []
    for r, line in zip(rows, lines, strict=True):
        cells = dict(zip(_SSHARE_FIELDS, line.split("|"), strict=True))
        out.append(
            {
                "account": r.node.account,
                "user": r.node.user,
                "depth": r.depth,
                "parent": r.parent,
                "shares": cells["RawShares"],
                "norm_shares": cells["NormShares"],
                "raw_usage": cells["RawUsage"],
                "effectv_usage": cells["EffectvUsage"],
                "fairshare": cells["FairShare"],
            }
        )
    return out


def _share(used: int, total: int) -> float:
    return round(used / total, 4) if total > 0 else 0.0


def _above(fabric: Topology, leaf: str) -> tuple[str, ...]:
    """The switches above a leaf up to a root (first parent at each step)."""
    out: list[str] = []
    ups = fabric.parents(leaf)
    while ups and ups[0] not in out and ups[0] != leaf:
        out.append(ups[0])
        ups = fabric.parents(ups[0])
    return tuple(out)


def topology_map(
    clusters: Iterable[ClusterState],
    use: Mapping[str, NodeUse],
    fabric: Topology | None = None,
) -> list[dict[str, Any]]:
    """Clusters -> leaf switches (with the switches above them) -> nodes, each node with its
    state and the share of its CPUs and GPUs allocated."""
    out: list[dict[str, Any]] = []
    for cluster in clusters:
        leaves: dict[str, list[dict[str, Any]]] = {}
        for node in cluster.nodes:
            u = use.get(node.name)
            gpus = node.gpu_count()
            cpus_alloc = u.alloc_cpus if u else 0
            gpus_alloc = u.alloc_gpus if u else 0
            leaves.setdefault(node.switch or NO_SWITCH, []).append(
                {
                    "name": node.name,
                    "state": (u.state if u else node.state).long.upper(),
                    "cpus": node.cpus,
                    "alloc_cpus": cpus_alloc,
                    "gpus": gpus,
                    "alloc_gpus": gpus_alloc,
                    "nics": len(node.nics),
                    "jobs": u.jobs if u else 0,
                    "share": _share(cpus_alloc + gpus_alloc, node.cpus + gpus),
                }
            )
        switches = []
        for leaf in sorted(leaves):
            above: tuple[str, ...] = ()
            if fabric is not None and leaf != NO_SWITCH:
                above = _above(fabric, leaf)
            nodes = leaves[leaf]
            switches.append(
                {
                    "name": leaf,
                    "above": list(above),
                    "nodes": nodes,
                    "share": _share(
                        sum(n["alloc_cpus"] + n["alloc_gpus"] for n in nodes),
                        sum(n["cpus"] + n["gpus"] for n in nodes),
                    ),
                }
            )
        out.append({"name": cluster.name, "reachable": cluster.reachable, "switches": switches})
    return out
