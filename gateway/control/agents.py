"""Node agents as the gateway sees them: the CURVE-authenticated receiver, keys in the
gateway's home, and what node events mean for jobs (a node that stops reporting is DOWN and
its jobs are requeued, or ended NODE_FAIL, as whole gangs).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from gateway.control.config import GatewayConfig
from gateway.control.gateway import Gateway
from gateway.inventory.convert import merge_inventory
from gateway.inventory.keys import generate_keypair
from gateway.inventory.receiver import InventoryReceiver, ReceiverConfig
from gateway.inventory.registry import EventKind, NodeEvent, NodeRegistry
from gateway.logutil import RateLimitedLogger
from gateway.model.cluster import NodeState
from gateway.model.state import JobState, Reason

__all__ = ["AgentHub", "keys_dir"]

log = logging.getLogger("caldera.agents")
_merge_log = RateLimitedLogger(log)


def keys_dir(config: GatewayConfig) -> Path:
    """`$CALDERA_HOME/keys`: the gateway's key pair and `agents/<node>.key` public keys."""
    return config.home / "keys"


class AgentHub:
    """Runs the receiver and applies node events to the gateway (on its event loop)."""

    def __init__(self, config: GatewayConfig, gw: Gateway) -> None:
        self.config = config
        self.gw = gw
        directory = keys_dir(config)
        (directory / "agents").mkdir(parents=True, exist_ok=True)
        directory.chmod(0o700)
        secret = directory / "gateway.key_secret"
        if not secret.exists():
            generate_keypair(directory, "gateway")
        self.registry = NodeRegistry(config.agent_period_s, config.agent_missed)
        self.receiver = InventoryReceiver(
            ReceiverConfig(
                server_secret=secret,
                authorized_dir=directory / "agents",
                bind=config.agent_bind,
                period_s=config.agent_period_s,
                missed=config.agent_missed,
            ),
            self.registry,
        )
        (config.home / "agents.endpoint").write_text(self.receiver.endpoint + "\n")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reload: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start receiving; node events are handled on the running loop."""
        self._loop = asyncio.get_running_loop()
        self.registry.subscribe(self._from_thread)
        self.receiver.start()
        self._reload = asyncio.create_task(self._reload_keys(), name="caldera-agent-keys")

    async def _reload_keys(self) -> None:
        """Pick up agents authorized since (`caldera agent-key`), every few seconds."""
        while True:
            await asyncio.sleep(3.0)
            try:
                await asyncio.to_thread(self.receiver.reload_keys)
            except OSError as exc:
                log.warning("cannot read the authorized agent keys: %s", exc)

    def stop(self) -> None:
        """Stop receiving."""
        if self._reload is not None:
            self._reload.cancel()
        self.receiver.stop()

    def _from_thread(self, event: NodeEvent) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            run: Callable[[], object] = lambda: asyncio.ensure_future(self.handle(event))  # noqa: E731
            loop.call_soon_threadsafe(run)

    async def handle(self, event: NodeEvent) -> None:
        """Apply one node event: inventory merged in, DOWN fails over the node's gangs."""
        gw = self.gw
        for name, cluster in list(gw.clusters.items()):
            nodes = list(cluster.nodes)
            for i, node in enumerate(nodes):
                if node.name != event.node:
                    continue
                rec = self.registry.record(node.name)
                if event.kind is EventKind.DOWN:
                    nodes[i] = replace(node, state=NodeState.DOWN, reason="Not responding")
                elif event.kind is EventKind.UP:
                    node = nodes[i] = replace(node, state=NodeState.IDLE, reason=None)
                if event.kind is not EventKind.DOWN and rec is not None and rec.inventory:
                    try:  # the receiver decodes strictly; this is the second line of defence
                        nodes[i] = merge_inventory(node, rec.inventory, rec.heartbeat)
                    except (TypeError, ValueError) as exc:
                        _merge_log.log(
                            logging.ERROR,
                            node.name,
                            "merge",
                            "inventory of node %s not merged: %s",
                            node.name,
                            exc,
                        )
                gw.clusters[name] = replace(cluster, nodes=tuple(nodes))
        if event.kind is EventKind.DOWN:
            await self._fail_over(event.node)
        gw.wake()

    async def _fail_over(self, node: str) -> None:
        gw = self.gw
        victims = [j for j in gw.jobs.values() if j.state.is_active and node in j.nodes]
        changed = []
        ending: list[tuple[int, int]] = []
        for job in victims:
            backend = gw.backend_for(job)
            ends = gw.capabilities(job).ends_attempts
            try:
                if ends is not None:
                    ending.append(gw.ending_run(job))
                    # every process of the run, confirmed gone (the local runner); a run not
                    # confirmed keeps the next one waiting in the backend (Cleaning)
                    await asyncio.to_thread(ends.end_attempt, job)
                elif backend is not None:
                    backend.cancel(job, 9, False)  # the rest of the gang goes too
            except Exception as exc:  # noqa: BLE001 - the node is gone anyway
                log.warning("ending job %s on down node %s: %s", job.job_id, node, exc)
            requeue = gw.config.job_requeue if job.spec.requeue is None else job.spec.requeue
            if requeue:
                changed.append(gw.requeued(job))
            else:
                changed.append(gw.ended(job, JobState.NODE_FAIL, 0, Reason.NODE_DOWN))
            log.warning(
                "node %s down: job %s %s", node, job.job_id, "requeued" if requeue else "failed"
            )
        try:
            await gw.commit(changed, "node-down", node=node)
        finally:
            gw.ended_runs(ending)
