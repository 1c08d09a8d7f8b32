"""Slurm 22.05 hostlist expressions, as `scontrol show hostnames|hostlist|hostlistsorted` see them.

A port of the behaviour of Slurm's `src/common/hostlist.c` (one-dimensional clusters, not
Cray) and of the three `scontrol show` commands built on it:

* `expand("rack[1-2]-node[01-02]")` lists every host in order, duplicates kept, like
  `scontrol show hostnames`;
* `compress(["n1", "n2", "n4"])` gives the ranged string `n[1-2,4]` like
  `scontrol show hostlist n1,n2,n4` (input order kept, only neighbours merge);
* `compress_sorted(...)` is `scontrol show hostlistsorted` (Slurm's `hostlist_sort`);
* `uniq(...)` is `hostlist_uniq` (sort, then drop duplicates), `count(...)` is
  `hostlist_count`;
* `show(command, arg)` reproduces the whole command: stdout, stderr and exit status.

Slurm works on C strings, so this module works on the UTF-8 bytes of its input
(`surrogateescape`, as Python passes arguments to a program): widths are byte counts, the
input stops at a NUL, `isdigit`/`isspace` are those of the C locale, numbers are C
`unsigned long` (64 bits, `strtoul` saturates) and host counts are C `int`. Sorting is
glibc 2.36's `qsort` (a merge sort) called with Slurm's compare, which is not a strict
order and may change a range's zero-padding width as it compares; `compress_sorted` and
`uniq` replay it compare by compare where a plain `sorted()` could differ. Slurm's own
oddities are kept on purpose; `show` lists the known ones.

Where scontrol itself misbehaves rather than answers, `HostlistError` is raised instead: a
prefix range ending at 2**64-1, or overlapping ranges ending there under a sort (Slurm
loops forever), and a host range ending at 2**64-1 under `show hostnames` (scontrol dies
of SIGSEGV, exit status 139).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Final, Literal

from gateway.compat.errors import Diagnostic, Level, SpecError

__all__ = [
    "EXIT_SEGFAULT",
    "MAX_PREFIX_CNT",
    "MAX_RANGE",
    "MAX_RANGES",
    "HostlistError",
    "ShowResult",
    "compress",
    "compress_sorted",
    "count",
    "expand",
    "show",
    "uniq",
]

MAX_RANGE: Final = 64 * 1024
"""Most hosts one bracketed range (`lo-hi`) may hold; more is `Too many hosts in range`."""
MAX_RANGES: Final = 256 * 1024
"""Most comma-separated ranges inside one pair of brackets; more is a fatal error."""
MAX_PREFIX_CNT: Final = 64 * 1024
"""Most values a range in a prefix (`rack[1-4]-n[1-2]`) may expand to, per bracket."""

EXIT_SEGFAULT: Final = 128 + 11
"""The shell's exit status for scontrol dying of SIGSEGV."""

_ULONG_MAX: Final = (1 << 64) - 1
_SPACES: Final = frozenset(b" \t\n\v\f\r")
_COMMA: Final = ord(",")
_ZERO: Final = ord("0")
_NINE: Final = ord("9")
_DASH: Final = ord("-")
_PLUS: Final = ord("+")


class HostlistError(SpecError):
    """A hostlist expression that scontrol rejects (or that crashes or hangs it).

    `lines` are scontrol's stderr lines; `render()` prints them as scontrol does
    (`scontrol: error: ...` then `Invalid hostlist: <expr>`). `exit_code` is scontrol's exit
    status for the command that raised it: 1 for `show hostlist[sorted]`, but 0 for
    `show hostnames`, which reports the error and still exits 0. `reason` says in words
    what went wrong when scontrol prints nothing useful (crash, endless loop).
    """

    def __init__(self, *lines: Diagnostic, exit_code: int = 1, reason: str = "") -> None:
        self.reason = reason
        super().__init__(*lines, exit_code=exit_code)

    @property
    def message(self) -> str:
        """The stderr lines as one text (no program prefix), or the reason if none."""
        text = "\n".join(d.text for d in self.lines)
        return text or self.reason

    def render(self, prog: str = "scontrol") -> str:
        """Every stderr line as `prog` prints it, newline-terminated (`{prog}` is not expanded)."""
        return "".join(
            (d.text if d.level is Level.RAW else d.render(prog)) + "\n" for d in self.lines
        )


@dataclass(frozen=True, slots=True)
class ShowResult:
    """What `scontrol show <command> <arg>` prints and returns."""

    stdout: str
    stderr: str
    exit_code: int


# ---------------------------------------------------------------------------------------
# C helpers


def _to_bytes(text: str) -> tuple[bytes, str]:
    """`text` as the C string scontrol would see, and the codec error handler used."""
    try:
        raw = text.encode("utf-8", "surrogateescape")
        handler = "surrogateescape"
    except UnicodeEncodeError:  # lone surrogates no OS argument can hold
        raw = text.encode("utf-8", "surrogatepass")
        handler = "surrogatepass"
    nul = raw.find(0)
    return (raw if nul < 0 else raw[:nul]), handler


def _i32(value: int) -> int:
    """C conversion of an integer to `int` (two's complement wrap)."""
    value &= 0xFFFF_FFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def _strtoul(s: bytes, pos: int = 0) -> tuple[int, int]:
    """glibc `strtoul(s + pos, &end, 10)`: (value, end); end == pos when nothing converted."""
    n = len(s)
    i = pos
    while i < n and s[i] in _SPACES:
        i += 1
    negative = False
    if i < n and (s[i] == _DASH or s[i] == _PLUS):
        negative = s[i] == _DASH
        i += 1
    j = i
    while j < n and _ZERO <= s[j] <= _NINE:
        j += 1
    if j == i:
        return 0, pos
    digits = s[i:j].lstrip(b"0")
    if len(digits) > 20:
        return _ULONG_MAX, j
    value = int(digits) if digits else 0
    if value > _ULONG_MAX:
        return _ULONG_MAX, j
    if negative:
        value = -value & _ULONG_MAX
    return value, j


def _fmt(value: int, width: int) -> bytes:
    """`%0*lu`."""
    return b"%0*d" % (width, value)


def _zero_padded(num: int, width: int) -> int:
    """How many zeros `%0*lu` puts before `num` at `width`."""
    n = len(str(num))
    return width - n if width > n else 0


def _isdigit(c: int) -> bool:
    return _ZERO <= c <= _NINE


def _signed_char(c: int) -> int:
    return c - 256 if c >= 128 else c


def _compare_right(a: bytes, ai: int, b: bytes, bi: int) -> int:
    bias = 0
    la, lb = len(a), len(b)
    while True:
        da = ai < la and _isdigit(a[ai])
        db = bi < lb and _isdigit(b[bi])
        if not da and not db:
            return bias
        if not da:
            return -1
        if not db:
            return 1
        if a[ai] < b[bi]:
            if not bias:
                bias = -1
        elif a[ai] > b[bi] and not bias:
            bias = 1
        ai += 1
        bi += 1


def _compare_left(a: bytes, ai: int, b: bytes, bi: int) -> int:
    la, lb = len(a), len(b)
    while True:
        da = ai < la and _isdigit(a[ai])
        db = bi < lb and _isdigit(b[bi])
        if not da and not db:
            return 0
        if not da:
            return -1
        if not db:
            return 1
        if a[ai] < b[bi]:
            return -1
        if a[ai] > b[bi]:
            return 1
        ai += 1
        bi += 1


@lru_cache(maxsize=1 << 16)
def _strnatcmp_slow(a: bytes, b: bytes) -> int:
    la, lb = len(a), len(b)
    ai = bi = 0
    while True:
        ca = a[ai] if ai < la else 0
        cb = b[bi] if bi < lb else 0
        while ca in _SPACES:
            ai += 1
            ca = a[ai] if ai < la else 0
        while cb in _SPACES:
            bi += 1
            cb = b[bi] if bi < lb else 0
        if _isdigit(ca) and _isdigit(cb):
            if ca == _ZERO or cb == _ZERO:
                result = _compare_left(a, ai, b, bi)
            else:
                result = _compare_right(a, ai, b, bi)
            if result:
                return result
        if not ca and not cb:
            return 0
        sa, sb = _signed_char(ca), _signed_char(cb)
        if sa < sb:
            return -1
        if sa > sb:
            return 1
        ai += 1
        bi += 1


def _strnatcmp(a: bytes, b: bytes) -> int:
    """Martin Pool's natural string compare as Slurm ships it (plain `char`, C locale)."""
    if a == b:
        return 0
    if _has_space(a) or _has_space(b):
        return _strnatcmp_slow(a, b)
    ka, kb = _natural_key(a), _natural_key(b)
    return -1 if ka < kb else 1


def _strnat_equal(a: bytes, b: bytes) -> bool:
    """`strnatcmp(a, b) == 0`: only equal strings, unless whitespace is skipped."""
    if a == b:
        return True
    if _has_space(a) or _has_space(b):
        return _strnatcmp_slow(a, b) == 0
    return False


def _has_space(s: bytes) -> bool:
    return _SPACE_RE.search(s) is not None


_SPACE_RE: Final = re.compile(rb"[ \t\n\v\f\r]")
_DIGIT_RUNS: Final = re.compile(rb"([0-9]+)")
_AS_SIGNED: Final = bytes(b ^ 0x80 for b in range(256))
_DIGIT_SLOT: Final = bytes([_ZERO ^ 0x80])
_END_SLOT: Final = b"\x80"  # NUL as a signed char, after translation

_NatKey = tuple[bytes | tuple[int, int, bytes], ...]


@lru_cache(maxsize=1 << 16)
def _natural_key(prefix: bytes) -> _NatKey:
    """A sort key ordering strings without whitespace exactly as `strnatcmp` does.

    Without whitespace `strnatcmp` walks both strings in step, so it compares them as
    alternating text and digit runs. Text compares byte by byte as signed chars (bytes
    translated so that unsigned order is signed order), followed by what comes next: a
    digit (a run) or the end of the string (a NUL). Runs led by `0` compare as text and
    sort before the others, which compare by value (length, then digits).
    """
    parts = _DIGIT_RUNS.split(prefix)
    key: list[bytes | tuple[int, int, bytes]] = []
    last = len(parts) - 1
    for k in range(0, last, 2):
        key.append(parts[k].translate(_AS_SIGNED) + _DIGIT_SLOT)
        run = parts[k + 1]
        key.append((0, 0, run) if run[0] == _ZERO else (1, len(run), run))
    key.append(parts[last].translate(_AS_SIGNED) + _END_SLOT)
    return tuple(key)


# ---------------------------------------------------------------------------------------
# Host ranges


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


def _msort(items: list[_Range]) -> list[_Range]:
    """glibc 2.36 `qsort` (a top-down merge sort): the same compare calls in the same order.

    The order matters: Slurm's compare function is not a strict order and changes widths.
    """
    n = len(items)
    if n <= 1:
        return items
    n1 = n // 2
    left = _msort(items[:n1])
    right = _msort(items[n1:])
    out: list[_Range] = []
    i = j = 0
    n2 = n - n1
    while i < n1 and j < n2:
        if _range_cmp(left[i], right[j]) <= 0:
            out.append(left[i])
            i += 1
        else:
            out.append(right[j])
            j += 1
    out.extend(left[i:])
    out.extend(right[j:])
    return out


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
    return fast if fast is not None else _msort(ranges)


# ---------------------------------------------------------------------------------------
# The hostlist


class _Hang(Exception):
    """Slurm would loop forever (or for hours, until it runs out of memory) on this input."""


_MAX_OVERLAP: Final = 1 << 20
"""Overlaps beyond this many hosts under `hostlist_sort` make scontrol insert that many
ranges into its array one at a time (quadratic): hours of work or `malloc failed`."""


class _Fatal(Exception):
    """Slurm calls fatal(): message, exit status 1."""


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


# ---------------------------------------------------------------------------------------
# Parsing


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


# ---------------------------------------------------------------------------------------
# Public API


def _join_hosts(hosts: str | Iterable[str]) -> str:
    return hosts if isinstance(hosts, str) else ",".join(hosts)


def _build(expr: str, exit_code: int) -> tuple[_Hostlist, list[Diagnostic], str]:
    """Parse like scontrol; raise `HostlistError` where scontrol prints `Invalid hostlist`."""
    raw, handler = _to_bytes(expr)
    parser = _Parser()
    try:
        hl = parser.create(raw)
    except _Fatal as exc:
        lines = _diagnostics(parser.diags, handler)
        raise HostlistError(*lines, Diagnostic(Level.FATAL, str(exc)), exit_code=1) from None
    except _Hang as exc:
        lines = _diagnostics(parser.diags, handler)
        raise HostlistError(*lines, exit_code=exit_code, reason=str(exc)) from None
    diags = _diagnostics(parser.diags, handler)
    if hl is None:
        text = "Invalid hostlist: " + raw.decode("utf-8", handler)
        raise HostlistError(*diags, Diagnostic(Level.RAW, text), exit_code=exit_code)
    return hl, diags, handler


def _diagnostics(lines: list[bytes], handler: str) -> list[Diagnostic]:
    return [Diagnostic(Level.ERROR, line.decode("utf-8", handler)) for line in lines]


def _shift_all(hl: _Hostlist, diags: list[Diagnostic], handler: str, exit_code: int) -> list[str]:
    hosts = hl.shift_all(handler)
    if hosts is None:
        raise HostlistError(
            *diags,
            exit_code=exit_code,
            reason="scontrol crashes (SIGSEGV): a range ending at 2**64-1 miscounts its hosts",
        )
    return hosts


def _sort(hl: _Hostlist, diags: list[Diagnostic]) -> None:
    try:
        hl.sort()
    except _Hang as exc:
        raise HostlistError(*diags, exit_code=1, reason=str(exc)) from None


def expand(expr: str) -> list[str]:
    """Every host of `expr` in order, duplicates kept: `scontrol show hostnames <expr>`.

    Raises `HostlistError` where scontrol prints `Invalid hostlist` (its `exit_code` is 0,
    as scontrol's), or would crash (139) or loop forever.
    """
    hl, diags, handler = _build(expr, 0)
    return _shift_all(hl, diags, handler, EXIT_SEGFAULT)


def compress(hosts: str | Iterable[str]) -> str:
    """The ranged string of `hosts` in input order: `scontrol show hostlist a,b,c`.

    `hosts` is joined with commas and read as one hostlist expression, so its items may be
    expressions themselves (`["n[1-3]", "n5"]` gives `n[1-3,5]`); a plain `str` is taken as
    the expression itself. Only neighbouring ranges merge: `n3,n1,n2` gives `n[3,1-2]`.
    Raises `HostlistError` (exit status 1) where scontrol prints `Invalid hostlist`.
    """
    hl, _, handler = _build(_join_hosts(hosts), 1)
    return hl.ranged_string().decode("utf-8", handler)


def compress_sorted(hosts: str | Iterable[str]) -> str:
    """`scontrol show hostlistsorted`: Slurm's `hostlist_sort`, then the ranged string.

    Slurm's sort is natural order by prefix, then by number; it does *not* drop duplicates:
    `n1,n1,n2` gives `n[1,1-2]`, overlapping ranges are split (`n[1-5],n[3-8]` gives
    `n[1-3,3-4,4-5,5-8]`). Use `compress_sorted(uniq(...))` for a duplicate-free string.
    """
    hl, diags, handler = _build(_join_hosts(hosts), 1)
    _sort(hl, diags)
    return hl.ranged_string().decode("utf-8", handler)


def uniq(hosts: str | Iterable[str]) -> list[str]:
    """`hostlist_uniq`: the hosts sorted as Slurm sorts them, each once."""
    hl, diags, handler = _build(_join_hosts(hosts), 1)
    hl.uniq()
    return _shift_all(hl, diags, handler, 1)


def count(expr: str) -> int:
    """`hostlist_count` after `hostlist_create`: how many hosts `expr` holds (a C int)."""
    hl, _, _ = _build(expr, 1)
    return hl.nhosts


def show(command: Literal["hostnames", "hostlist", "hostlistsorted"], arg: str) -> ShowResult:
    """What `scontrol show <command> <arg>` prints and returns, byte for byte.

    `arg` is always read as an expression (scontrol's `show hostlist /path` reads a file;
    this does no IO). Behaviour kept from scontrol that may surprise:

    * `show hostnames` exits 0 even after `Invalid hostlist: ...`;
    * errors in a range of a prefix (`a[x]b[1-2]c[3]`) are printed once per prefix value
      but the expression is still accepted (with those hosts left out);
    * nothing may follow the last `]`: `n[1-2]x` is invalid, `n[1-2]x[1]` is not;
    * a token with `[` and no `]` keeps its prefix and gains a `]`: `n[1-3` is host `n]`;
    * a range's width is the byte length of its low bound as written, so `n[ 1-3]`,
      `n[+1-3]` and `n[1a-3]` all give `n01,n02,n03`;
    * numbers beyond 2**64-1 saturate: `n99999999999999999999999` is
      `n00018446744073709551615`;
    * `hostlistsorted` keeps duplicates and splits overlaps (`n[1-5],n[3-8]` gives
      `n[1-3,3-4,4-5,5-8]`), and its compare may rename hosts of mixed zero-padding
      (`[00-00,0-10],[0-10]` gives `[0,0-1,1-2,...]`: `00` became `0`).
    """
    exit_code = 0 if command == "hostnames" else 1
    try:
        hl, diags, handler = _build(arg, exit_code)
        if command == "hostnames":
            hosts = _shift_all(hl, diags, handler, EXIT_SEGFAULT)
            stdout = "".join(h + "\n" for h in hosts)
        else:
            if command == "hostlistsorted":
                _sort(hl, diags)
            stdout = hl.ranged_string().decode("utf-8", handler) + "\n"
    except HostlistError as exc:
        if exc.reason and exc.exit_code != EXIT_SEGFAULT:
            raise
        return ShowResult("", exc.render(), exc.exit_code)
    stderr = HostlistError(*diags).render() if diags else ""
    return ShowResult(stdout, stderr, 0)
