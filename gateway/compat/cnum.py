"""C number parsing as Slurm's tools do it (glibc `strtol`, `sscanf("%d")`, int casts).

Slurm's parsers lean on C's lenient conversions: leading blanks and a sign are accepted,
parsing stops at the first non-digit and the caller inspects the rest. Reproducing that
leniency (not a stricter Python reading) is what makes Caldera accept and reject the same
strings as Slurm.
"""

from __future__ import annotations

__all__ = [
    "INT32_MAX",
    "INT64_MAX",
    "INT64_MIN",
    "c_isspace",
    "is_whitespace",
    "parse_uint32",
    "strtol",
    "strtoul",
    "to_int32",
    "to_uint16",
    "to_uint32",
]

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
UINT64_MAX = 2**64 - 1
_SPACE = frozenset(" \t\n\v\f\r")


def c_isspace(ch: str) -> bool:
    """`isspace()` in the C locale."""
    return ch in _SPACE


def is_whitespace(s: str) -> bool:
    """Slurm's `xstring_is_whitespace`: empty or only blanks."""
    return all(ch in _SPACE for ch in s)


def _scan(s: str, start: int) -> tuple[int, int, int]:
    """Skip blanks and a sign; return (sign, index of first digit, index after digits)."""
    i, n = start, len(s)
    while i < n and s[i] in _SPACE:
        i += 1
    sign = 1
    if i < n and s[i] in "+-":
        sign = -1 if s[i] == "-" else 1
        i += 1
    j = i
    while j < n and "0" <= s[j] <= "9":
        j += 1
    return sign, i, j


def strtol(s: str, start: int = 0) -> tuple[int, int]:
    """glibc `strtol(s + start, &end, 10)` on a 64-bit long.

    Returns (value, end). When no digits are found, end == start (C sets endptr to the
    input) and value is 0. Out-of-range values saturate at LONG_MIN/LONG_MAX.
    """
    sign, i, j = _scan(s, start)
    if j == i:
        return 0, start
    value = sign * int(s[i:j])
    if value > INT64_MAX:
        value = INT64_MAX
    elif value < INT64_MIN:
        value = INT64_MIN
    return value, j


def strtoul(s: str, start: int = 0) -> tuple[int, int]:
    """glibc `strtoul(s + start, &end, 10)` on a 64-bit unsigned long (negation wraps)."""
    sign, i, j = _scan(s, start)
    if j == i:
        return 0, start
    magnitude = int(s[i:j])
    if magnitude > UINT64_MAX:
        return UINT64_MAX, j
    return (magnitude if sign > 0 else (-magnitude) % 2**64), j


def parse_uint32(s: str) -> int | None:
    """Slurm's parse_uint32 (proc_args.c): the whole text as strtoll reads it, a number
    from 0 to below NO_VAL (0xFFFFFFFE); None for anything else."""
    value, end = strtol(s)
    return value if end == len(s) and 0 <= value < 0xFFFF_FFFE else None


def to_int32(value: int) -> int:
    """The result of casting a C integer to a 32-bit `int` (two's complement wrap)."""
    value &= 0xFFFF_FFFF
    return value - 2**32 if value > INT32_MAX else value


def to_uint32(value: int) -> int:
    """The result of casting to `uint32_t`."""
    return value & 0xFFFF_FFFF


def to_uint16(value: int) -> int:
    """The result of casting to `uint16_t`."""
    return value & 0xFFFF
