"""Reading every backend's description and events without blocking the event loop.

`describe()` and `poll()` are meant to answer from what a backend already holds (a watcher's
cache, an informer), but some must do IO to answer: the Slurm adapter discovers a cluster it
has not reached yet with sinfo/scontrol, the local runner reads its spool. So the gateway
asks each in a worker thread, all backends at once, and the loop keeps serving commands.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection, Iterable, Mapping

from gateway.backend.capabilities import Capabilities
from gateway.model.backend import Backend, BackendEvent
from gateway.model.cluster import ClusterState

__all__ = ["describe_all", "poll_all", "watch_all"]


async def describe_all(
    backends: Mapping[str, Backend], skip: Collection[str] = ()
) -> dict[str, ClusterState]:
    """Each backend's `describe()` by cluster name (but `skip`: described by configuration)."""
    names = [name for name in backends if name not in skip]
    states = await asyncio.gather(*(asyncio.to_thread(backends[n].describe) for n in names))
    return dict(zip(names, states, strict=True))


async def poll_all(backends: Mapping[str, Backend]) -> list[list[BackendEvent]]:
    """Each backend's `poll()`, in the backends' order (one poll of a backend at a time:
    the gateway's cycle is the only caller)."""
    return list(await asyncio.gather(*(asyncio.to_thread(b.poll) for b in backends.values())))


def watch_all(caps: Iterable[Capabilities]) -> asyncio.Event:
    """The scheduling loop's wake-up event, also set by every backend that pushes its
    changes (from its own thread: through the running loop)."""
    wake = asyncio.Event()
    loop = asyncio.get_running_loop()

    def woken() -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed first: nobody to wake
            loop.call_soon_threadsafe(wake.set)

    for each in caps:
        if each.notifies is not None:
            each.notifies.notify_changes(woken)
    return wake
