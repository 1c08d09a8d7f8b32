"""One host range (`prefix[lo-hi]` with a zero-padding width) and Slurm's compares and sorts
of them (glibc's merge sort replayed compare by compare)."""

from __future__ import annotations

from gateway.compat.glibc_sort import msort
from gateway.compat.hostlist.common import _ULONG_MAX
from gateway.compat.hostlist.cstring import (
    _has_space,
    _i32,
    _NatKey,
    _natural_key,
    _strnat_equal,
    _strnatcmp,
    _zero_padded,
)


class _Range:
    """`hostrange_t`: `prefix` + numbers `lo`..`hi` printed `%0*lu` at `width`, or one host."""

    __slots__ = ("hi", "lo", "prefix", "single", "width")

    def __init__(self, prefix: bytes, lo: int, hi: int, width: int, single: bool) -> None:
        self.prefix = prefix
        self.lo = lo
        self.hi = hi
        self.width = width
        self.single = single

    def copy(self) -> _Range:
        return _Range(self.prefix, self.lo, self.hi, self.width, self.single)

    def count(self) -> int:
        return 1 if self.single else (self.hi - self.lo + 1) & _ULONG_MAX

    def empty(self) -> bool:
        return self.hi < self.lo or self.hi == _ULONG_MAX


def _width_combine(h0: _Range, h1: _Range) -> bool:
    """`hostrange_width_combine`: may change one of the two widths, as Slurm does."""
    if h0.width == h1.width:
        return True
    npad = _zero_padded(h0.lo, h0.width)
    nmpad = _zero_padded(h0.lo, h1.width)
    mpad = _zero_padded(h1.lo, h1.width)
    mnpad = _zero_padded(h1.lo, h0.width)
    if npad != nmpad and mpad != mnpad:
        return False
    if npad != nmpad:
        h1.width = h0.width
    else:
        h0.width = h1.width
    return True


def _prefix_cmp(h1: _Range, h2: _Range | None) -> int:
    if h2 is None:
        return -1
    result = _strnatcmp(h1.prefix, h2.prefix)
    return result if result else int(h2.single) - int(h1.single)


def _same_prefix(h1: _Range, h2: _Range) -> bool:
    """`hostrange_prefix_cmp(h1, h2) == 0`."""
    return h1.single == h2.single and _strnat_equal(h1.prefix, h2.prefix)


def _within_range(h1: _Range, h2: _Range | None) -> bool:
    if h2 is None or h1.single or h2.single:
        return False
    return _strnat_equal(h1.prefix, h2.prefix)


def _range_cmp(h1: _Range, h2: _Range) -> int:
    result = _prefix_cmp(h1, h2)
    if result == 0:
        result = _i32(h1.lo - h2.lo) if _width_combine(h1, h2) else h1.width - h2.width
    return result


def _sorted_plainly(ranges: list[_Range]) -> list[_Range] | None:
    """Sort with `sorted()` when that provably gives glibc's answer, else None.

    It does when the compare is a consistent order that changes no width: no prefix holds
    whitespace (see `_natural_key`), the ranges of one prefix all have the same width (so
    `_width_combine` changes nothing) and numbers below 2**31 (so `lo - lo` fits an int).
    Then merge sort and `sorted()`, both stable, agree.
    """
    widths: dict[tuple[bytes, bool], int] = {}
    for r in ranges:
        if r.lo >= 1 << 31:
            return None
        w = widths.setdefault((r.prefix, r.single), r.width)
        if w != r.width:
            return None
    keys: dict[bytes, _NatKey] = {}
    for prefix, _ in widths:
        if prefix not in keys:
            if _has_space(prefix):
                return None
            keys[prefix] = _natural_key(prefix)
    return sorted(ranges, key=lambda r: (keys[r.prefix], not r.single, r.lo))


def _qsort(ranges: list[_Range]) -> list[_Range]:
    fast = _sorted_plainly(ranges)
    return fast if fast is not None else msort(ranges, _range_cmp)
