"""Node routes: the nodes' current state (sinfo, scontrol show node) and operators'
drain/resume (`scontrol update NodeName=... State=DRAIN|RESUME`).

A drain is stored before it is answered (it survives a restart, as slurmctld's node state
file does); the scheduler skips drained nodes from the next cycle on, and jobs already
running there go on (the node shows DRAINING until they end, then DRAINED).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import Annotated, Any

import psutil
from fastapi import APIRouter, HTTPException, Request
from pydantic import BaseModel, Field

from gateway.compat.hostlist import expand
from gateway.compat.options_help import SLURM_COMPAT_VERSION
from gateway.compat.show_topo import topology_records
from gateway.control.gateway import Gateway
from gateway.control.node_admin_ops import drain_nodes, resume_nodes
from gateway.control.submit import Caller
from gateway.model.cluster import NodeState
from gateway.model.codec import node_to_dict, partition_to_dict
from gateway.scheduler.snapshot import NodeFree
from gateway.store.node_admin import NodeAdmin, drain_overlay

__all__ = ["NodeUpdateBody", "node_router"]

NodeText = Annotated[str, Field(min_length=1, max_length=65536)]


class NodeUpdateBody(BaseModel):
    """scontrol update NodeName=<hostlist> State=DRAIN|UNDRAIN|RESUME [Reason=...]."""

    nodes: NodeText
    state: str = Field(min_length=1, max_length=64)
    reason: str | None = Field(default=None, max_length=4096)


def _fail(code: int, message: str) -> HTTPException:
    return HTTPException(400, {"code": code, "message": message})


def node_states(gw: Gateway, free: Mapping[str, NodeFree] | None = None) -> dict[str, NodeState]:
    """Each node's state as sinfo shows it: drained ones with jobs still on them DRAINING
    (`free`: gw.free_resources(), when the caller has it already)."""
    out: dict[str, NodeState] = {}
    for name, f in (gw.free_resources() if free is None else free).items():
        state = f.node.state
        if state is NodeState.DRAINED and f.jobs:
            out[name] = NodeState.DRAINING
        elif state in (NodeState.DOWN, NodeState.DRAINED, NodeState.DRAINING):
            out[name] = state
        elif f.jobs == 0:
            out[name] = NodeState.IDLE
        elif f.cpus <= 0 or f.exclusive_jobs:
            out[name] = NodeState.ALLOCATED
        else:
            out[name] = NodeState.MIXED
    return out


async def update_nodes(gw: Gateway, caller: Caller, body: NodeUpdateBody) -> dict[str, Any]:
    """Drain or resume nodes, with slurmctld's refusals (`update_node` in node_mgr.c)."""
    if not caller.operator:  # slurmctld: ESLURM_USER_ID_MISSING for a non-SlurmUser/root
        raise HTTPException(403, {"code": 2003, "message": "Invalid user id"})
    known = {n.name for c in gw.clusters.values() for n in c.nodes}
    names = expand(body.nodes)
    if not names or any(n not in known for n in names):
        raise _fail(2008, "Invalid node name specified")
    state = body.state.upper()
    now = time.time()
    if state == "DRAIN":
        if not body.reason:
            raise _fail(2030, "You must specify a reason when DOWNING or DRAINING a node")
        drain = [NodeAdmin(n, body.reason, caller.uid, caller.user, now) for n in names]
        await drain_nodes(gw, drain)
    elif state in ("RESUME", "UNDRAIN"):
        if state == "RESUME" and any(n not in gw.drained for n in names):
            raise _fail(2014, "Invalid node state specified")
        await resume_nodes(gw, names)
    else:
        raise _fail(2014, "Invalid node state specified")
    return {"nodes": names, "state": state}


def machine_load() -> int:
    """This machine's 1-minute load average x100: what a slurmd here reports as its node's
    CPULoad (sinfo %O), so what the local site's virtual nodes report."""
    return int(os.getloadavg()[0] * 100)


@functools.cache
def _fixed_facts() -> dict[str, Any]:
    """The facts below that do not change while the gateway runs (read once)."""
    u = os.uname()
    return {
        "arch": u.machine,
        "os": f"{u.sysname} {u.release} {u.version}",
        "boot_time": psutil.boot_time(),
        "slurmd_start_time": psutil.Process().create_time(),
        "version": SLURM_COMPAT_VERSION,
    }


def machine_facts() -> dict[str, Any]:
    """What a slurmd on this machine reports of it, so what the local site's virtual nodes
    report: Arch, OS (uname), FreeMem (sysinfo's free RAM, MiB), BootTime, Version, and
    SlurmdStartTime (the gateway's start)."""
    return {**_fixed_facts(), "free_memory": psutil.virtual_memory().free // (1024 * 1024)}


def node_router(
    gw: Gateway,
    caller_of: Callable[[Request, Gateway], Caller],
    site_of: Callable[[Gateway], Mapping[str, Any]],
) -> APIRouter:
    """The node routes over a running gateway (`caller_of`, `site_of`: the app's)."""
    router = APIRouter()

    @router.get("/v1/nodes")
    async def nodes(request: Request) -> dict[str, Any]:
        """Nodes with their current state, and partitions (sinfo, scontrol show node)."""
        caller_of(request, gw)
        states = node_states(gw)
        free = gw.free_resources()
        load = machine_load()
        facts = machine_facts()
        out_nodes = []
        for cluster in drain_overlay(gw.clusters, gw.drained).values():
            for node in cluster.nodes:
                d = node_to_dict(node)
                d["state"] = states.get(node.name, node.state).long
                f = free.get(node.name)
                d["alloc_cpus"] = node.cpus - f.cpus if f is not None else 0
                d["alloc_memory_mb"] = node.memory_mb - f.memory_mb if f is not None else 0
                d["alloc_gpus"] = len(node.gpus) - len(f.gpus) if f is not None else 0
                held = {g.index for g in node.gpus} - f.gpus if f is not None else set()
                d["alloc_gpu_ids"] = sorted(held)
                d["cluster"] = cluster.name
                admin = gw.drained.get(node.name)
                never_up = node.state is NodeState.DOWN and admin is None  # slurm.conf's DOWN
                if cluster.name == gw.config.cluster_name and not never_up:
                    d["cpu_load"] = load  # virtual nodes of this machine, as their slurmd
                    d.update(facts)
                if admin is not None:
                    d["reason_time"] = admin.time
                    d["reason_user"] = admin.user
                    d["reason_uid"] = admin.uid
                out_nodes.append(d)
        site = site_of(gw)
        # one default partition, as in Slurm: the first cluster's (the local site's); a
        # partition several clusters offer is one partition over all their nodes
        parts: dict[str, dict[str, Any]] = {}
        for c in gw.clusters.values():
            for p in c.partitions:
                seen = parts.get(p.name)
                if seen is not None:
                    seen["nodes"] = [*seen["nodes"], *p.nodes]
                    continue
                parts[p.name] = {
                    **partition_to_dict(p),
                    "default": p.name == site["default_partition"],
                }
        listed = list(parts.values())
        return {"now": time.time(), "site": site, "nodes": out_nodes, "partitions": listed}

    @router.get("/v1/topology")
    async def topology(request: Request) -> dict[str, Any]:
        """The local site's switch records (scontrol show topology)."""
        caller_of(request, gw)
        return {"switches": [asdict(r) for r in topology_records(gw.config.topology)]}

    @router.post("/v1/nodes/update")
    async def update(request: Request, body: NodeUpdateBody) -> dict[str, Any]:
        """scontrol update NodeName=... State=DRAIN|UNDRAIN|RESUME Reason=..."""
        return await update_nodes(gw, caller_of(request, gw), body)

    return router
