"""What a node has: CPUs and memory (psutil), GPUs (NVML, else the PCI bus), RDMA ports
(sysfs), GPU<->NIC pairing (PCI paths), and fabric neighbours (ibnetdiscover).

`Collector.inventory()` is the slowly-changing part (sent when its fingerprint changes),
`Collector.heartbeat()` the fast-changing figures (sent every period).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path

import psutil

from gateway.inventory.messages import FabricLink, GpuInfo, Heartbeat, Inventory, NicInfo
from gateway.topology.discovery import links_for_node
from gateway.topology.ibnetdiscover import Fabric, parse_ibnetdiscover
from gateway.topology.pcie import PciDev, pair
from node_agent.nvml import NvmlReader
from node_agent.sysfs import SysfsReader

__all__ = ["Collector", "CollectorConfig", "pair_gpus_nics"]

log = logging.getLogger("caldera.agent")


@dataclass(frozen=True)
class CollectorConfig:
    """Where the agent reads from.

    `ibnetdiscover`: "auto" runs the `ibnetdiscover` command when installed and the node has
    an InfiniBand port, "off" never, anything else is a file holding a captured output.
    `report_fabric`: also send the switch-to-switch links (one agent or a few suffice)."""

    node: str
    sysfs_root: Path = Path("/")
    ibnetdiscover: str = "auto"
    report_fabric: bool = False
    fabric_interval_s: float = 600.0
    use_nvml: bool = True


def pair_gpus_nics(
    gpus: tuple[GpuInfo, ...], nics: tuple[NicInfo, ...]
) -> tuple[tuple[int, str], ...]:
    """GPU index -> nearest RDMA port (`mlx5_3:1`) by PCI path, then NUMA node."""
    pairs = pair(
        [PciDev(str(g.index), g.numa_node, g.pci_path) for g in gpus],
        [PciDev(n.hca_port, n.numa_node, n.pci_path, n.active) for n in nics],
    )
    return tuple((int(k), v) for k, v in sorted(pairs.items(), key=lambda kv: int(kv[0])))


def _sockets(root: Path) -> int:
    cpu_dir = root / "sys" / "devices" / "system" / "cpu"
    ids: set[str] = set()
    for entry in cpu_dir.glob("cpu[0-9]*/topology/physical_package_id"):
        try:
            ids.add(entry.read_text().strip())
        except OSError:
            continue
    return len(ids) or 1


@dataclass(frozen=True, slots=True)
class _Static:
    cpus: int
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    numa_nodes: int
    memory_bytes: int
    boot_id: str


class Collector:
    """Reads the node; keeps static facts and the fabric between reads."""

    def __init__(self, config: CollectorConfig, nvml: NvmlReader | None = None) -> None:
        self.config = config
        self.sysfs = SysfsReader(config.sysfs_root)
        self.nvml = nvml if nvml is not None else (NvmlReader() if config.use_nvml else None)
        self._fabric: Fabric | None = None
        self._fabric_at = float("-inf")
        cores = psutil.cpu_count(logical=False) or 0
        cpus = psutil.cpu_count(logical=True) or 1
        sockets = _sockets(config.sysfs_root)
        self._static = _Static(
            cpus=cpus,
            sockets=sockets,
            cores_per_socket=max(cores // sockets, 1) if cores else max(cpus // sockets, 1),
            threads_per_core=max(cpus // cores, 1) if cores else 1,
            numa_nodes=self.sysfs.numa_nodes(),
            memory_bytes=psutil.virtual_memory().total,
            boot_id=_boot_id(),
        )

    def gpus(self) -> tuple[GpuInfo, ...]:
        """GPUs from NVML located on the PCI bus, else from the PCI bus alone. Memory used
        and free are left 0 here (they travel in heartbeats)."""
        found = self.nvml.gpus() if self.nvml is not None else ()
        if found:
            return tuple(replace(self.sysfs.locate(g), memory_used=0, memory_free=0) for g in found)
        return self.sysfs.pci_gpus()

    def _fabric_now(self, nics: tuple[NicInfo, ...]) -> Fabric | None:
        mode = self.config.ibnetdiscover
        now = time.monotonic()
        if mode == "off" or now - self._fabric_at < self.config.fabric_interval_s:
            return self._fabric
        self._fabric_at = now
        text = ""
        if mode == "auto":
            exe = shutil.which("ibnetdiscover")
            if exe is None or not any(n.link_layer == "InfiniBand" and n.active for n in nics):
                return None
            try:
                proc = subprocess.run(
                    [exe], capture_output=True, text=True, timeout=120, check=False
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                log.warning("ibnetdiscover failed: %s", exc)
                return self._fabric
            if proc.returncode != 0:
                log.warning("ibnetdiscover exited %d: %s", proc.returncode, proc.stderr.strip())
                return self._fabric
            text = proc.stdout
        else:
            try:
                text = Path(mode).read_text()
            except OSError as exc:
                log.warning("cannot read ibnetdiscover output %s: %s", mode, exc)
                return self._fabric
        self._fabric = parse_ibnetdiscover(text)
        return self._fabric

    def _links(
        self, nics: tuple[NicInfo, ...]
    ) -> tuple[tuple[FabricLink, ...], tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]:
        fabric = self._fabric_now(nics)
        if fabric is None:
            return (), (), ()
        devices = {n.guid: n.device for n in nics}
        links, switch_links, names = links_for_node(fabric, devices, devices)
        if not self.config.report_fabric:
            switch_links = ()
            names = tuple(sorted({(lk.switch_guid, lk.switch_desc) for lk in links}))
        return links, switch_links, names

    def inventory(self) -> Inventory:
        """The node's slowly-changing description."""
        gpus = self.gpus()
        nics = self.sysfs.nics()
        links, switch_links, names = self._links(nics)
        s = self._static
        return Inventory(
            node=self.config.node,
            cpus=s.cpus,
            memory_bytes=s.memory_bytes,
            sockets=s.sockets,
            cores_per_socket=s.cores_per_socket,
            threads_per_core=s.threads_per_core,
            numa_nodes=s.numa_nodes,
            gpus=gpus,
            nics=nics,
            gpu_nic=pair_gpus_nics(gpus, nics),
            links=links,
            switch_links=switch_links,
            switch_names=names,
            boot_id=s.boot_id,
        )

    def heartbeat(self, seq: int, fingerprint: str) -> Heartbeat:
        """The fast-changing figures."""
        load1 = os.getloadavg()[0]
        return Heartbeat(
            node=self.config.node,
            seq=seq,
            sent=time.time(),
            load1=round(load1, 2),
            memory_available=psutil.virtual_memory().available,
            gpu_memory_used=self.nvml.memory_used() if self.nvml is not None else (),
            inventory=fingerprint,
        )


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""
