"""Volcano HyperNode objects (`topology.volcano.sh/v1alpha1`) for a topology.

Volcano (>= 1.12) describes the network as a tree of cluster-scoped HyperNodes: tier 1
holds nodes (a leaf switch or a block), each higher tier holds HyperNodes. Caldera writes one
HyperNode per switch (per block and aggregate block), children under their first parent;
a switch with nothing under it is left out (Volcano requires members). Names are made valid
DNS subdomains; node members use `exactMatch`, or an anchored `regexMatch` for a node name
that is not a valid Kubernetes name.

The shape follows the newest Volcano API the module proxy serves (volcano.sh/apis v1.13.0,
`pkg/apis/topology/v1alpha1/hypernode_types.go`); `validate_hypernode` checks what that
type's CRD schema checks.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from gateway.model.topology import Topology

__all__ = [
    "API_VERSION",
    "GROUP",
    "KIND",
    "PLURAL",
    "VERSION",
    "hypernode_name",
    "to_hypernodes",
    "validate_hypernode",
]

GROUP = "topology.volcano.sh"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "HyperNode"
PLURAL = "hypernodes"
MANAGED_BY = {"app.kubernetes.io/managed-by": "caldera"}

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*$")


def _valid_name(name: str) -> bool:
    return len(name) <= 253 and bool(_DNS_SUBDOMAIN.match(name))


def hypernode_name(switch: str, prefix: str = "") -> str:
    """A DNS-subdomain name for a switch: lower case, other characters as `-`, and a short
    digest appended when that changed the name (so `IBN` and `ibn` stay distinct)."""
    raw = f"{prefix}{switch}"
    if _valid_name(raw):
        return raw
    clean = re.sub(r"[^a-z0-9.-]+", "-", raw.lower()).strip("-.") or "switch"
    clean = re.sub(r"\.{2,}", ".", clean)
    digest = hashlib.sha256(raw.encode()).hexdigest()[:6]
    return f"{clean[:240].strip('-.')}-{digest}"


def _node_member(node: str) -> dict[str, Any]:
    if _valid_name(node):
        return {"type": "Node", "selector": {"exactMatch": {"name": node}}}
    return {"type": "Node", "selector": {"regexMatch": {"pattern": f"^{re.escape(node)}$"}}}


def to_hypernodes(
    topo: Topology, *, prefix: str = "", labels: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """HyperNode objects (plain dicts, ready for the API server), lowest tier first."""
    names = {s: hypernode_name(s, prefix) for s in (*topo.groups, *topo.uppers())}
    first_parent: dict[str, str] = {}
    for s in names:
        ups = topo.parents(s)
        if ups:
            first_parent[s] = ups[0]
    kids: dict[str, list[str]] = {}
    for child, parent in first_parent.items():
        kids.setdefault(parent, []).append(child)
    out: list[dict[str, Any]] = []
    meta_labels = {**MANAGED_BY, **(labels or {})}
    for s in (*topo.groups, *topo.uppers()):
        if topo.level(s) == 0:
            members = [_node_member(n) for n in topo.nodes_in(s)]
        else:
            members = [
                {"type": "HyperNode", "selector": {"exactMatch": {"name": names[c]}}}
                for c in kids.get(s, [])
            ]
        if not members:
            continue
        out.append(
            {
                "apiVersion": API_VERSION,
                "kind": KIND,
                "metadata": {
                    "name": names[s],
                    "labels": dict(meta_labels),
                    "annotations": {"topology.caldera.io/switch": s},
                },
                "spec": {"tier": topo.level(s) + 1, "members": members},
            }
        )
    out.sort(key=lambda o: (o["spec"]["tier"], o["metadata"]["name"]))
    return out


def validate_hypernode(obj: dict[str, Any]) -> list[str]:
    """What the HyperNode CRD (and the API server's name rules) would reject."""
    errors: list[str] = []
    if obj.get("apiVersion") != API_VERSION or obj.get("kind") != KIND:
        errors.append("apiVersion/kind must be topology.volcano.sh/v1alpha1 HyperNode")
    name = obj.get("metadata", {}).get("name", "")
    if not isinstance(name, str) or not _valid_name(name):
        errors.append(f"metadata.name {name!r} is not a DNS subdomain")
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [*errors, "spec is required"]
    tier = spec.get("tier")
    if not isinstance(tier, int) or isinstance(tier, bool) or tier < 0:
        errors.append("spec.tier must be a non-negative integer")
    members = spec.get("members")
    if not isinstance(members, list) or not members:
        errors.append("spec.members must be a non-empty list")
        return errors
    for i, m in enumerate(members):
        where = f"spec.members[{i}]"
        if m.get("type") not in ("Node", "HyperNode"):
            errors.append(f"{where}.type must be Node or HyperNode")
        sel = m.get("selector", {})
        chosen = [k for k in ("exactMatch", "regexMatch", "labelMatch") if k in sel]
        if len(chosen) != 1:
            errors.append(f"{where}.selector needs exactly one of exactMatch/regexMatch/labelMatch")
            continue
        if chosen[0] == "exactMatch" and not sel["exactMatch"].get("name"):
            errors.append(f"{where}.selector.exactMatch.name is required")
        if chosen[0] == "regexMatch" and not sel["regexMatch"].get("pattern"):
            errors.append(f"{where}.selector.regexMatch.pattern is required")
        if m.get("type") == "HyperNode" and chosen[0] == "labelMatch":
            errors.append(f"{where}: labelMatch applies to Node members only")
    return errors
