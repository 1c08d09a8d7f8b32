"""Write the recorded sysfs trees the node agent's tests read (run from anywhere).

    python tests/data/sysfs/make_trees.py

Each machine is a directory holding only the sysfs files the agent reads, laid out as on a
real Linux host (the class entries are relative symlinks into `sys/devices/pci...`, the PCI
functions sit below their root ports and PCIe switches, `device` links go up to the PCI
function):

- `gpu8`: an 8-GPU HGX-style node, 2 NUMA nodes. Each GPU shares a PCIe switch with one
  ConnectX-7 InfiniBand HCA (mlx5_0..mlx5_7, NDR 400 Gb/s); pairs 0-3 on NUMA 0, 4-7 on 1.
- `roce`: 2 GPUs and a dual-port ConnectX-6 Dx in Ethernet mode (RoCE, netdevs
  ens1f0np0/ens1f1np1) on another root complex: pairing falls back to the NUMA node.
- `cpuonly`: no RDMA devices and no GPUs, one Ethernet interface.
- `portdown`: two InfiniBand HCAs, mlx5_1's port DOWN/Polling (cable pulled).

The node GUIDs are those of tests/data/ibnetdiscover/fabric.txt (`guid()` below).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent


def guid(host: int, hca: int) -> str:
    """The node GUID of HCA `hca` of host number `host` (16 hex digits)."""
    return f"b8599f03{host:04x}{hca:02x}00"


def sysfs_guid(hex16: str) -> str:
    return ":".join(hex16[i : i + 4] for i in range(0, 16, 4))


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def link(path: Path, target: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(os.path.relpath(target, path.parent))


class Machine:
    def __init__(self, name: str) -> None:
        self.root = HERE / name
        if self.root.exists():
            shutil.rmtree(self.root)
        self.sys = self.root / "sys"

    def numa(self, online: str) -> None:
        write(self.sys / "devices" / "system" / "node" / "online", online)

    def pci(self, chain: list[str], numa: int, vendor: str = "", klass: str = "") -> Path:
        """A PCI function below `chain` (host bridge first); returns its directory."""
        path = self.sys / "devices"
        for part in chain:
            path = path / part
        write(path / "numa_node", str(numa))
        if vendor:
            write(path / "vendor", vendor)
            write(path / "class", klass)
            link(self.sys / "bus" / "pci" / "devices" / chain[-1], path)
        return path

    def gpu(self, chain: list[str], numa: int) -> None:
        self.pci(chain, numa, "0x10de", "0x030200")

    def hca(
        self,
        chain: list[str],
        numa: int,
        dev: str,
        node_guid: str,
        *,
        state: str = "4: ACTIVE",
        phys: str = "5: LinkUp",
        rate: str = "400 Gb/sec (4X NDR)",
        layer: str = "InfiniBand",
        lid: str = "0x0",
        netdev: str = "",
    ) -> None:
        fn = self.pci(chain, numa, "0x15b3", "0x020700" if layer == "InfiniBand" else "0x020000")
        ib = fn / "infiniband" / dev
        write(ib / "node_guid", sysfs_guid(node_guid))
        link(ib / "device", fn)
        port = ib / "ports" / "1"
        write(port / "state", state)
        write(port / "phys_state", phys)
        write(port / "rate", rate)
        write(port / "link_layer", layer)
        write(port / "lid", lid)
        if netdev:
            write(port / "gid_attrs" / "ndevs" / "0", netdev)
            net = fn / "net" / netdev
            link(net / "device", fn)
            link(self.sys / "class" / "net" / netdev, net)
        link(self.sys / "class" / "infiniband" / dev, ib)

    def ethernet(self, chain: list[str], numa: int, ifname: str) -> None:
        fn = self.pci(chain, numa)
        net = fn / "net" / ifname
        link(net / "device", fn)
        link(self.sys / "class" / "net" / ifname, net)


def behind_switch(host_bus: int, slot: int) -> list[str]:
    """Root port -> PCIe switch upstream -> downstream port `slot` -> endpoint."""
    hb = f"{host_bus:02x}"
    return [
        f"pci0000:{hb}",
        f"0000:{hb}:01.0",
        f"0000:{host_bus + 1:02x}:00.0",
        f"0000:{host_bus + 2:02x}:{slot:02x}.0",
        f"0000:{host_bus + 3 + slot:02x}:00.0",
    ]


def gpu8() -> None:
    m = Machine("gpu8")
    m.numa("0-1")
    bridges = [0x15, 0x26, 0x37, 0x48, 0x95, 0xA6, 0xB7, 0xC8]
    for k, hb in enumerate(bridges):
        numa = 0 if k < 4 else 1
        m.gpu(behind_switch(hb, 0), numa)
        m.hca(behind_switch(hb, 1), numa, f"mlx5_{k}", guid(1, k), lid=hex(0x10 + k))


def roce() -> None:
    m = Machine("roce")
    m.numa("0-1")
    m.gpu(["pci0000:17", "0000:17:01.0", "0000:18:00.0"], 0)
    m.gpu(["pci0000:b1", "0000:b1:01.0", "0000:b2:00.0"], 1)
    for fn, ifname in ((0, "ens1f0np0"), (1, "ens1f1np1")):
        m.hca(
            ["pci0000:30", "0000:30:02.0", f"0000:31:00.{fn}"],
            0,
            f"mlx5_{fn}",
            f"0c42a10300{fn:02x}e3f2",
            rate="100 Gb/sec (4X EDR)",
            layer="Ethernet",
            netdev=ifname,
        )


def cpuonly() -> None:
    m = Machine("cpuonly")
    m.numa("0")
    m.ethernet(["pci0000:00", "0000:00:1c.0", "0000:02:00.0"], 0, "eno1")


def portdown() -> None:
    m = Machine("portdown")
    m.numa("0-1")
    m.hca(
        ["pci0000:3a", "0000:3a:02.0", "0000:3b:00.0"],
        0,
        "mlx5_0",
        guid(9, 0),
        lid="0x2a",
        rate="200 Gb/sec (4X HDR)",
    )
    m.hca(
        ["pci0000:d7", "0000:d7:02.0", "0000:d8:00.0"],
        1,
        "mlx5_1",
        guid(9, 1),
        state="1: DOWN",
        phys="2: Polling",
        rate="10 Gb/sec (4X SDR)",
        lid="0x0",
    )


if __name__ == "__main__":
    gpu8()
    roce()
    cpuonly()
    portdown()
