"""The gateway end of the agent transport: a CURVE-authenticated ZeroMQ ROUTER.

The gateway binds (loopback by default), agents connect with DEALER sockets. The receiver
owns its ZeroMQ context and answers that context's ZAP requests itself
(`inproc://zeromq.zap.01`): a client key found in the authorized-keys directory is accepted
and its node name becomes the connection's User-Id; any other key is refused and logged
(WARNING, with the peer address and the key). A message whose node name differs from the
key's owner is dropped and logged, so one node's key cannot report for another. Handshake
failures (e.g. an agent holding the wrong server key) are logged from the socket monitor.
A report that does not decode strictly (gateway.inventory.messages) is dropped: the node's
last good inventory stays in force. Every such warning is rate-limited per source (one line
per peer and kind per `log_window_s`, then a count), so junk on the port cannot fill a disk.

Everything runs on one thread: `start()` spawns it, `stop()` ends it; `run()` runs it in the
caller's thread until a stop event is set.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import zmq
from zmq.utils.monitor import recv_monitor_message

from gateway.inventory.keys import authorized_keys, load_keypair
from gateway.inventory.messages import (
    KIND_RESEND,
    Heartbeat,
    Inventory,
    MessageError,
    decode,
)
from gateway.inventory.registry import NodeRegistry
from gateway.logutil import RateLimitedLogger

__all__ = ["DEFAULT_BIND", "InventoryReceiver", "ReceiverConfig", "ReceiverStats"]

log = logging.getLogger("caldera.inventory")

DEFAULT_BIND = "tcp://127.0.0.1:5515"
ZAP_ENDPOINT = "inproc://zeromq.zap.01"
ZAP_VERSION = b"1.0"


@dataclass(frozen=True)
class ReceiverConfig:
    """Where to bind, the server's secret key file and the authorized agents' keys."""

    server_secret: Path
    authorized_dir: Path
    bind: str = DEFAULT_BIND
    period_s: float = 1.0
    missed: int = 3
    domain: str = "caldera"
    log_window_s: float = 60.0  # one warning per peer and kind per window


@dataclass
class ReceiverStats:
    """Counters for metrics and tests."""

    inventories: int = 0
    heartbeats: int = 0
    refused: int = 0  # ZAP refusals (unknown keys)
    handshake_failures: int = 0
    dropped: int = 0  # malformed or impersonating messages
    malformed: int = 0  # of which failed to decode
    refused_keys: deque[str] = field(default_factory=lambda: deque(maxlen=64))  # the latest


MAX_FRAME_BYTES = 16 * 2**20  # ZeroMQ disconnects a peer sending more; decode limits further

_HANDSHAKE_FAILED = (
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)


class InventoryReceiver:
    """Receives agents' inventories and heartbeats into a NodeRegistry."""

    def __init__(
        self,
        config: ReceiverConfig,
        registry: NodeRegistry | None = None,
        *,
        authorized: Mapping[bytes, str] | None = None,
    ) -> None:
        self.config = config
        self.registry = registry or NodeRegistry(config.period_s, config.missed)
        self.stats = ReceiverStats()
        self.limited = RateLimitedLogger(log, config.log_window_s)
        self._keys = load_keypair(config.server_secret)
        self._authorized: dict[bytes, str] = dict(
            authorized if authorized is not None else authorized_keys(config.authorized_dir)
        )
        self._ctx = zmq.Context()
        self._zap = self._ctx.socket(zmq.REP)
        self._zap.linger = 0
        self._zap.bind(ZAP_ENDPOINT)
        self._sock = self._ctx.socket(zmq.ROUTER)
        self._sock.linger = 0
        self._sock.maxmsgsize = MAX_FRAME_BYTES
        self._sock.curve_server = True
        self._sock.curve_secretkey = self._keys.secret or b""
        self._sock.curve_publickey = self._keys.public
        self._sock.zap_domain = config.domain.encode()
        self._monitor = self._sock.get_monitor_socket(_HANDSHAKE_FAILED)
        self._sock.bind(config.bind)
        self.endpoint: str = self._sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False

    @property
    def server_public_key(self) -> bytes:
        """The key agents must be given (z85)."""
        return self._keys.public

    def reload_keys(self) -> int:
        """Re-read the authorized-keys directory (new or removed agents); returns the count.
        Connections already authenticated stay until they reconnect."""
        keys = authorized_keys(self.config.authorized_dir)
        with self._lock:
            self._authorized = keys
        return len(keys)

    # --- ZAP ----------------------------------------------------------------------------

    def _handle_zap(self) -> None:
        frames = self._zap.recv_multipart()
        if len(frames) < 6:
            log.error("malformed ZAP request (%d frames)", len(frames))
            self._zap.send_multipart(
                [ZAP_VERSION, frames[1] if len(frames) > 1 else b"", b"400", b"Malformed", b"", b""]
            )
            return
        version, request_id, domain, address, _identity, mechanism = frames[:6]
        credentials = frames[6:]
        peer = address.decode(errors="replace")
        user = ""
        if version == ZAP_VERSION and mechanism == b"CURVE" and len(credentials) == 1:
            key = zmq.utils.z85.encode(credentials[0])
            with self._lock:
                user = self._authorized.get(key, "")
            if user:
                log.debug("agent %s at %s authenticated", user, peer)
                self._zap.send_multipart(
                    [ZAP_VERSION, request_id, b"200", b"OK", user.encode(), b""]
                )
                return
            reason = f"unknown CURVE key {key.decode()}"
            self.stats.refused_keys.append(key.decode())
        else:
            reason = f"mechanism {mechanism.decode(errors='replace')} not allowed"
        self.stats.refused += 1
        self.limited.log(
            logging.WARNING,
            peer,
            "refused connection",
            "refused agent connection from %s (domain %s): %s",
            peer,
            domain.decode(errors="replace"),
            reason,
        )
        self._zap.send_multipart([ZAP_VERSION, request_id, b"400", b"Unknown key", b"", b""])

    def _handle_monitor(self) -> None:
        event = recv_monitor_message(self._monitor)
        if event["event"] & _HANDSHAKE_FAILED:
            self.stats.handshake_failures += 1
            endpoint = event["endpoint"]
            where = endpoint.decode(errors="replace") if isinstance(endpoint, bytes) else endpoint
            what = (
                "client refused by authentication"
                if event["event"] == zmq.EVENT_HANDSHAKE_FAILED_AUTH
                else "wrong server key, or not a CURVE client"
            )
            self.limited.log(
                logging.WARNING,
                where,
                f"handshake failed: {what}",
                "agent handshake failed on %s: %s (errno %s)",
                where,
                what,
                event["value"],
            )

    # --- messages -------------------------------------------------------------------------

    def _handle_message(self) -> None:
        frames = self._sock.recv_multipart(copy=False)
        user = str(frames[-1].get("User-Id"))
        if len(frames) != 3:
            self.stats.dropped += 1
            self.stats.malformed += 1
            self.limited.log(
                logging.WARNING,
                user,
                "frames",
                "dropped a message of %d frames from agent %s (expected 2)",
                len(frames) - 1,
                user,
            )
            return
        ident, kind, body = frames
        try:
            msg = decode(kind.bytes, body.bytes)
        except MessageError as exc:
            self.stats.dropped += 1
            self.stats.malformed += 1
            self.limited.log(
                logging.WARNING,
                user,
                "malformed",
                "dropped a malformed report from agent %s (its last good inventory stays): %s",
                user,
                exc,
            )
            return
        if msg.node != user:
            self.stats.dropped += 1
            self.limited.log(
                logging.WARNING,
                user,
                "impersonation",
                "dropped a report for node %s sent with %s's key",
                msg.node,
                user,
            )
            return
        if isinstance(msg, Inventory):
            self.stats.inventories += 1
            self.registry.report_inventory(msg)
        elif isinstance(msg, Heartbeat):
            self.stats.heartbeats += 1
            if not self.registry.report_heartbeat(msg):
                self._sock.send_multipart([ident.bytes, KIND_RESEND], flags=zmq.NOBLOCK)

    # --- loop -------------------------------------------------------------------------------

    def run(self, stop: threading.Event | None = None) -> None:
        """Serve until `stop` (or `self.stop()`) is set."""
        stopper = stop or self._stop
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        poller.register(self._zap, zmq.POLLIN)
        poller.register(self._monitor, zmq.POLLIN)
        tick_ms = max(int(self.registry.period_s * 250), 10)
        log.info("receiving agent reports on %s", self.endpoint)
        try:
            while not stopper.is_set() and not self._stop.is_set():
                events = dict(poller.poll(tick_ms))
                if self._zap in events:
                    self._handle_zap()
                if self._monitor in events:
                    self._handle_monitor()
                if self._sock in events:
                    for _ in range(1000):  # drain, but keep ZAP and down checks going
                        try:
                            self._handle_message()
                        except zmq.Again:
                            break
                        if not self._sock.poll(0):
                            break
                self.registry.check()
                self.limited.flush()
        finally:
            self._close()

    def start(self) -> None:
        """Serve on a background thread."""
        self._thread = threading.Thread(target=self.run, name="caldera-inventory", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving and close the sockets."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        else:
            self._close()

    def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._sock.disable_monitor()
        for sock in (self._monitor, self._sock, self._zap):
            sock.close(linger=0)
        self._ctx.term()
