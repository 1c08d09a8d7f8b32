"""Gateway side of the agents: wire messages, CURVE key files, and the registry's
heartbeat bookkeeping (down after N missed heartbeats, events, resend requests)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gateway.inventory.keys import (
    KeyFileError,
    authorized_keys,
    generate_keypair,
    load_keypair,
    load_public_key,
)
from gateway.inventory.messages import (
    FabricLink,
    GpuInfo,
    Heartbeat,
    Inventory,
    MessageError,
    NicInfo,
    decode,
    encode,
)
from gateway.inventory.registry import EventKind, NodeEvent, NodeRegistry
from gateway.model.cluster import NodeState


def inventory(node: str = "n1", **kw: object) -> Inventory:
    return Inventory(
        node=node,
        cpus=64,
        memory_bytes=512 * 2**30,
        gpus=(GpuInfo(index=0, memory_total=80 * 2**30, pci_path=("pci0000:15", "0000:18:00.0")),),
        nics=(NicInfo(device="mlx5_0", rate_gbps=400.0, pci_path=("pci0000:15",)),),
        gpu_nic=((0, "mlx5_0:1"),),
        links=(FabricLink("mlx5_0", 1, "b8599f0300010000", "b8599f0300e10100", 1, "leaf01"),),
        switch_links=(("a", "b"),),
        **kw,  # type: ignore[arg-type]
    )


def test_messages_round_trip_through_their_frames() -> None:
    inv = inventory()
    kind, body = encode(inv)
    assert kind == b"inv"
    assert decode(kind, body) == inv
    hb = Heartbeat(
        node="n1", seq=7, sent=1.5, load1=0.25, gpu_memory_used=((0, 1024),), inventory="x"
    )
    assert decode(*encode(hb)) == hb


@pytest.mark.parametrize(
    ("kind", "body"),
    [
        (b"inv", b"not json"),
        (b"inv", b"[]"),
        (b"zz", b"{}"),
        (b"inv", b'{"cpus": 1}'),
        (b"inv", b'{"node": "a", "cpus": 1, "memory_bytes": 1, "gpus": 3}'),
    ],
)
def test_malformed_messages_raise_message_error(kind: bytes, body: bytes) -> None:
    with pytest.raises(MessageError):
        decode(kind, body)


def test_unknown_fields_from_newer_agents_are_ignored() -> None:
    kind, body = encode(inventory())
    body = body[:-1] + b',"future":1}'
    assert decode(kind, body).node == "n1"


def test_keys_are_written_0600_and_loaded(tmp_path: Path) -> None:
    pair = generate_keypair(tmp_path / "keys", "node01")
    folder = tmp_path / "keys"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for f in ("node01.key", "node01.key_secret"):
        assert stat.S_IMODE((folder / f).stat().st_mode) == 0o600
    loaded = load_keypair(folder / "node01.key_secret")
    assert loaded.public == pair.public
    assert loaded.secret == pair.secret
    assert load_public_key(folder / "node01.key") == pair.public
    assert authorized_keys(folder) == {pair.public: "node01"}
    with pytest.raises(KeyFileError):
        generate_keypair(folder, "node01")  # no silent overwrite
    generate_keypair(folder, "node01", force=True)


def test_a_secret_key_readable_by_others_is_refused(tmp_path: Path) -> None:
    generate_keypair(tmp_path, "n")
    os.chmod(tmp_path / "n.key_secret", 0o644)
    with pytest.raises(KeyFileError, match="chmod 600"):
        load_keypair(tmp_path / "n.key_secret")
    with pytest.raises(KeyFileError):
        load_keypair(tmp_path / "n.key")  # public only
    with pytest.raises(KeyFileError):
        generate_keypair(tmp_path, "../evil")


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_node_goes_down_after_the_missed_heartbeats_and_comes_back() -> None:
    clock = Clock()
    reg = NodeRegistry(period_s=1.0, missed=3, clock=clock, wall=clock)
    events: list[NodeEvent] = []
    reg.subscribe(events.append)
    inv = inventory()
    reg.report_inventory(inv)
    assert [(e.kind, e.node) for e in events] == [(EventKind.UP, "n1")]
    for _ in range(5):
        clock.t += 1.0
        assert reg.report_heartbeat(
            Heartbeat(node="n1", seq=1, sent=0, inventory=inv.fingerprint())
        )
        assert reg.check() == []
    clock.t += 3.4  # three heartbeats missed, within the half-period tolerance
    assert reg.check() == []
    clock.t += 0.2
    assert reg.check() == ["n1"]
    assert events[-1].kind is EventKind.DOWN
    assert "3 heartbeats missed" in events[-1].reason
    assert reg.check() == []  # reported once
    assert reg.down_nodes() == ("n1",)
    node = reg.nodes()[0]
    assert node.state is NodeState.DOWN
    assert "missed" in (node.reason or "")
    clock.t += 10
    reg.report_heartbeat(Heartbeat(node="n1", seq=2, sent=0, inventory=inv.fingerprint()))
    assert events[-1].kind is EventKind.UP
    assert reg.down_nodes() == ()


def test_heartbeat_without_a_known_inventory_asks_for_it() -> None:
    reg = NodeRegistry()
    assert not reg.report_heartbeat(Heartbeat(node="new", seq=1, sent=0, inventory="abc"))
    reg.report_inventory(inventory("new"))
    assert not reg.report_heartbeat(Heartbeat(node="new", seq=2, sent=0, inventory="stale"))
    fp = inventory("new").fingerprint()
    assert reg.report_heartbeat(Heartbeat(node="new", seq=3, sent=0, inventory=fp))


def test_a_changed_inventory_is_an_event_and_a_failing_listener_is_contained() -> None:
    reg = NodeRegistry()
    seen: list[EventKind] = []

    def broken(ev: NodeEvent) -> None:
        raise RuntimeError("listener bug")

    reg.subscribe(broken)
    reg.subscribe(lambda ev: seen.append(ev.kind))
    reg.report_inventory(inventory())
    reg.report_inventory(inventory(boot_id="other"))
    assert seen == [EventKind.UP, EventKind.INVENTORY]


def test_registry_nodes_carry_the_discovered_leaf_switch() -> None:
    reg = NodeRegistry()
    reg.report_inventory(inventory())
    node = reg.nodes(partitions=("gpu",))[0]
    assert node.switch == "leaf01"
    assert node.partitions == ("gpu",)
    assert node.gpus[0].memory_total == 80 * 2**30
    assert node.labels["nic.caldera.io/gpu0"] == "mlx5_0:1"
    assert "ib" in node.features


def test_registry_refuses_nonsense_settings() -> None:
    with pytest.raises(ValueError, match="period_s"):
        NodeRegistry(period_s=0)
    with pytest.raises(ValueError, match="missed"):
        NodeRegistry(missed=0)
