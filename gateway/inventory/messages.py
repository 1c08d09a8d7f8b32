"""What node agents send the gateway: typed values and their JSON wire form.

An agent sends an `Inventory` when it connects and whenever the slowly-changing part of
its node changes (devices, port states, fabric neighbours), and a `Heartbeat` every report
period carrying the fast-changing figures (load, free memory, GPU memory in use). Each is
one ZeroMQ message of two frames: the kind (`b"inv"`, `b"hb"`) and the JSON body.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import orjson

__all__ = [
    "PROTOCOL_VERSION",
    "FabricLink",
    "GpuInfo",
    "Heartbeat",
    "Inventory",
    "MessageError",
    "NicInfo",
    "decode",
    "encode",
]

PROTOCOL_VERSION = 1
KIND_INVENTORY = b"inv"
KIND_HEARTBEAT = b"hb"
KIND_RESEND = b"resend"  # gateway -> agent: send your inventory again


class MessageError(ValueError):
    """A message that does not decode to a known, well-formed value."""


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """One GPU as NVML (or, without a driver, sysfs) sees it; memory in bytes."""

    index: int
    uuid: str = ""
    model: str = ""
    memory_total: int = 0
    memory_used: int = 0
    memory_free: int = 0
    pci_bus_id: str = ""  # 0000:1b:00.0 (lower case, 4-digit domain)
    numa_node: int = -1
    pci_path: tuple[str, ...] = ()  # upstream bridges, root first, then the device
    source: str = "nvml"  # nvml | sysfs


@dataclass(frozen=True, slots=True)
class NicInfo:
    """One RDMA port (InfiniBand or RoCE) from /sys/class/infiniband."""

    device: str
    port: int = 1
    state: str = "ACTIVE"  # DOWN, INIT, ARMED, ACTIVE, ACTIVE_DEFER
    phys_state: str = "LinkUp"  # Polling, Disabled, LinkUp, ...
    link_layer: str = "InfiniBand"  # or Ethernet (RoCE)
    rate_gbps: float = 0.0
    lid: int = 0
    guid: str = ""  # node GUID, 16 hex digits
    numa_node: int = -1
    netdev: str = ""  # RoCE: the Ethernet interface of the port
    pci_bus_id: str = ""
    pci_path: tuple[str, ...] = ()

    @property
    def active(self) -> bool:
        """The port is up and usable."""
        return self.state.startswith("ACTIVE")

    @property
    def hca_port(self) -> str:
        """`mlx5_0:1`, as NCCL_IB_HCA and UCX_NET_DEVICES name a port."""
        return f"{self.device}:{self.port}"


@dataclass(frozen=True, slots=True)
class FabricLink:
    """A cable from one of this node's ports to a switch port (from ibnetdiscover)."""

    device: str  # local HCA, e.g. mlx5_0 ("" when unknown)
    port: int
    guid: str  # local node GUID
    switch_guid: str
    switch_port: int
    switch_desc: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Inventory:
    """The slowly-changing description of a node."""

    node: str
    cpus: int
    memory_bytes: int
    sockets: int = 1
    cores_per_socket: int = 0
    threads_per_core: int = 1
    numa_nodes: int = 1
    gpus: tuple[GpuInfo, ...] = ()
    nics: tuple[NicInfo, ...] = ()
    gpu_nic: tuple[tuple[int, str], ...] = ()  # GPU index -> "mlx5_3:1" (nearest port)
    links: tuple[FabricLink, ...] = ()  # this node's cables
    switch_links: tuple[tuple[str, str], ...] = ()  # switch GUID pairs (fabric reporters)
    switch_names: tuple[tuple[str, str], ...] = ()  # switch GUID -> description
    agent_version: str = "1"
    boot_id: str = ""
    version: int = PROTOCOL_VERSION

    def fingerprint(self) -> str:
        """A digest of everything here; an agent resends its inventory when it changes."""
        return hashlib.sha256(orjson.dumps(asdict(self))).hexdigest()[:16]


@dataclass(frozen=True, slots=True, kw_only=True)
class Heartbeat:
    """The fast-changing figures, sent every report period."""

    node: str
    seq: int
    sent: float  # agent's wall clock
    load1: float = 0.0
    memory_available: int = 0
    gpu_memory_used: tuple[tuple[int, int], ...] = ()  # (GPU index, bytes)
    inventory: str = ""  # fingerprint of the inventory the agent last sent
    version: int = PROTOCOL_VERSION
    extra: dict[str, str] = field(default_factory=dict)


def encode(msg: Inventory | Heartbeat) -> list[bytes]:
    """The two frames of a message."""
    kind = KIND_INVENTORY if isinstance(msg, Inventory) else KIND_HEARTBEAT
    return [kind, orjson.dumps(asdict(msg))]


def _build(cls: type[Any], raw: Any, path: str) -> Any:
    if not isinstance(raw, dict):
        raise MessageError(f"{path}: expected an object")
    out: dict[str, Any] = {}
    names = {f.name: f for f in fields(cls)}
    for key, value in raw.items():
        if key not in names:
            continue  # newer agents may send more; ignore what we do not know
        out[key] = value
    try:
        return cls(**out)
    except TypeError as exc:
        raise MessageError(f"{path}: {exc}") from exc


def _tuples(value: Any, path: str) -> tuple[tuple[Any, ...], ...]:
    if not isinstance(value, list):
        raise MessageError(f"{path}: expected a list")
    return tuple(tuple(v) if isinstance(v, list) else (v,) for v in value)


def _objs(cls: type[Any], value: Any, path: str) -> tuple[Any, ...]:
    if not isinstance(value, list):
        raise MessageError(f"{path}: expected a list")
    out = []
    for item in value:
        if isinstance(item, dict) and isinstance(item.get("pci_path"), list):
            item = {**item, "pci_path": tuple(item["pci_path"])}
        out.append(_build(cls, item, path))
    return tuple(out)


def decode(kind: bytes, body: bytes) -> Inventory | Heartbeat:
    """A message from its two frames; raises MessageError when malformed."""
    try:
        raw = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise MessageError(f"not JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise MessageError("expected a JSON object")
    if kind == KIND_HEARTBEAT:
        raw["gpu_memory_used"] = _tuples(raw.get("gpu_memory_used", []), "gpu_memory_used")
        hb = _build(Heartbeat, raw, "heartbeat")
        assert isinstance(hb, Heartbeat)
        return hb
    if kind != KIND_INVENTORY:
        raise MessageError(f"unknown message kind {kind!r}")
    raw["gpus"] = _objs(GpuInfo, raw.get("gpus", []), "gpus")
    raw["nics"] = _objs(NicInfo, raw.get("nics", []), "nics")
    raw["links"] = _objs(FabricLink, raw.get("links", []), "links")
    for key in ("gpu_nic", "switch_links", "switch_names"):
        raw[key] = _tuples(raw.get(key, []), key)
    inv = _build(Inventory, raw, "inventory")
    assert isinstance(inv, Inventory)
    if not inv.node or not isinstance(inv.node, str):
        raise MessageError("inventory without a node name")
    return inv
