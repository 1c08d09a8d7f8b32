"""Node administration as a control operation (`scontrol update NodeName=... State=DRAIN`):
the drain is made durable, then current in the gateway, then the scheduler is woken; the
API only checks the request and calls these."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gateway.store.node_admin import NodeAdmin

if TYPE_CHECKING:
    from gateway.control.gateway import Gateway

__all__ = ["drain_nodes", "resume_nodes"]


async def drain_nodes(gw: Gateway, drains: Sequence[NodeAdmin]) -> None:
    """Drain nodes (their running jobs go on; nothing new starts there)."""
    await asyncio.to_thread(gw.store.set_node_admin, list(drains), [])
    gw.drained.update({a.node: a for a in drains})
    gw.wake()


async def resume_nodes(gw: Gateway, names: Sequence[str]) -> None:
    """Lift the drain of nodes."""
    await asyncio.to_thread(gw.store.set_node_admin, [], list(names))
    for name in names:
        gw.drained.pop(name, None)
    gw.wake()
