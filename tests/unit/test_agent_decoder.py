"""The strict decoder of agent reports and the rate-limited logger.

Agents are authenticated but not trusted: whatever JSON an agent sends, `decode` returns a
well-typed, in-range Inventory or Heartbeat or raises MessageError naming the field; no
other exception, and nothing that would make the scheduler's arithmetic or sorting fail.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.inventory.convert import node_from_inventory
from gateway.inventory.messages import (
    MAX_INVENTORY_BYTES,
    Heartbeat,
    Inventory,
    MessageError,
    decode,
    encode,
)
from gateway.inventory.registry import EventKind, NodeEvent, NodeRegistry
from gateway.logutil import RateLimitedLogger
from node_agent.inventory import Collector, CollectorConfig

DATA = Path(__file__).resolve().parents[1] / "data"


def _collected(tree: str) -> Inventory:
    config = CollectorConfig(
        node="gpu01",
        sysfs_root=DATA / "sysfs" / tree,
        ibnetdiscover=str(DATA / "ibnetdiscover" / "fabric.txt"),
        report_fabric=True,
        use_nvml=False,
    )
    return Collector(config).inventory()


GOOD = orjson.loads(encode(_collected("gpu8"))[1])


@pytest.mark.parametrize("tree", ["cpuonly", "gpu8", "portdown", "roce"])
def test_what_real_agents_send_decodes_unchanged(tree: str) -> None:
    inv = _collected(tree)
    assert decode(*encode(inv)) == inv
    hb = Heartbeat(
        node="gpu01", seq=9, sent=1.7e9, load1=0.5, gpu_memory_used=((0, 2**30),), inventory="ab"
    )
    assert decode(*encode(hb)) == hb


def _with(path: tuple[str | int, ...], value: object) -> bytes:
    raw: Any = orjson.loads(orjson.dumps(GOOD))
    target = raw
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return json.dumps(raw).encode()  # json, not orjson: it writes integers beyond 64 bits


@pytest.mark.parametrize(
    ("body", "where", "shown"),
    [
        (_with(("gpus", 0, "index"), "zero"), "inventory.gpus[0].index", "'zero'"),
        (_with(("gpus", 0, "index"), 1024), "inventory.gpus[0].index", "1024"),
        (_with(("memory_bytes",), -1), "inventory.memory_bytes", "-1"),
        (_with(("gpus", 0, "memory_total"), -(2**30)), "inventory.gpus[0].memory_total", ""),
        (_with(("cpus",), True), "inventory.cpus", "True"),
        (_with(("cpus",), 4.0), "inventory.cpus", "4.0"),
        (_with(("cpus",), "4"), "inventory.cpus", "'4'"),
        (_with(("cpus",), 2**70), "inventory.cpus", ""),
        (_with(("gpus",), {"index": 0}), "inventory.gpus", "an object of 1 keys"),
        (_with(("gpus", 0), [0, "GPU-x"]), "inventory.gpus[0]", "a list of 2"),
        (_with(("gpu_nic", 0), [0, "mlx5_0:1", 3]), "inventory.gpu_nic[0]", ""),
        (_with(("nics", 0, "rate_gbps"), -5.0), "inventory.nics[0].rate_gbps", ""),
        (_with(("node",), "a b"), "inventory.node", "'a b'"),
        (_with(("node",), "x" * 200), "inventory.node", "(200 chars)"),
        (_with(("nics", 0, "device"), "mlx5_0;rm -rf"), "inventory.nics[0].device", ""),
        (_with(("links", 0, "switch_desc"), "leaf\n01"), "inventory.links[0].switch_desc", ""),
        (_with(("gpus", 1, "index"), 0), "inventory.gpus", "duplicate"),
        (_with(("gpus",), [{"index": i} for i in range(1025)]), "inventory.gpus", "1025"),
        (b'{"node": "gpu01", "memory_bytes": 1}', "inventory.cpus", "required"),
        (b'{"node": "gpu01", "cpus": NaN, "memory_bytes": 1}', "inventory", "not JSON"),
        (b'{"node": "gpu01", "cpus": 1, "memory_bytes": 1e400}', "inventory", "not JSON"),
        (b"[1, 2]", "inventory", "a list of 2"),
        (_with(("boot_id",), "b" * 10 * 2**20), "inventory", "more than"),
    ],
)
def test_malformed_inventories_name_the_field(body: bytes, where: str, shown: str) -> None:
    with pytest.raises(MessageError) as err:
        decode(b"inv", body)
    assert err.value.path == where
    assert shown in str(err.value)
    assert len(str(err.value)) < 300  # safe to log, even for a 10 MB string


def test_heartbeats_and_kinds_are_checked_too() -> None:
    hb = orjson.loads(encode(Heartbeat(node="gpu01", seq=1, sent=1.0))[1])
    for field, value in [("seq", -1), ("sent", "now"), ("gpu_memory_used", [[0]])]:
        with pytest.raises(MessageError, match=field):
            decode(b"hb", orjson.dumps({**hb, field: value}))
    with pytest.raises(MessageError, match="extra"):
        decode(b"hb", orjson.dumps({**hb, "extra": {"k": 1}}))
    with pytest.raises(MessageError, match="unknown message kind"):
        decode(b"zz", orjson.dumps(hb))
    with pytest.raises(MessageError, match="bytes, more than"):
        decode(b"hb", orjson.dumps({**hb, "pad": "x" * 2**17}))


def test_unknown_fields_are_ignored_within_the_size_limit() -> None:
    body = _with(("future",), {"anything": [1, 2, 3]})
    assert decode(b"inv", body) == decode(*encode(_collected("gpu8")))
    assert len(body) < MAX_INVENTORY_BYTES


# --- fuzz ------------------------------------------------------------------------------

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**64), max_value=2**64)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
    | st.sampled_from(["zero", "", "mlx5_0:1", "0000:18:00.0", "gpu01"])
)
_json = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def _paths(value: object, prefix: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


_PATHS = _paths(GOOD)


def _check(kind: bytes, body: bytes) -> None:
    try:
        msg = decode(kind, body)
    except MessageError:
        return
    if isinstance(msg, Inventory):  # what the scheduler does with it must work
        node = node_from_inventory(msg)
        assert sorted(g.index for g in node.gpus) == sorted({g.index for g in node.gpus})
        assert all(type(g.memory_total) is int and g.memory_total >= 0 for g in node.gpus)
        assert node.cpus >= 1
        assert node.memory_mb >= 0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from([b"inv", b"hb", b"x"]), value=_json)
def test_fuzz_any_json_gives_a_message_or_message_error(kind: bytes, value: object) -> None:
    _check(kind, json.dumps(value).encode())


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(_PATHS), value=_json, drop=st.booleans())
def test_fuzz_one_field_of_a_real_inventory_replaced(
    path: tuple[str | int, ...], value: object, drop: bool
) -> None:
    raw: Any = orjson.loads(orjson.dumps(GOOD))
    target = raw
    for step in path[:-1]:
        target = target[step]
    if drop and isinstance(target, dict):
        del target[path[-1]]
    else:
        target[path[-1]] = value
    _check(b"inv", json.dumps(raw).encode())


@settings(max_examples=200, deadline=None)
@given(body=st.binary(max_size=64))
def test_fuzz_raw_bytes(body: bytes) -> None:
    _check(b"inv", body)


# --- rate-limited logging --------------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_rate_limited_logger_logs_first_then_a_count(caplog: pytest.LogCaptureFixture) -> None:
    clock = _Clock()
    limited = RateLimitedLogger(logging.getLogger("t.limit"), 60.0, clock=clock)
    caplog.set_level(logging.INFO, "t.limit")
    assert limited.log(logging.WARNING, "10.0.0.1", "junk", "junk from %s", "10.0.0.1")
    for _ in range(99):
        assert not limited.log(logging.WARNING, "10.0.0.1", "junk", "junk from %s", "10.0.0.1")
    assert limited.log(logging.WARNING, "10.0.0.2", "junk", "junk from %s", "10.0.0.2")
    assert limited.log(logging.WARNING, "10.0.0.1", "other", "other kind")
    assert [r.getMessage() for r in caplog.records] == [
        "junk from 10.0.0.1",
        "junk from 10.0.0.2",
        "other kind",
    ]
    clock.now += 30
    assert limited.flush() == 0
    clock.now += 31
    assert limited.flush() == 1  # only 10.0.0.1/junk had repeats
    assert caplog.records[-1].getMessage() == (
        "99 similar messages suppressed (junk from 10.0.0.1) in the last 60 s"
    )
    assert caplog.records[-1].levelno == logging.WARNING
    assert limited.log(logging.WARNING, "10.0.0.1", "junk", "junk again")  # a new window


def test_rate_limited_logger_bounds_the_number_of_sources(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = _Clock()
    limited = RateLimitedLogger(logging.getLogger("t.many"), 60.0, max_keys=10, clock=clock)
    caplog.set_level(logging.INFO, "t.many")
    for i in range(10_000):
        limited.log(logging.WARNING, f"10.0.{i // 256}.{i % 256}", "junk", "junk %d", i)
    assert len(caplog.records) == 11  # ten sources, then one for all the others
    assert len(limited._windows) == 11
    clock.now += 61
    limited.flush()
    assert "9989 similar messages suppressed (junk from (other sources))" in (
        caplog.records[-1].getMessage()
    )


def test_an_agent_flapping_its_inventory_is_logged_once_but_every_change_is_applied(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = NodeRegistry(1.0, 3)
    events: list[NodeEvent] = []
    registry.subscribe(events.append)
    caplog.set_level(logging.INFO, "caldera.inventory")
    for i in range(100):
        registry.report_inventory(Inventory(node="gpu01", cpus=1 + i % 2, memory_bytes=2**30))
    assert [e.kind for e in events].count(EventKind.INVENTORY) == 99
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["node gpu01 up (registered)", "node gpu01 inventory (changed)"]
