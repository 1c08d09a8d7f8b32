"""Reading a hostlist expression as Slurm's `hostlist_create` does: tokens, bracket ranges,
prefix ranges (`rack[1-4]-n[1-2]`), and its diagnostics."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Final

from gateway.compat.hostlist.common import (
    _COMMA,
    _ULONG_MAX,
    MAX_PREFIX_CNT,
    MAX_RANGE,
    MAX_RANGES,
    _Fatal,
    _Hang,
)
from gateway.compat.hostlist.cstring import _fmt, _strtoul
from gateway.compat.hostlist.rangelist import _Hostlist
from gateway.compat.hostlist.ranges import _Range


def _tokens(s: bytes) -> Iterator[bytes]:
    """Split on tab, comma and space, except inside brackets (`_next_tok`)."""
    if b"[" not in s:
        yield from filter(None, _SEP_RUN.split(s))
        return
    n = len(s)
    i = 0
    while True:
        m = _NON_SEP.search(s, i)
        if m is None:
            return
        start = parse = cur = m.start()
        # The next '[' and ']' at or after `parse`, kept while `parse` has not passed them
        # (-1: none is left), so that long runs of brackets are not searched again and again.
        ob, cb = s.find(b"[", parse), s.find(b"]", parse)
        scanning = True
        while scanning:
            m = _SEP.search(s, cur)
            cur = n if m is None else m.start()
            while True:
                if 0 <= ob < parse:
                    ob = s.find(b"[", parse)
                if ob < 0 or ob > cur:
                    scanning = False
                    break
                if 0 <= cb < parse:
                    cb = s.find(b"]", parse)
                if cb < 0 or cb < ob:
                    scanning = False
                    break
                if cb < cur:
                    parse = cb + 1
                    continue
                cur = cb
                break
        yield s[start:cur]
        i = cur


_SEP: Final = re.compile(rb"[\t, ]")
_NON_SEP: Final = re.compile(rb"[^\t, ]")
_SEP_RUN: Final = re.compile(rb"[\t, ]+")


class _Parser:
    """One `hostlist_create` call: the hostlist and the error lines printed on the way."""

    def __init__(self) -> None:
        self.diags: list[bytes] = []

    def single_range(self, elem: bytes) -> tuple[int, int, int] | None:
        """`_parse_single_range`: (lo, hi, width) or None after an error line."""
        if b"x" in elem:
            return self._invalid(elem)
        dash = elem.find(b"-")
        if dash >= 0:
            lo_s, hi_s = elem[:dash], elem[dash + 1 :]
            if hi_s[:1] == b"-":
                return self._invalid(elem)
        else:
            lo_s, hi_s = elem, b""
        width = len(lo_s)
        lo, end = _strtoul(lo_s)
        if end == 0:
            return self._invalid(elem)
        if hi_s:
            hi, hend = _strtoul(hi_s)
            if hend == 0 or hend != len(hi_s):
                return self._invalid(elem)
        else:
            hi = lo
            if end != len(lo_s):
                return self._invalid(elem)
        if lo > hi:
            return self._invalid(elem)
        if (hi - lo + 1) & _ULONG_MAX > MAX_RANGE:
            self.diags.append(b"_parse_single_range: Too many hosts in range `%s'" % elem)
            return None
        return lo, hi, width

    def _invalid(self, elem: bytes) -> tuple[int, int, int] | None:
        self.diags.append(b"_parse_single_range: Invalid range: `%s'" % elem)
        return None

    def range_list(self, s: bytes) -> list[tuple[int, int, int]] | None:
        """`_parse_range_list`: the comma-separated ranges inside one pair of brackets."""
        out: list[tuple[int, int, int]] = []
        for k, elem in enumerate(s.split(b",")):
            if k == MAX_RANGES:
                raise _Fatal("_parse_range_list: Too many ranges, can't process entire list")
            rng = self.single_range(elem)
            if rng is None:
                return None
            out.append(rng)
        return out

    def push_range_list(
        self, hl: _Hostlist, prefix: bytes, ranges: list[tuple[int, int, int]]
    ) -> int:
        """`_push_range_list`: expand the ranges found in the prefix, right to left.

        Slurm recurses once per bracket of the prefix; this walks an explicit stack instead
        (a prefix may hold thousands of brackets). Like Slurm, a failure below the first
        level prints its error lines but is otherwise ignored (`MAX(rc, -1)` is `rc`).
        """
        top = self._frame(hl, prefix, ranges)
        if not isinstance(top, _Frame):
            return top
        stack = [top]
        while stack:
            frame = stack[-1]
            nxt = frame.next_prefix()
            if isinstance(nxt, int):
                stack.pop()
                if not stack:
                    return nxt
                continue
            child = self._frame(hl, nxt, ranges) if frame.recurse else None
            if frame.recurse:
                if isinstance(child, _Frame):
                    stack.append(child)
            else:
                for lo, hi, width in ranges:
                    hl.push_range(_Range(nxt, lo, hi, width, False))
        return 0

    def _frame(
        self, hl: _Hostlist, prefix: bytes, ranges: list[tuple[int, int, int]]
    ) -> _Frame | int:
        p = prefix.rfind(b"[")
        q = prefix.rfind(b"]", p) if p >= 0 else -1
        if q < 0:
            for lo, hi, width in ranges:
                hl.push_range(_Range(prefix, lo, hi, width, False))
            return 0
        before = prefix[:p]
        parsed = self.range_list(prefix[p + 1 : q])
        if parsed is None:
            return -1
        return _Frame(before, prefix[q + 1 :], parsed, b"[" in before)

    def create(self, expr: bytes) -> _Hostlist | None:
        """`hostlist_create`: the hostlist, or None when scontrol says `Invalid hostlist`."""
        hl = _Hostlist()
        for tok in _tokens(expr):
            p = tok.rfind(b"[")
            if p < 0:
                hl.push_host(tok)
                continue
            prefix, rest = tok[:p], tok[p + 1 :]
            q = rest.find(b"]")
            if q < 0:
                # No closing bracket: Slurm keeps the text before '[' and adds one.
                hl.push_host(prefix + b"]" if prefix else rest)
                continue
            if q + 1 < len(rest) and rest[q + 1] != _COMMA:
                return None
            ranges = self.range_list(rest[:q])
            if ranges is None:
                return None
            if self.push_range_list(hl, prefix, ranges):
                return None
        return hl


class _Frame:
    """One level of `_push_range_list`: the values of the last bracket of a prefix."""

    __slots__ = ("after", "before", "cnt", "hi", "j", "ranges", "recurse", "ri", "width")

    def __init__(
        self, before: bytes, after: bytes, ranges: list[tuple[int, int, int]], recurse: bool
    ) -> None:
        self.before = before
        self.after = after
        self.ranges = ranges
        self.recurse = recurse
        self.ri = -1
        self.j = 0
        self.hi = -1
        self.width = 0
        self.cnt = 0

    def next_prefix(self) -> bytes | int:
        """The next prefix to expand, or the level's return code when it is done."""
        while self.j > self.hi:
            self.ri += 1
            if self.ri >= len(self.ranges):
                return 0
            lo, hi, width = self.ranges[self.ri]
            self.cnt = (self.cnt + ((hi - lo + 1) & _ULONG_MAX)) & _ULONG_MAX
            if self.cnt > MAX_PREFIX_CNT:
                return -1
            if hi == _ULONG_MAX:
                raise _Hang("a prefix range ending at 2**64-1 never ends in Slurm")
            self.j, self.hi, self.width = lo, hi, width
        j = self.j
        self.j += 1
        return self.before + _fmt(j, self.width) + self.after
