"""The hostlist itself: an ordered list of host ranges with Slurm's push, coalesce, uniq
and formatting."""

from __future__ import annotations

from gateway.compat.hostlist.common import _MAX_OVERLAP, _ULONG_MAX, _Hang
from gateway.compat.hostlist.cstring import (
    _fmt,
    _i32,
    _strtoul,
)
from gateway.compat.hostlist.ranges import (
    _qsort,
    _Range,
    _same_prefix,
    _width_combine,
    _within_range,
)


class _Hostlist:
    __slots__ = ("nhosts", "ranges")

    def __init__(self) -> None:
        self.ranges: list[_Range] = []
        self.nhosts = 0

    def push_range(self, hr: _Range) -> None:
        """`hostlist_push_range`: append, merging into the tail when it continues it.

        `hr` must be a fresh range: it is kept, not copied.
        """
        ranges = self.ranges
        if ranges:
            tail = ranges[-1]
            if (
                tail.hi == (hr.lo - 1) & _ULONG_MAX
                and _same_prefix(tail, hr)
                and _width_combine(tail, hr)
            ):
                tail.hi = hr.hi
            else:
                ranges.append(hr)
        else:
            ranges.append(hr)
        self.nhosts = _i32(self.nhosts + hr.count())

    def push_host(self, name: bytes) -> None:
        """`hostlist_push_host`: one name, split into prefix and numeric suffix."""
        cut = len(name.rstrip(b"0123456789"))
        if cut == len(name):
            self.push_range(_Range(name, 0, 0, 0, True))
            return
        suffix = name[cut:]
        num = int(suffix) if len(suffix) <= 19 else _strtoul(suffix)[0]
        self.push_range(_Range(name[:cut], num, num, len(suffix), False))

    # -- hostlist_sort -------------------------------------------------------------

    def sort(self) -> None:
        if len(self.ranges) <= 1:
            return
        self.ranges = _qsort(self.ranges)
        self._coalesce()
        self._collapse()

    def _coalesce(self) -> None:
        """`hostlist_coalesce`: split overlapping neighbours, keeping every duplicate.

        Slurm inserts the overlap one host at a time and rescans from the end after each
        overlap; this splices the inserted hosts in at once and rescans only from the first
        pair that changed (the pairs above it were checked and nothing touched them: a check
        that finds no overlap changes nothing).
        """
        hr = self.ranges
        i = len(hr) - 1
        while i > 0:
            new = _intersect(hr[i - 1], hr[i])
            if new is not None:
                hprev, hnext = hr[i - 1], hr[i]
                if new.hi < hprev.hi:
                    hnext.hi = hprev.hi
                hprev.hi = new.lo
                hnext.lo = new.hi
                # Slurm then deletes the range at i, which is hnext, not the empty hprev, and
                # goes on reading hnext->lo from freed memory. glibc gives that memory to the
                # one-host range made for each number, so hnext->lo reads as that number and
                # `num < hnext->lo` never holds.
                freed = hprev.empty()
                if freed:
                    del hr[i]
                if new.hi == _ULONG_MAX:
                    raise _Hang(
                        "hostlist_coalesce never ends on a range ending at 2**64-1 "
                        "(Slurm inserts hosts until malloc fails)"
                    )
                if new.hi - new.lo >= _MAX_OVERLAP:
                    raise _Hang(
                        f"hostlist_coalesce would insert {new.hi - new.lo + 1} one-host ranges "
                        "one by one: Slurm runs for hours or out of memory"
                    )
                inserted: list[_Range] = []
                for num in range(new.lo, new.hi + 1):
                    if num > hprev.hi:
                        inserted.append(_Range(new.prefix, num, num, new.width, False))
                    if num < hnext.lo and not freed:
                        inserted.append(_Range(new.prefix, num, num, new.width, False))
                hr[i:i] = inserted
                i = min(len(hr), i + len(inserted) + 2)
            i -= 1

    def _collapse(self) -> None:
        """`hostlist_collapse`: from the end, fold each range into a predecessor it continues."""
        hr = self.ranges
        if not hr:
            return
        kept: list[_Range] = []
        cur = hr[-1]
        for hprev in reversed(hr[:-1]):
            if (
                hprev.hi == (cur.lo - 1) & _ULONG_MAX
                and _same_prefix(hprev, cur)
                and _width_combine(hprev, cur)
            ):
                hprev.hi = cur.hi
            else:
                kept.append(cur)
            cur = hprev
        kept.append(cur)
        kept.reverse()
        self.ranges = kept

    # -- hostlist_uniq -------------------------------------------------------------

    def uniq(self) -> None:
        """`hostlist_uniq`: sort, then merge each range into the previous one it touches."""
        if len(self.ranges) <= 1:
            return
        hr = _qsort(self.ranges)
        kept = [hr[0]]
        for r in hr[1:]:
            ndup = _join(kept[-1], r)
            if ndup >= 0:
                self.nhosts = _i32(self.nhosts - ndup)
            else:
                kept.append(r)
        self.ranges = kept

    # -- output --------------------------------------------------------------------

    def shift_all(self, handler: str) -> list[str] | None:
        """`hostlist_shift` until it returns NULL, as `scontrol show hostnames` prints.

        None when scontrol would crash (it reads past the last range).
        """
        out: list[str] = []
        ranges = [r.copy() for r in self.ranges]
        nhosts = self.nhosts
        idx = 0
        while nhosts > 0:
            if idx >= len(ranges):
                return None
            hr = ranges[idx]
            if not hr.single and hr.lo <= hr.hi != _ULONG_MAX:
                # The usual case, in bulk: every number lo..hi (or until nhosts runs out).
                take = min(hr.hi - hr.lo + 1, nhosts)
                out.extend(_format_hosts(hr, hr.lo, hr.lo + take, handler))
                hr.lo += take
                nhosts -= take
                if hr.lo > hr.hi:
                    idx += 1
                continue
            host: bytes | None
            if hr.single:
                host = hr.prefix
                hr.lo = (hr.lo + 1) & _ULONG_MAX
            elif hr.count() > 0:
                host = _host_bytes(hr, hr.lo)
                hr.lo = (hr.lo + 1) & _ULONG_MAX
            else:
                host = None
            nhosts = _i32(nhosts - 1)
            if hr.empty():
                idx += 1
            if host is None:
                break
            out.append(host.decode("utf-8", handler))
        return out

    def ranged_string(self) -> bytes:
        """`hostlist_ranged_string` (brackets on, one dimension, no Cray zero-padding)."""
        hr = self.ranges
        n = len(hr)
        parts: list[bytes] = []
        i = 0
        while i < n:
            first = hr[i]
            bracket = first.count() > 1 or _within_range(first, hr[i + 1] if i + 1 < n else None)
            nums: list[bytes] = []
            while True:
                r = hr[i]
                if not r.single:
                    num = _fmt(r.lo, r.width)
                    if r.lo < r.hi:
                        num += b"-" + _fmt(r.hi, r.width)
                    nums.append(num)
                i += 1
                if not (i < n and _within_range(hr[i], hr[i - 1])):
                    break
            body = b",".join(nums)
            parts.append(first.prefix + (b"[" + body + b"]" if bracket else body))
        return b",".join(parts)


def _host_bytes(hr: _Range, num: int) -> bytes:
    """One host, cut as `snprintf` into scontrol's buffer of len(prefix)+width+16 cuts it."""
    host = hr.prefix + _fmt(num, hr.width)
    limit = len(hr.prefix) + hr.width + 15
    return host if len(host) <= limit else host[:limit]


def _format_hosts(hr: _Range, start: int, stop: int, handler: str) -> list[str]:
    prefix = hr.prefix.decode("utf-8", handler)
    width = hr.width
    if len(str(stop - 1)) <= width + 15:
        if width <= 1:
            return [f"{prefix}{k}" for k in range(start, stop)]
        return [f"{prefix}{k:0{width}d}" for k in range(start, stop)]
    return [_host_bytes(hr, k).decode("utf-8", handler) for k in range(start, stop)]


def _intersect(h1: _Range, h2: _Range) -> _Range | None:
    if h1.single or h2.single:
        return None
    if h1.hi > h2.lo and _same_prefix(h1, h2) and _width_combine(h1, h2):
        new = h1.copy()
        new.lo = h2.lo
        new.hi = h2.hi if h2.hi < h1.hi else h1.hi
        return new
    return None


def _join(h1: _Range, h2: _Range) -> int:
    """`hostrange_join`: merge h2 into h1; the number of duplicates, or -1 if apart."""
    duplicated = -1
    if _same_prefix(h1, h2) and _width_combine(h1, h2):
        if h1.single and h2.single:
            duplicated = 1
        elif h1.hi == (h2.lo - 1) & _ULONG_MAX:
            h1.hi = h2.hi
            duplicated = 0
        elif h1.hi >= h2.lo:
            if h1.hi < h2.hi:
                duplicated = _i32(h1.hi - h2.lo + 1)
                h1.hi = h2.hi
            else:
                duplicated = _i32(h2.count())
    return duplicated
