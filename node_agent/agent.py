"""The agent loop: connect to the gateway (ZeroMQ DEALER, CURVE client), send the inventory
on connect and whenever it changes, and a heartbeat every period.

Messages are sent without blocking; while the gateway is unreachable at most a few are
queued (high-water mark) and the rest dropped, so a dead gateway costs no memory. When the
gateway answers `resend` (it restarted, or missed the inventory) the agent sends its
inventory again at once.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import zmq

from gateway.inventory.keys import load_keypair, load_public_key
from gateway.inventory.messages import KIND_RESEND, Heartbeat, Inventory, encode
from node_agent.inventory import Collector

__all__ = ["AgentConfig", "AgentStats", "run_agent"]

log = logging.getLogger("caldera.agent")


@dataclass(frozen=True)
class AgentConfig:
    """How the agent reaches the gateway and how often it reports."""

    gateway: str  # tcp://127.0.0.1:5515
    client_secret: Path  # this node's `.key_secret`
    server_public: Path  # the gateway's `.key`
    period_s: float = 1.0
    resend_s: float = 300.0  # full inventory at least this often, changed or not


@dataclass
class AgentStats:
    """Counters (for tests and the benchmark)."""

    inventories: int = 0
    heartbeats: int = 0
    dropped: int = 0
    resend_requests: int = 0


def _send(sock: zmq.Socket[bytes], msg: Inventory | Heartbeat, stats: AgentStats) -> bool:
    try:
        sock.send_multipart(encode(msg), flags=zmq.NOBLOCK)
    except zmq.Again:
        stats.dropped += 1
        return False
    return True


def run_agent(
    config: AgentConfig,
    collector: Collector,
    stop: threading.Event | None = None,
    stats: AgentStats | None = None,
) -> AgentStats:
    """Report until `stop` is set (forever without one)."""
    stopper = stop or threading.Event()
    counters = stats or AgentStats()
    keys = load_keypair(config.client_secret)
    server = load_public_key(config.server_public)
    ctx = zmq.Context()
    sock: zmq.Socket[bytes] = ctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.sndhwm = 8
    sock.curve_secretkey = keys.secret or b""
    sock.curve_publickey = keys.public
    sock.curve_serverkey = server
    sock.connect(config.gateway)
    log.info(
        "agent %s reporting to %s every %.1f s",
        collector.config.node,
        config.gateway,
        config.period_s,
    )
    seq = 0
    fingerprint = ""
    last_full = float("-inf")
    next_at = time.monotonic()
    try:
        while not stopper.is_set():
            inv = collector.inventory()
            fp = inv.fingerprint()
            now = time.monotonic()
            due = fp != fingerprint or now - last_full >= config.resend_s
            if due and _send(sock, inv, counters):
                counters.inventories += 1
                fingerprint, last_full = fp, now
            seq += 1
            if _send(sock, collector.heartbeat(seq, fingerprint), counters):
                counters.heartbeats += 1
            next_at += config.period_s
            if next_at < time.monotonic():  # fell behind (suspended, slow sysfs): resync
                next_at = time.monotonic() + config.period_s
            while not stopper.is_set():
                timeout = next_at - time.monotonic()
                if timeout <= 0:
                    break
                if sock.poll(int(timeout * 1000) + 1, zmq.POLLIN):
                    frames = sock.recv_multipart()
                    if frames and frames[0] == KIND_RESEND:
                        counters.resend_requests += 1
                        fingerprint = ""  # the next round sends the inventory
                        next_at = time.monotonic()
                        break
    finally:
        sock.close(linger=0)
        ctx.term()
        if collector.nvml is not None:
            collector.nvml.close()
    return counters
