"""Unit tests of `gateway.compat.hostlist` (Slurm 22.05 hostlist expressions).

Every expected value here was checked against `scontrol show hostnames|hostlist|
hostlistsorted` of Slurm 22.05.8; tests/differential compares thousands more.
"""

from __future__ import annotations

import contextlib
import random
import re
import time
from collections import Counter
from typing import Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.compat.errors import CompatError, Level, SpecError
from gateway.compat.glibc_sort import msort
from gateway.compat.hostlist import (
    MAX_RANGE,
    HostlistError,
    ShowResult,
    compress,
    compress_sorted,
    count,
    cstring,
    expand,
    parser,
    rangelist,
    ranges,
    show,
    uniq,
)

# ---------------------------------------------------------------------------------------
# expand: scontrol show hostnames


@pytest.mark.parametrize(
    ("expr", "hosts"),
    [
        ("n[1-3]", ["n1", "n2", "n3"]),
        ("rack[1-2]-node[01-02]", ["rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"]),
        ("n[1,3,5-7]", ["n1", "n3", "n5", "n6", "n7"]),
        ("n[8-10]", ["n8", "n9", "n10"]),
        ("n[008-010]", ["n008", "n009", "n010"]),
        ("n[1-03]", ["n1", "n2", "n3"]),  # the width is the low bound's
        ("r1n[1-2]", ["r1n1", "r1n2"]),
        ("nid0000[8-9]", ["nid00008", "nid00009"]),
        ("n[1-2]-ib[1]", ["n1-ib1", "n2-ib1"]),
        ("login,head-node", ["login", "head-node"]),
        ("10.0.0.[1-2],10.0.1.7", ["10.0.0.1", "10.0.0.2", "10.0.1.7"]),
        ("n007,42", ["n007", "42"]),
        ("n1,n1,n[1-2]", ["n1", "n1", "n1", "n2"]),  # duplicates kept
        ("n[1-3],n[2-5]", ["n1", "n2", "n3", "n2", "n3", "n4", "n5"]),
        ("  n1 \t n2 ,, n3  ", ["n1", "n2", "n3"]),  # tab, comma and space separate
        ("n[ 1-3]", ["n01", "n02", "n03"]),  # width counts the blank
        ("n[+1-2]", ["n01", "n02"]),
        ("n[1a-2]", ["n01", "n02"]),  # junk after the low bound is not checked
        ("n[1-]", ["n1"]),
        ("n[1-3", ["n]"]),  # no closing bracket: prefix plus "]"
        ("[abc", ["abc"]),
        ("[", [""]),
        ("n1-3]", ["n1-3]"]),
        ("[1-3]", ["1", "2", "3"]),
        ("n99999999999999999999999", ["n00018446744073709551615"]),  # strtoul saturates
        ("n18446744073709551615,n0", ["n1844674407370955", "n0"]),  # scontrol's buffer cut
        ("", []),
        (" , ", []),
        ("a\nb[1-2]", ["a\nb1", "a\nb2"]),
        ("n[1é-2]", ["n001", "n002"]),  # widths are bytes
        ("a[x]b[1-2]c[3]", []),  # errors below the first bracket are printed, then ignored
    ],
)
def test_expand(expr: str, hosts: list[str]) -> None:
    assert expand(expr) == hosts


def test_expand_large_range_is_fast() -> None:
    start = time.process_time()  # CPU time: the bound holds on a busy machine too
    hosts = expand("n[00001-60000],rack[1-4]-node[001-999]")
    elapsed = time.process_time() - start
    assert len(hosts) == 60000 + 4 * 999
    assert hosts[0] == "n00001"
    assert hosts[-1] == "rack4-node999"
    assert elapsed < 0.5  # about 0.03 s


def test_max_range() -> None:
    assert MAX_RANGE == 65536
    assert count("n[1-65536]") == 65536
    assert len(expand("n[0-65535]")) == 65536
    with pytest.raises(HostlistError) as info:
        expand("n[0-65536]")
    assert info.value.render() == (
        "scontrol: error: _parse_single_range: Too many hosts in range `0-65536'\n"
        "Invalid hostlist: n[0-65536]\n"
    )


def test_prefix_range_limit() -> None:
    """A bracket in the prefix may give at most 64K values, counted over its ranges."""
    assert count("a[1-65536]b[1]") == 65536
    with pytest.raises(HostlistError) as info:
        expand("a[1-40000,1-40000]b[1]")
    assert info.value.render() == "Invalid hostlist: a[1-40000,1-40000]b[1]\n"  # no error line
    # Below the first bracket the failure is ignored: the 40000 values pushed before stay.
    assert count("x[1-40000,1-40000]a[1-2]b[1]") == 80000


@pytest.mark.parametrize(
    ("expr", "lines"),
    [
        ("n[3-1]", ["scontrol: error: _parse_single_range: Invalid range: `3-1'"]),
        ("n[a-b]", ["scontrol: error: _parse_single_range: Invalid range: `a-b'"]),
        ("n[1x-3]", ["scontrol: error: _parse_single_range: Invalid range: `1x-3'"]),
        ("n[-1]", ["scontrol: error: _parse_single_range: Invalid range: `-1'"]),
        ("n[1--2]", ["scontrol: error: _parse_single_range: Invalid range: `1--2'"]),
        ("n[]", ["scontrol: error: _parse_single_range: Invalid range: `'"]),
        ("n[1,,2]", ["scontrol: error: _parse_single_range: Invalid range: `'"]),
        ("n[1- -2]", ["scontrol: error: _parse_single_range: Too many hosts in range `1- -2'"]),
        ("n[1-2]-ib", []),  # nothing may follow the last "]"
        ("n[1-3]x", []),
        ("n[1-3]]", []),
    ],
)
def test_invalid(expr: str, lines: list[str]) -> None:
    expected = "".join(line + "\n" for line in [*lines, f"Invalid hostlist: {expr}"])
    with pytest.raises(HostlistError) as info:
        expand(expr)
    err = info.value
    assert err.render() == expected
    assert err.exit_code == 0  # scontrol show hostnames reports and still exits 0
    assert isinstance(err, SpecError)
    assert isinstance(err, CompatError)
    assert err.lines[-1].level is Level.RAW
    assert err.message.endswith(f"Invalid hostlist: {expr}")
    with pytest.raises(HostlistError) as info2:
        compress([expr])
    assert info2.value.exit_code == 1
    assert info2.value.render() == expected


def test_error_text_keeps_braces() -> None:
    with pytest.raises(HostlistError) as info:
        compress("{prog}[a]")
    assert "{prog}" in info.value.render()
    assert "{prog}" in info.value.message


def test_input_stops_at_nul() -> None:
    assert expand("n1\0,n2") == ["n1"]


def test_crash_and_hang_raise() -> None:
    # scontrol show hostnames dies of SIGSEGV here: a range ending at 2**64-1 miscounts.
    with pytest.raises(HostlistError) as info:
        expand("n[18446744073709551614-18446744073709551615]")
    assert info.value.exit_code == 139
    assert "SIGSEGV" in str(info.value)
    assert show("hostnames", "n[18446744073709551614-18446744073709551615]") == ShowResult(
        "", "", 139
    )
    # ... while show hostlist is fine with it.
    assert compress("n[18446744073709551614-18446744073709551615]") == (
        "n[18446744073709551614-18446744073709551615]"
    )
    # A prefix range ending at 2**64-1: Slurm loops forever.
    with pytest.raises(HostlistError, match="never ends"):
        expand("a[18446744073709551615]b[1]")
    with pytest.raises(HostlistError, match="never ends"):
        show("hostlist", "a[18446744073709551615]b[1]")
    # Sorting overlapping ranges that end at 2**64-1: Slurm's coalesce loops forever.
    overlap = (
        "n[18446744073709551610-18446744073709551615],n[18446744073709551611-18446744073709551615]"
    )
    with pytest.raises(HostlistError, match="never ends"):
        compress_sorted(overlap)
    with pytest.raises(HostlistError, match="never ends"):
        show("hostlistsorted", overlap)
    assert (
        compress(overlap)
        == "n[18446744073709551610-18446744073709551615,18446744073709551611-18446744073709551615]"
    )
    # An overlap of 4 billion hosts (a range end copied across by coalesce): scontrol
    # inserts them one at a time until malloc fails.
    with pytest.raises(HostlistError, match="out of memory"):
        compress_sorted(
            "n110 n[9223372036854775805-9223372036854775808] n4294967300 n[4294967299-4294967301]"
        )


def test_too_many_ranges_is_fatal() -> None:
    expr = "n[" + ",".join(["1"] * (256 * 1024 + 1)) + "]"
    with pytest.raises(HostlistError) as info:
        compress(expr)
    assert info.value.render() == (
        "scontrol: fatal: _parse_range_list: Too many ranges, can't process entire list\n"
    )
    assert info.value.exit_code == 1


# ---------------------------------------------------------------------------------------
# compress: scontrol show hostlist, show hostlistsorted


@pytest.mark.parametrize(
    ("hosts", "ranged", "ranged_sorted"),
    [
        (["n1", "n2", "n3"], "n[1-3]", "n[1-3]"),
        (["n3", "n1", "n2"], "n[3,1-2]", "n[1-3]"),
        (["n1", "n1", "n2"], "n[1,1-2]", "n[1,1-2]"),  # sorted keeps duplicates
        (["n[1-5]", "n[3-8]"], "n[1-5,3-8]", "n[1-3,3-4,4-5,5-8]"),
        (["n1", "n01", "n001", "n2", "n02"], "n[1,01,001,2,02]", "n[1-2,01-02,001]"),
        (["n8", "n9", "n10"], "n[8-10]", "n[8-10]"),
        (["n08", "n09", "n10"], "n[08-10]", "n[08-10]"),
        (["b", "a", "c", "a"], "b,a,c,a", "a,a,b,c"),
        (["node10", "node9", "login", "node11"], "node[10,9],login,node11", "login,node[9-11]"),
        (["a1b[3-4]", "a2b3"], "a1b[3-4],a2b3", "a1b[3-4],a2b3"),
        (["10.0.0.2", "10.0.0.1", "10.0.1.1"], "10.0.0.[2,1],10.0.1.1", "10.0.0.[1-2],10.0.1.1"),
        (["x2", "x10", "x1"], "x[2,10,1]", "x[1-2,10]"),  # natural order
        ([], "", ""),
        (
            ["n[0-18446744073709551615]", "a"],
            "n0-18446744073709551615,a",
            "a,n0-18446744073709551615",
        ),
        (["n18446744073709551615", "n0"], "n[18446744073709551615]", "n[18446744073709551615]"),
    ],
)
def test_compress(hosts: list[str], ranged: str, ranged_sorted: str) -> None:
    assert compress(hosts) == ranged
    assert compress(",".join(hosts)) == ranged  # a str is the expression itself
    assert compress_sorted(hosts) == ranged_sorted
    assert show("hostlist", ",".join(hosts)) == ShowResult(ranged + "\n", "", 0)
    assert show("hostlistsorted", ",".join(hosts)) == ShowResult(ranged_sorted + "\n", "", 0)


def test_sorted_overlap_after_big_number() -> None:
    """Slurm reads a freed range here; glibc's reuse of that memory decides the output."""
    expr = ",n1844674407379551616, n[36-56,0019-22] 0te."
    assert compress_sorted(expr) == "0te.,n[1844674407379551616,0019-0022]"


def test_compress_thousands_is_fast() -> None:
    names = [f"node{i:04d}" for i in range(1, 5001)] + [f"gpu{i}" for i in range(1, 3001)]
    random.Random(7).shuffle(names)
    start = time.process_time()  # about 0.05 s of CPU
    assert compress_sorted(names) == "gpu[1-3000],node[0001-5000]"
    assert len(compress(names)) > 0
    assert len(uniq(names + names)) == 8000
    assert time.process_time() - start < 1.0


# ---------------------------------------------------------------------------------------
# uniq, count, show


def test_uniq() -> None:
    assert uniq(["n3", "n1", "n2", "n1"]) == ["n1", "n2", "n3"]
    assert uniq("n[1-5],n[3-8],login,login") == ["login"] + [f"n{i}" for i in range(1, 9)]
    assert uniq(["x10", "x9", "x010"]) == ["x9", "x10", "x010"]
    assert uniq([]) == []


def test_count() -> None:
    assert count("n[1-3],n[2-5],login") == 8
    assert count("") == 0
    assert count("n[0-18446744073709551615]") == 0  # a 2**64-host range counts 0 in C
    with pytest.raises(HostlistError):
        count("n[3-1]")


def test_show() -> None:
    assert show("hostnames", "n[1-2]") == ShowResult("n1\nn2\n", "", 0)
    assert show("hostnames", "") == ShowResult("", "", 0)
    assert show("hostlist", "") == ShowResult("\n", "", 0)
    assert show("hostnames", "n[a]") == ShowResult(
        "",
        "scontrol: error: _parse_single_range: Invalid range: `a'\nInvalid hostlist: n[a]\n",
        0,
    )
    assert show("hostlist", "n[a]").exit_code == 1
    warn = "scontrol: error: _parse_single_range: Invalid range: `x'\n"
    assert show("hostlist", "a[x]b[1-2]c[3],n1") == ShowResult("n1\n", warn * 2, 0)


# ---------------------------------------------------------------------------------------
# Properties

SYNTAX = st.text(alphabet="ab0123456789-[], x\t.é+\n", max_size=24)
ANY_TEXT = st.text(max_size=24)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(SYNTAX, ANY_TEXT))
def test_any_text_is_a_value_or_hostlist_error(text: str) -> None:
    for fn in (expand, compress, compress_sorted, uniq, count):
        with contextlib.suppress(HostlistError):
            fn(text)
    commands: tuple[Literal["hostnames", "hostlist", "hostlistsorted"], ...] = (
        "hostnames",
        "hostlist",
        "hostlistsorted",
    )
    for command in commands:
        try:
            result = show(command, text)
        except HostlistError:
            continue
        assert result.exit_code in (0, 1, 139)


@st.composite
def valid_expressions(draw: st.DrawFn) -> str:
    def bracket() -> str:
        elems = []
        for _ in range(draw(st.integers(1, 3))):
            width = draw(st.integers(1, 3))
            lo = draw(st.integers(0, 30))
            hi = lo + draw(st.integers(0, 12))
            single = draw(st.booleans())
            elems.append(f"{lo:0{width}d}" if single else f"{lo:0{width}d}-{hi:0{width}d}")
        return "[" + ",".join(elems) + "]"

    prefix = st.text(alphabet="abnode-.01", min_size=0, max_size=4)
    tokens = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.integers(0, 3))
        if kind == 0:
            tokens.append(draw(prefix) + draw(st.sampled_from(["", "1", "07", "10", "x"])) or "h")
        elif kind == 1:
            tokens.append(draw(prefix) + bracket())
        elif kind == 2:
            tokens.append(draw(prefix) + bracket() + draw(prefix) + bracket())
        else:
            tokens.append(draw(st.sampled_from(["login", "10.0.0.1", "n01", "n1", "a1b2"])))
    return ",".join(tokens)


@settings(max_examples=300, deadline=None)
@given(valid_expressions())
def test_round_trip(expr: str) -> None:
    hosts = expand(expr)
    assert count(expr) == len(hosts)
    ranged = compress(hosts)
    assert expand(ranged) == hosts
    # (compress(expr) may differ: "0[0-1]" keeps its prefix "0", the names "00,01" do not)
    ranged_sorted = compress_sorted(hosts)
    uniq_hosts = uniq(hosts)
    if any(_zero_padded(h) for h in hosts):
        # Slurm's sort may then rename hosts: compress_sorted("[00-00,0-10],[0-10]") is
        # "[0,0-1,...]", "00" becomes "0" (tests/differential checks it against scontrol).
        return
    assert Counter(expand(ranged_sorted)) == Counter(hosts)
    assert compress_sorted(ranged_sorted) == ranged_sorted
    assert sorted(uniq_hosts) == sorted(set(hosts))


def _zero_padded(host: str) -> bool:
    digits = re.search(r"[0-9]*$", host).group()  # type: ignore[union-attr]
    return len(digits) > 1 and digits[0] == "0"


# -- the shortcuts taken for speed agree with the literal port ----------------------------

NAME_BYTES = st.binary(max_size=8).map(  # C strings: no NUL; and no whitespace
    lambda b: bytes(c for c in b if c not in b"\0 \t\n\v\f\r")
)
DIGITY_BYTES = st.text(alphabet="a0119z.-\x80é", max_size=8).map(lambda s: s.encode())


def _sign(n: int) -> int:
    return (n > 0) - (n < 0)


@settings(max_examples=1000, deadline=None)
@given(st.one_of(NAME_BYTES, DIGITY_BYTES), st.one_of(NAME_BYTES, DIGITY_BYTES))
def test_natural_key_is_strnatcmp(a: bytes, b: bytes) -> None:
    slow = _sign(cstring._strnatcmp_slow(a, b))
    key = _sign(
        (cstring._natural_key(a) > cstring._natural_key(b))
        - (cstring._natural_key(a) < cstring._natural_key(b))
    )
    assert slow == key
    assert _sign(cstring._strnatcmp(a, b)) == slow


def _next_tok_literal(s: bytes) -> list[bytes]:
    """`_next_tok` of hostlist.c, step by step (strchr from `parse` every time)."""
    out: list[bytes] = []
    i, n, sep = 0, len(s), b"\t, "
    while True:
        while i < n and s[i] in sep:
            i += 1
        if i >= n:
            return out
        start = parse = cur = i
        while True:
            while cur < n and s[cur] not in sep:
                cur += 1
            found_pair = False
            while True:
                ob = s.find(b"[", parse)
                if ob < 0 or ob > cur:
                    break
                cb = s.find(b"]", parse)
                if cb < 0 or cb < ob:
                    break
                if cb < cur:
                    parse = cb + 1
                    continue
                cur = cb
                found_pair = True
                break
            if not found_pair:
                break
        out.append(s[start:cur])
        i = cur


@settings(max_examples=1000, deadline=None)
@given(st.text(alphabet="a1[], \t", max_size=20).map(str.encode))
def test_tokens_are_next_tok(s: bytes) -> None:
    assert list(parser._tokens(s)) == _next_tok_literal(s)


def _ranges(draw_list: list[tuple[str, int, int, int, bool]]) -> list[ranges._Range]:
    return [
        ranges._Range(
            p.encode(), 0 if single else lo, 0 if single else lo + span, 0 if single else w, single
        )
        for p, lo, span, w, single in draw_list
    ]


RANGE_SPECS = st.lists(
    st.tuples(
        st.sampled_from(["n", "n0", "m", "a1b", "x\r", "x", ""]),
        st.integers(0, 40),
        st.integers(0, 6),
        st.integers(0, 3),
        st.booleans(),
    ),
    max_size=30,
)


def _state(items: list[ranges._Range]) -> list[tuple[bytes, int, int, int, bool]]:
    return [(r.prefix, r.lo, r.hi, r.width, r.single) for r in items]


@settings(max_examples=500, deadline=None)
@given(RANGE_SPECS, st.booleans())
def test_fast_sort_is_glibc_msort(
    specs: list[tuple[str, int, int, int, bool]], uniform: bool
) -> None:
    if uniform:  # one width per prefix: the case the fast path takes
        widths: dict[str, int] = {}
        specs = [(p, lo, s, widths.setdefault(p, w), single) for p, lo, s, w, single in specs]
    fast = ranges._sorted_plainly(_ranges(specs))
    slow = msort(_ranges(specs), ranges._range_cmp)
    if fast is not None:
        assert _state(fast) == _state(slow)


def _coalesce_literal(items: list[ranges._Range]) -> list[ranges._Range]:
    """`hostlist_coalesce` + `hostlist_collapse` as Slurm writes them, one insert at a time."""
    hr = items
    i = len(hr) - 1
    while i > 0:
        new = rangelist._intersect(hr[i - 1], hr[i])
        if new is not None:
            hprev, hnext = hr[i - 1], hr[i]
            j = i
            if new.hi < hprev.hi:
                hnext.hi = hprev.hi
            hprev.hi = new.lo
            hnext.lo = new.hi
            freed = hprev.empty()
            if freed:
                del hr[i]
            while new.lo <= new.hi:
                one = ranges._Range(new.prefix, new.lo, new.lo, new.width, False)
                if new.lo > hprev.hi:
                    hr.insert(j, one.copy())
                    j += 1
                if new.lo < (new.lo if freed else hnext.lo):
                    hr.insert(j, one.copy())
                    j += 1
                new.lo += 1
            i = len(hr)
        i -= 1
    i = len(hr) - 1
    while i > 0:
        hprev, hnext = hr[i - 1], hr[i]
        if (
            hprev.hi == hnext.lo - 1
            and ranges._prefix_cmp(hprev, hnext) == 0
            and ranges._width_combine(hprev, hnext)
        ):
            hprev.hi = hnext.hi
            del hr[i]
        i -= 1
    return hr


@settings(max_examples=500, deadline=None)
@given(RANGE_SPECS)
def test_fast_coalesce_is_literal(specs: list[tuple[str, int, int, int, bool]]) -> None:
    literal = _coalesce_literal(msort(_ranges(specs), ranges._range_cmp))
    ours = rangelist._Hostlist()
    ours.ranges = msort(_ranges(specs), ranges._range_cmp)
    if len(ours.ranges) > 1:
        ours._coalesce()
        ours._collapse()
    assert _state(ours.ranges) == _state(literal)
