"""C string helpers as Slurm's hostlist.c uses them: `strtoul`, zero-padded numbers, the
C-locale `isdigit`/`isspace`, and `strnatcmp` (natural order, the compare of hostlist_sort)."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Final

from gateway.compat.hostlist.common import _DASH, _NINE, _PLUS, _SPACES, _ULONG_MAX, _ZERO


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
