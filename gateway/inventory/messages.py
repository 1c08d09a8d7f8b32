"""What node agents send the gateway: typed values and their JSON wire form.

An agent sends an `Inventory` when it connects and whenever the slowly-changing part of
its node changes (devices, port states, fabric neighbours), and a `Heartbeat` every report
period carrying the fast-changing figures (load, free memory, GPU memory in use). Each is
one ZeroMQ message of two frames: the kind (`b"inv"`, `b"hb"`) and the JSON body.

`decode` is strict: the typed values come out only when every field has its type, range
and length; otherwise a `MessageError` names the field and what was there.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any, TypeVar

import orjson

__all__ = [
    "MAX_INVENTORY_BYTES",
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
    """A message that does not decode to a known, well-formed value: `path` is the field
    (`inventory.gpus[0].index`), `problem` what is wrong, `value` the offending value
    (shortened, safe to log)."""

    def __init__(self, path: str, problem: str, value: object = MISSING) -> None:
        self.path = path[:120]
        self.problem = problem
        self.value = "" if value is MISSING else _show(value)
        super().__init__(f"{self.path}: {problem}" + (f", got {self.value}" if self.value else ""))


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


# --- the strict decoder ------------------------------------------------------------------
#
# Agents are remote and only authenticated, not trusted: every field is checked for its
# type (an int is an int, not a bool, a str or a float), its range and its length before a
# typed value is built, so nothing malformed reaches the registry or the scheduler.

MAX_INVENTORY_BYTES = 4 * 2**20
MAX_HEARTBEAT_BYTES = 64 * 2**10
MAX_GPUS = 1024
_MAX_MEMORY = 2**52  # 4 PiB of node memory
_MAX_GPU_MEMORY = 2**46  # 64 TiB on one GPU
_MAX_FABRIC = 2**16  # switch links or names one reporter may send

_NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")  # becomes a node name
_IDENT = re.compile(r"[A-Za-z0-9._:/+-]{0,128}")  # devices, bus ids, GUIDs, states
_TEXT = re.compile(r"[^\x00-\x1f\x7f-\x9f\u2028\u2029]{0,256}")  # printable, one line

T = TypeVar("T")
Reader = Callable[[object, str], T]


def _show(value: object) -> str:
    """A short, safe rendering of an offending value for the log."""
    if isinstance(value, str):
        return repr(value[:40]) + (f"... ({len(value)} chars)" if len(value) > 40 else "")
    if isinstance(value, list):
        return f"a list of {len(value)}"
    if isinstance(value, dict):
        return f"an object of {len(value)} keys"
    return repr(value)[:60]


def _int(lo: int, hi: int) -> Reader[int]:
    def read(value: object, path: str) -> int:
        if type(value) is not int:
            raise MessageError(path, "expected an integer", value)
        if not lo <= value <= hi:
            raise MessageError(path, f"out of range {lo}..{hi}", value)
        return value

    return read


def _float(lo: float, hi: float) -> Reader[float]:
    def read(value: object, path: str) -> float:
        if type(value) is not float and type(value) is not int:
            raise MessageError(path, "expected a number", value)
        if not (math.isfinite(value) and lo <= value <= hi):
            raise MessageError(path, f"out of range {lo:g}..{hi:g}", value)
        return float(value)

    return read


def _str(pattern: re.Pattern[str]) -> Reader[str]:
    def read(value: object, path: str) -> str:
        if type(value) is not str:
            raise MessageError(path, "expected a string", value)
        if not pattern.fullmatch(value):
            raise MessageError(path, "bad characters or too long", value)
        return value

    return read


def _list(item: Reader[T], limit: int) -> Reader[tuple[T, ...]]:
    def read(value: object, path: str) -> tuple[T, ...]:
        if type(value) is not list:
            raise MessageError(path, "expected a list", value)
        if len(value) > limit:
            raise MessageError(path, f"more than {limit} items", value)
        return tuple(item(v, f"{path}[{i}]") for i, v in enumerate(value))

    return read


def _pair(first: Reader[T], second: Reader[Any]) -> Reader[tuple[T, Any]]:
    def read(value: object, path: str) -> tuple[T, Any]:
        if type(value) is not list or len(value) != 2:
            raise MessageError(path, "expected a pair [a, b]", value)
        return first(value[0], f"{path}[0]"), second(value[1], f"{path}[1]")

    return read


def _map(key: Reader[str], val: Reader[str], limit: int) -> Reader[dict[str, str]]:
    def read(value: object, path: str) -> dict[str, str]:
        if type(value) is not dict:
            raise MessageError(path, "expected an object", value)
        if len(value) > limit:
            raise MessageError(path, f"more than {limit} entries", value)
        return {key(k, path): val(v, f"{path}.{k}") for k, v in value.items()}

    return read


def _obj(cls: type[T], spec: dict[str, Reader[Any]]) -> Reader[T]:
    """Builds `cls` from a JSON object: every field read by its reader, fields without a
    default required, unknown keys ignored (newer agents may send more)."""
    known = {f.name: f for f in fields(cls)}  # type: ignore[arg-type]
    if set(spec) != set(known):
        raise TypeError(f"{cls.__name__}: readers for {sorted(spec)} != fields {sorted(known)}")
    required = {
        n for n, f in known.items() if f.default is MISSING and f.default_factory is MISSING
    }

    def read(value: object, path: str) -> T:
        if type(value) is not dict:
            raise MessageError(path, "expected an object", value)
        args: dict[str, Any] = {}
        for name, reader in spec.items():
            if name in value:
                args[name] = reader(value[name], f"{path}.{name}")
            elif name in required:
                raise MessageError(f"{path}.{name}", "required field missing")
        return cls(**args)

    return read


_COUNT = _int(0, 2**16)
_NUMA = _int(-1, 4095)
_GPU_INDEX = _int(0, MAX_GPUS - 1)
_GPU_MEMORY = _int(0, _MAX_GPU_MEMORY)
_IDS = _str(_IDENT)
_PCI_PATH = _list(_IDS, 32)
_VERSION = _int(1, 2**16)

_read_gpu = _obj(
    GpuInfo,
    {
        "index": _GPU_INDEX,
        "uuid": _IDS,
        "model": _str(_TEXT),
        "memory_total": _GPU_MEMORY,
        "memory_used": _GPU_MEMORY,
        "memory_free": _GPU_MEMORY,
        "pci_bus_id": _IDS,
        "numa_node": _NUMA,
        "pci_path": _PCI_PATH,
        "source": _IDS,
    },
)
_read_nic = _obj(
    NicInfo,
    {
        "device": _str(_NODE),
        "port": _int(0, 255),
        "state": _IDS,
        "phys_state": _IDS,
        "link_layer": _IDS,
        "rate_gbps": _float(0.0, 1e6),
        "lid": _int(0, 65535),
        "guid": _IDS,
        "numa_node": _NUMA,
        "netdev": _IDS,
        "pci_bus_id": _IDS,
        "pci_path": _PCI_PATH,
    },
)
_read_link = _obj(
    FabricLink,
    {
        "device": _IDS,
        "port": _int(0, 255),
        "guid": _IDS,
        "switch_guid": _IDS,
        "switch_port": _int(0, 255),
        "switch_desc": _str(_TEXT),
    },
)
_read_inventory = _obj(
    Inventory,
    {
        "node": _str(_NODE),
        "cpus": _int(1, 2**20),
        "memory_bytes": _int(0, _MAX_MEMORY),
        "sockets": _COUNT,
        "cores_per_socket": _COUNT,
        "threads_per_core": _COUNT,
        "numa_nodes": _COUNT,
        "gpus": _list(_read_gpu, MAX_GPUS),
        "nics": _list(_read_nic, 1024),
        "gpu_nic": _list(_pair(_GPU_INDEX, _IDS), MAX_GPUS),
        "links": _list(_read_link, 4096),
        "switch_links": _list(_pair(_IDS, _IDS), _MAX_FABRIC),
        "switch_names": _list(_pair(_IDS, _str(_TEXT)), _MAX_FABRIC),
        "agent_version": _IDS,
        "boot_id": _IDS,
        "version": _VERSION,
    },
)
_read_heartbeat = _obj(
    Heartbeat,
    {
        "node": _str(_NODE),
        "seq": _int(0, 2**63 - 1),
        "sent": _float(0.0, 1e11),
        "load1": _float(0.0, 1e6),
        "memory_available": _int(0, _MAX_MEMORY),
        "gpu_memory_used": _list(_pair(_GPU_INDEX, _GPU_MEMORY), MAX_GPUS),
        "inventory": _IDS,
        "version": _VERSION,
        "extra": _map(_str(re.compile(r"[A-Za-z0-9._-]{1,64}")), _str(_TEXT), 64),
    },
)


def decode(kind: bytes, body: bytes) -> Inventory | Heartbeat:
    """A message from its two frames; raises MessageError (saying which field, and what
    was there) when it is not a well-formed, in-range message."""
    if kind == KIND_INVENTORY:
        limit, path = MAX_INVENTORY_BYTES, "inventory"
    elif kind == KIND_HEARTBEAT:
        limit, path = MAX_HEARTBEAT_BYTES, "heartbeat"
    else:
        raise MessageError("kind", "unknown message kind", kind[:16])
    if len(body) > limit:
        raise MessageError(path, f"{len(body)} bytes, more than {limit}")
    try:
        raw = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise MessageError(path, f"not JSON: {exc}") from exc
    if kind == KIND_HEARTBEAT:
        return _read_heartbeat(raw, path)
    inv = _read_inventory(raw, path)
    indexes = [g.index for g in inv.gpus]
    if len(set(indexes)) != len(indexes):
        raise MessageError(f"{path}.gpus", "duplicate GPU index", indexes)
    return inv
