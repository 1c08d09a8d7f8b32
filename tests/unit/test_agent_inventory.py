"""The node agent's inventory from the recorded sysfs trees (tests/data/sysfs), NVML
without a driver, and GPU<->NIC pairing with the environment it produces."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from gateway.inventory.convert import derived_features, node_from_inventory
from gateway.inventory.messages import GpuInfo
from gateway.model.cluster import Node
from gateway.model.job import RankPlacement
from gateway.topology.netenv import choose_gpus, gpu_nic_map, network_env, with_nics
from gateway.topology.pcie import PathClass, PciDev, pair, path_class
from node_agent.inventory import Collector, CollectorConfig
from node_agent.nvml import NvmlReader
from node_agent.sysfs import SysfsReader, normalise_bus_id, parse_rate

DATA = Path(__file__).resolve().parents[1] / "data"
SYSFS = DATA / "sysfs"
FABRIC = DATA / "ibnetdiscover" / "fabric.txt"
GIB = 2**30


def collect(machine: str, nvml: NvmlReader | None = None, **kw: Any) -> Collector:
    node = kw.pop("node", machine)
    return Collector(
        CollectorConfig(node=node, sysfs_root=SYSFS / machine, **kw), nvml=nvml or NvmlReader()
    )


def test_gpu8_node_has_8_gpus_and_8_ndr_hcas_over_two_numa_nodes() -> None:
    r = SysfsReader(SYSFS / "gpu8")
    nics = r.nics()
    assert [n.device for n in nics] == [f"mlx5_{i}" for i in range(8)]
    assert all(n.state == "ACTIVE" and n.phys_state == "LinkUp" for n in nics)
    assert all(n.link_layer == "InfiniBand" and n.rate_gbps == 400.0 for n in nics)
    assert [n.numa_node for n in nics] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert nics[0].guid == "b8599f0300010000"
    assert nics[0].lid == 0x10
    assert nics[0].pci_bus_id == "0000:19:00.0"
    assert nics[0].pci_path[:3] == ("pci0000:15", "0000:15:01.0", "0000:16:00.0")
    gpus = r.pci_gpus()
    assert [g.pci_bus_id for g in gpus][:2] == ["0000:18:00.0", "0000:29:00.0"]
    assert [g.numa_node for g in gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert all(g.source == "sysfs" for g in gpus)
    assert r.numa_nodes() == 2


def test_gpu8_pairs_each_gpu_with_the_hca_behind_its_pcie_switch() -> None:
    inv = collect("gpu8", ibnetdiscover="off").inventory()
    assert inv.gpu_nic == tuple((i, f"mlx5_{i}:1") for i in range(8))
    g0, n0, n4 = inv.gpus[0], inv.nics[0], inv.nics[4]
    assert (
        path_class(PciDev("0", g0.numa_node, g0.pci_path), PciDev("m", n0.numa_node, n0.pci_path))[
            0
        ]
        is PathClass.PIX
    )
    assert (
        path_class(PciDev("0", g0.numa_node, g0.pci_path), PciDev("m", n4.numa_node, n4.pci_path))[
            0
        ]
        is PathClass.SYS
    )


def test_roce_node_reports_netdevs_and_pairs_by_numa() -> None:
    inv = collect("roce", ibnetdiscover="off").inventory()
    assert [(n.device, n.link_layer, n.netdev, n.rate_gbps) for n in inv.nics] == [
        ("mlx5_0", "Ethernet", "ens1f0np0", 100.0),
        ("mlx5_1", "Ethernet", "ens1f1np1", 100.0),
    ]
    # GPU 0 is on NUMA 0 like both ports; GPU 1 on NUMA 1 has no local port
    assert dict(inv.gpu_nic) == {0: "mlx5_0:1", 1: "mlx5_1:1"}
    assert derived_features(inv) == ("roce", "rdma")


def test_roce_netdev_found_through_class_net_without_gid_attrs(tmp_path: Path) -> None:
    root = tmp_path / "roce"
    shutil.copytree(SYSFS / "roce", root, symlinks=True)
    for ndevs in root.rglob("ndevs"):
        shutil.rmtree(ndevs)
    assert [n.netdev for n in SysfsReader(root).nics()] == ["ens1f0np0", "ens1f1np1"]


def test_cpu_only_node_has_no_rdma_and_no_gpus() -> None:
    inv = collect("cpuonly", ibnetdiscover="off").inventory()
    assert inv.gpus == ()
    assert inv.nics == ()
    assert inv.gpu_nic == ()
    assert derived_features(inv) == ()
    assert inv.cpus >= 1
    assert inv.memory_bytes > 0
    assert inv.numa_nodes == 1


def test_port_down_node_reports_the_down_port_and_pairs_only_the_active_one() -> None:
    inv = collect("portdown", ibnetdiscover="off").inventory()
    states = {n.device: (n.state, n.phys_state, n.active) for n in inv.nics}
    assert states == {"mlx5_0": ("ACTIVE", "LinkUp", True), "mlx5_1": ("DOWN", "Polling", False)}
    assert derived_features(inv) == ("ib", "rdma")
    node = node_from_inventory(inv)
    assert network_env(node, ()).nics == ("mlx5_0:1",)


def test_nvml_without_a_driver_falls_back_to_the_pci_bus() -> None:
    reader = NvmlReader()
    assert reader.gpus() == ()
    assert not reader.available
    assert "NVMLError" in reader.error or "ModuleNotFound" in reader.error
    gpus = collect("gpu8", nvml=reader, ibnetdiscover="off").gpus()
    assert len(gpus) == 8
    assert gpus[0].source == "sysfs"


class RecordedNvml:
    """nvidia-ml-py's API answering with figures recorded from an 8x H100 node (no GPU
    exists on this machine); only what NvmlReader calls."""

    busids: ClassVar[list[str]] = [
        "00000000:18:00.0",
        "00000000:29:00.0",
        "00000000:3A:00.0",
        "00000000:4B:00.0",
        "00000000:98:00.0",
        "00000000:A9:00.0",
        "00000000:BA:00.0",
        "00000000:CB:00.0",
    ]

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int:
        return 8

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> str:
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-5fd4b2c8-1d0e-7c47-9b8f-0a2f3c4d5e{h:02x}"

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        total = 85520809984
        used = 4 * 2**20 + h * GIB
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetPciInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(busId=self.busids[h].encode())


def test_nvml_gpus_are_located_on_the_pci_bus_and_memory_goes_in_heartbeats() -> None:
    c = collect("gpu8", nvml=NvmlReader(RecordedNvml()), ibnetdiscover="off")
    inv = c.inventory()
    g = inv.gpus[2]
    assert g.model == "NVIDIA H100 80GB HBM3"
    assert g.source == "nvml"
    assert g.memory_total == 85520809984
    assert g.memory_used == 0
    assert g.pci_bus_id == "0000:3a:00.0"
    assert g.numa_node == 0
    assert g.pci_path[-1] == "0000:3a:00.0"
    assert inv.gpu_nic[2] == (2, "mlx5_2:1")
    hb = c.heartbeat(1, inv.fingerprint())
    assert dict(hb.gpu_memory_used)[3] == 4 * 2**20 + 3 * GIB
    node = node_from_inventory(inv, hb)
    assert node.gpus[3].memory_free == 85520809984 - (4 * 2**20 + 3 * GIB)
    assert node.gpu_count() == 8


def test_fabric_neighbours_come_from_the_ibnetdiscover_capture() -> None:
    inv = collect("gpu8", node="gpu01", ibnetdiscover=str(FABRIC)).inventory()
    assert len(inv.links) == 8
    assert {lk.switch_desc for lk in inv.links} == {"MF0;leaf01:MQM9700/U1"}
    assert inv.links[3].device == "mlx5_3"
    assert inv.links[3].switch_port == 4
    assert inv.switch_links == ()
    reporter = collect("gpu8", node="gpu01", ibnetdiscover=str(FABRIC), report_fabric=True)
    assert len(reporter.inventory().switch_links) == 8


def test_inventory_fingerprint_ignores_nothing_but_changes_with_port_state() -> None:
    c = collect("gpu8", ibnetdiscover="off")
    a, b = c.inventory(), c.inventory()
    assert a.fingerprint() == b.fingerprint()
    changed = replace(a, nics=(replace(a.nics[0], state="DOWN"), *a.nics[1:]))
    assert changed.fingerprint() != a.fingerprint()


def test_parsers_of_sysfs_values() -> None:
    assert parse_rate("400 Gb/sec (4X NDR)") == 400.0
    assert parse_rate("2.5 Gb/sec (1X SDR)") == 2.5
    assert parse_rate("") == 0.0
    assert normalise_bus_id("00000000:1B:00.0") == "0000:1b:00.0"


def gpu8_node() -> Node:
    inv = collect("gpu8", nvml=NvmlReader(RecordedNvml()), ibnetdiscover="off").inventory()
    return node_from_inventory(inv)


def test_network_env_names_the_paired_hcas_of_the_job_gpus() -> None:
    node = gpu8_node()
    net = network_env(node, (2, 5))
    assert net.env == {
        "CUDA_VISIBLE_DEVICES": "2,5",
        "NCCL_IB_HCA": "=mlx5_2:1,mlx5_5:1",
        "UCX_NET_DEVICES": "mlx5_2:1,mlx5_5:1",
    }
    uuid_env = network_env(node, (0,), cuda="uuid").env
    assert uuid_env["CUDA_VISIBLE_DEVICES"].startswith("GPU-5fd4b2c8")
    assert "CUDA_VISIBLE_DEVICES" not in network_env(node, (0,), cuda="none").env
    placed = with_nics((RankPlacement("gpu8", 4, 16, 1000, (0, 1, 2, 3)),), {"gpu8": node})
    assert placed[0].nics == ("mlx5_0:1", "mlx5_1:1", "mlx5_2:1", "mlx5_3:1")


def test_pairing_without_agent_labels_falls_back_to_numa() -> None:
    node = replace(gpu8_node(), labels={})
    nic_of = gpu_nic_map(node)
    assert all(nic_of[i].numa_node == node.gpus[i].numa_node for i in range(8))
    assert len({nic_of[i].device for i in range(8)}) == 8  # balanced, one GPU per HCA


def test_eight_gpus_on_four_nics_share_two_per_nic() -> None:
    pairs = pair(
        [PciDev(str(i), i // 4) for i in range(8)],
        [PciDev(f"mlx5_{j}:1", j // 2) for j in range(4)],
    )
    assert sorted(pairs.values()).count("mlx5_0:1") == 2
    assert pairs["0"] in ("mlx5_0:1", "mlx5_1:1")
    assert pairs["7"] in ("mlx5_2:1", "mlx5_3:1")


def test_choose_gpus_fits_memory_and_stays_on_one_numa_node() -> None:
    node = gpu8_node()
    assert choose_gpus(node, frozenset(range(8)), 4) == (0, 1, 2, 3)
    assert choose_gpus(node, frozenset({1, 2, 4, 5, 6, 7}), 3) == (4, 5, 6)
    need = 85520809984 - 2 * GIB + 1  # GPUs 0-1 have enough free, the rest do not
    busy = replace(
        node, gpus=tuple(replace(g, memory_free=g.memory_total - g.index * GIB) for g in node.gpus)
    )
    assert choose_gpus(busy, frozenset(range(8)), 2, need) == (0, 1)
    assert choose_gpus(busy, frozenset(range(8)), 3, need) is None
    assert choose_gpus(Node(name="x", cpus=1, memory_mb=1), {3, 1}, 1) == (1,)


@pytest.mark.parametrize("machine", ["gpu8", "roce", "cpuonly", "portdown"])
def test_recorded_trees_hold_only_small_files(machine: str) -> None:
    files = [p for p in (SYSFS / machine).rglob("*") if p.is_file() and not p.is_symlink()]
    assert files
    assert all(p.stat().st_size < 64 for p in files)


def test_gpuinfo_defaults_are_unknown_numa() -> None:
    assert GpuInfo(index=0).numa_node == -1
