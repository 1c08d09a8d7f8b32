"""The printf, time, number, hostlist, sort and JSON rules every formatter shares."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from gateway.compat.fmt_common import (
    UNIT_MEGA,
    JsonValue,
    c_str,
    convert_num_unit,
    ctime_str,
    hostlist_compress,
    hostlist_expand,
    json_c_dumps,
    make_time_str,
    msort,
    print_str,
    secs_short,
)
from gateway.compat.node_fmt_state import (
    BASE,
    FLAGS,
    node_state_string,
    node_state_string_compact,
    node_state_string_complete,
)


@pytest.fixture(autouse=True)
def utc() -> Iterator[None]:
    old = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if old is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = old
    time.tzset()


@pytest.mark.parametrize(
    ("value", "width", "right", "cut", "expected"),
    [
        ("debug", 9, True, True, "    debug"),  # %.9P
        ("sleeper", 8, True, True, " sleeper"),
        ("CSCfi_pytorch", 8, True, True, "CSCfi_py"),  # right-justified and cut: the head
        ("held", 8, False, True, "held    "),  # %8j
        ("xyz-cluster", 9, False, True, "xyz-clust"),  # %9P
        ("node[01-02]", 5, True, False, "node[01-02]"),  # node lists are never cut...
        ("node[01-02]", 5, False, False, "node["),  # ...except by a left precision
        ("594", 0, False, True, "594"),
        ("594", -5, False, True, "594 "),  # -O JobID:-5
        (None, 8, False, True, "(null)  "),
        (None, 5, False, True, "     "),  # glibc prints "" for %.5s of NULL
        (None, 5, True, True, "(null"),
    ],
)
def test_print_str_pads_and_cuts_like_printf(
    value: str | None, width: int, right: bool, cut: bool, expected: str
) -> None:
    assert print_str(value, width, right, cut) == expected


def test_widths_count_bytes_as_c_does() -> None:
    name = "naïve-ジョブ"
    cut = print_str(name, 8, True, True)
    assert cut.encode("utf-8", "surrogateescape") == "naïve-ジョブ".encode()[:8]
    assert c_str(None) == "(null)"


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (0, "0:00"),
        (3, "0:03"),
        (300, "5:00"),
        (3600, "1:00:00"),
        (93784, "1-02:03:04"),
        (-1, "INVALID"),
        (366 * 86400, "INVALID"),
    ],
)
def test_squeue_durations(seconds: int, expected: str) -> None:
    assert secs_short(seconds) == expected


def test_times_are_local_iso_and_unknown_for_zero() -> None:
    assert make_time_str(1795331396) == "2026-11-22T07:09:56"
    assert make_time_str(0) == "Unknown"
    assert make_time_str(None) == "Unknown"
    assert make_time_str(0xFFFF_FFFE) == "None"
    assert make_time_str(1795331396, 11) == "2026-11-22"  # sacct Start%10
    assert ctime_str(1795331399) == "Sun Nov 22 07:09:59 2026"


@pytest.mark.parametrize(
    ("mb", "expected"),
    [
        (0, "0"),
        (100, "100M"),
        (500, "500M"),
        (1024, "1G"),
        (1536, "1.50G"),
        (4096, "4G"),
        (655360, "640G"),
        (1000000, "1000000M"),
    ],
)
def test_memory_is_converted_exactly(mb: int, expected: str) -> None:
    assert convert_num_unit(mb, UNIT_MEGA) == expected


def test_bytes_convert_from_no_unit() -> None:
    assert convert_num_unit(11653120) == "11380K"


def test_hostlists_compress_sorted_and_expand_back() -> None:
    names = ["node02", "node01", "big002", "node04", "big001", "node03"]
    assert hostlist_compress(names) == "big[001-002],node[01-04]"
    assert hostlist_compress(["node01", "node03"]) == "node[01,03]"
    assert hostlist_compress(["node01"]) == "node01"
    assert hostlist_compress([]) == ""
    assert hostlist_expand("big[001-002],node[01,03]") == ("big001", "big002", "node01", "node03")
    assert hostlist_expand("(null)") == ()


def test_merge_sort_keeps_ties_and_reverses_always_greater_comparisons() -> None:
    items = [(1, "a"), (0, "b"), (1, "c"), (0, "d")]
    assert msort(items, lambda x, y: x[0] - y[0]) == [(0, "b"), (0, "d"), (1, "a"), (1, "c")]
    # squeue's start-time comparator says "greater" for every unknown start: glibc's merge
    # sort then reverses them (held jobs list newest first)
    assert msort([1, 2, 3, 4, 5], lambda x, y: 1) == [5, 4, 3, 2, 1]


def test_json_is_json_c_pretty_text() -> None:
    doc: JsonValue = {"errors": [], "meta": {}, "s": "a/b\n", "f": 1.0, "n": None, "l": [1, True]}
    assert json_c_dumps(doc) == (
        '{\n  "errors": [\n  ],\n  "meta": {\n  },\n  "s": "a\\/b\\n",\n  "f": 1.0,\n'
        '  "n": null,\n  "l": [\n    1,\n    true\n  ]\n}'
    )


@pytest.mark.parametrize(
    ("state", "long", "compact", "complete"),
    [
        (BASE["IDLE"], "IDLE", "IDLE", "IDLE"),
        (BASE["MIXED"], "MIXED", "MIX", "MIXED"),
        (
            BASE["DOWN"] | FLAGS["RESERVED"] | FLAGS["NOT_RESPONDING"],
            "DOWN*",
            "DOWN*",
            "DOWN+RESERVED+NOT_RESPONDING",
        ),
        (BASE["IDLE"] | FLAGS["DRAIN"], "DRAINED", "DRAIN", "IDLE+DRAIN"),
        (BASE["ALLOCATED"] | FLAGS["DRAIN"], "DRAINING", "DRNG", "ALLOCATED+DRAIN"),
        (BASE["ALLOCATED"] | FLAGS["COMPLETING"], "ALLOCATED+", "ALLOC+", "ALLOCATED+COMPLETING"),
        (BASE["IDLE"] | FLAGS["PLANNED"], "PLANNED", "PLND", "IDLE+PLANNED"),
        (BASE["IDLE"] | FLAGS["MAINTENANCE"], "MAINT", "MAINT", "IDLE+MAINTENANCE"),
    ],
)
def test_node_state_strings(state: int, long: str, compact: str, complete: str) -> None:
    assert node_state_string(state) == long
    assert node_state_string_compact(state) == compact
    assert node_state_string_complete(state) == complete
