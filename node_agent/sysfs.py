"""InfiniBand/RoCE ports and PCI devices from sysfs, read under a configurable root.

Files read (relative to the root; a recorded tree holds just these):

- `sys/class/infiniband/<dev>` -> the device's directory under `sys/devices/pci...`
- `<dev>/node_guid`, `<dev>/device` (-> the PCI function), `<dev>/device/numa_node`
- `<dev>/ports/<n>/{state,phys_state,rate,link_layer,lid}`
- `<dev>/ports/<n>/gid_attrs/ndevs/0` (RoCE: the Ethernet interface), else
  `sys/class/net/*/device` pointing at the same PCI function
- `sys/bus/pci/devices/<bdf>/{vendor,class,numa_node}` for GPUs when NVML is absent
- `sys/devices/system/node/online` (NUMA nodes)

The PCI path of a device (its chain of upstream bridges) is the resolved `device` link, so
the GPU <-> NIC pairing can tell devices behind one PCIe switch from devices that only
share a NUMA node.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path

from gateway.inventory.messages import GpuInfo, NicInfo

__all__ = [
    "SysfsReader",
    "normalise_bus_id",
    "parse_rate",
    "pci_path_of",
]

_NVIDIA = "0x10de"
_DISPLAY_CLASSES = ("0x0300", "0x0302")  # VGA, 3D controller
_BDF = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def _read(path: Path, default: str = "") -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return default


def _int(text: str, default: int = -1) -> int:
    try:
        return int(text, 0)
    except ValueError:
        return default


def parse_rate(text: str) -> float:
    """`200 Gb/sec (4X HDR)` -> 200.0 (Gbit/s); 0.0 when unreadable."""
    match = re.match(r"\s*([0-9.]+)\s*Gb/sec", text)
    return float(match.group(1)) if match else 0.0


def _after_colon(text: str) -> str:
    """`4: ACTIVE` -> `ACTIVE`."""
    return text.split(":", 1)[1].strip() if ":" in text else text.strip()


def normalise_bus_id(bus_id: str) -> str:
    """`00000000:1B:00.0` (NVML) or `0000:1b:00.0` -> `0000:1b:00.0`."""
    text = bus_id.strip().lower()
    domain, sep, rest = text.partition(":")
    if not sep:
        return text
    return f"{int(domain, 16):04x}:{rest}" if domain else text


def pci_path_of(device_dir: Path) -> tuple[str, ...]:
    """The PCI functions from the root complex down to the device a sysfs link points at."""
    real = os.path.realpath(device_dir)
    parts = real.split(os.sep)
    out: list[str] = []
    for part in parts:
        if part.startswith("pci") and ":" in part:
            out = [part]  # host bridge pciDDDD:BB
        elif out and _BDF.match(part):
            out.append(normalise_bus_id(part))
    return tuple(out)


class SysfsReader:
    """Reads a (real or recorded) sysfs tree; static facts are read once and cached."""

    def __init__(self, root: str | Path = "/") -> None:
        self.root = Path(root)
        self._static: dict[str, tuple[str, int, str, tuple[str, ...]]] = {}
        self._netdevs: dict[str, str] | None = None

    def _p(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)

    def numa_nodes(self) -> int:
        """How many NUMA nodes are online (1 when unknown)."""
        online = _read(self._p("sys", "devices", "system", "node", "online"))
        count = 0
        for item in filter(None, online.split(",")):
            lo, _, hi = item.partition("-")
            count += (int(hi) - int(lo) + 1) if hi else 1
        return count or 1

    def _device_static(self, dev: str) -> tuple[str, int, str, tuple[str, ...]]:
        cached = self._static.get(dev)
        if cached is None:
            base = self._p("sys", "class", "infiniband", dev)
            guid = _read(base / "node_guid").replace(":", "").lower()
            numa = _int(_read(base / "device" / "numa_node"), -1)
            path = pci_path_of(base / "device")
            bus = path[-1] if path else ""
            cached = (guid, numa, bus, path)
            self._static[dev] = cached
        return cached

    def _netdev_by_pci(self) -> dict[str, str]:
        if self._netdevs is None:
            found: dict[str, str] = {}
            net = self._p("sys", "class", "net")
            if net.is_dir():
                for entry in sorted(net.iterdir()):
                    dev = entry / "device"
                    if dev.exists():
                        path = pci_path_of(dev)
                        if path:
                            found.setdefault(path[-1], entry.name)
            self._netdevs = found
        return self._netdevs

    def nics(self) -> tuple[NicInfo, ...]:
        """Every port of every RDMA device, by device then port number."""
        top = self._p("sys", "class", "infiniband")
        if not top.is_dir():
            return ()
        out: list[NicInfo] = []
        for dev_dir in sorted(top.iterdir(), key=lambda p: _natural(p.name)):
            dev = dev_dir.name
            ports = dev_dir / "ports"
            if not ports.is_dir():
                continue
            guid, numa, bus, path = self._device_static(dev)
            for port_dir in sorted(ports.iterdir(), key=lambda p: _int(p.name, 0)):
                layer = _read(port_dir / "link_layer", "InfiniBand")
                netdev = ""
                if layer == "Ethernet":
                    netdev = _read(port_dir / "gid_attrs" / "ndevs" / "0")
                    if not netdev:
                        netdev = self._netdev_by_pci().get(bus, "")
                out.append(
                    NicInfo(
                        device=dev,
                        port=_int(port_dir.name, 1),
                        state=_after_colon(_read(port_dir / "state", "0: UNKNOWN")),
                        phys_state=_after_colon(_read(port_dir / "phys_state", "0: UNKNOWN")),
                        link_layer=layer,
                        rate_gbps=parse_rate(_read(port_dir / "rate")),
                        lid=_int(_read(port_dir / "lid", "0"), 0),
                        guid=guid,
                        numa_node=numa,
                        netdev=netdev,
                        pci_bus_id=bus,
                        pci_path=path,
                    )
                )
        return tuple(out)

    def pci_gpus(self) -> tuple[GpuInfo, ...]:
        """NVIDIA display/3D controllers on the PCI bus, in bus order (NVML's order)."""
        devices = self._p("sys", "bus", "pci", "devices")
        if not devices.is_dir():
            return ()
        found: list[tuple[str, int, tuple[str, ...]]] = []
        for entry in sorted(devices.iterdir()):
            if _read(entry / "vendor") != _NVIDIA:
                continue
            if not _read(entry / "class").startswith(_DISPLAY_CLASSES):
                continue
            found.append(
                (normalise_bus_id(entry.name), _int(_read(entry / "numa_node")), pci_path_of(entry))
            )
        return tuple(
            GpuInfo(index=i, pci_bus_id=bus, numa_node=numa, pci_path=path, source="sysfs")
            for i, (bus, numa, path) in enumerate(found)
        )

    def locate(self, gpu: GpuInfo) -> GpuInfo:
        """A GPU (from NVML) with its NUMA node and PCI path filled in from sysfs."""
        if not gpu.pci_bus_id:
            return gpu
        entry = self._p("sys", "bus", "pci", "devices", gpu.pci_bus_id)
        if not entry.exists():
            return gpu
        numa = gpu.numa_node if gpu.numa_node >= 0 else _int(_read(entry / "numa_node"))
        return replace(gpu, numa_node=numa, pci_path=pci_path_of(entry))


def _natural(name: str) -> tuple[str, int]:
    match = re.match(r"^(.*?)(\d+)$", name)
    return (match.group(1), int(match.group(2))) if match else (name, -1)
