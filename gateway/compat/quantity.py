"""Counts and sizes as Slurm's clients read them: memory, node ranges, integers, signals.

Each function mirrors one C routine of Slurm 22.05 (named in its docstring), including its
leniency and its error text, so that `#SBATCH --mem=4GB` or `-N 2-` behave identically.
`SignalSpec` and the signal names live in `gateway.model.values`.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from gateway.compat.cnum import (
    INT64_MAX,
    INT64_MIN,
    is_whitespace,
    strtol,
    to_int32,
    to_uint16,
)
from gateway.compat.errors import CompatError
from gateway.model.values import SIGNAL_NAMES, SignalSpec

__all__ = [
    "MAIL_TYPES",
    "NodeCount",
    "mail_type_str",
    "mbytes_to_str",
    "parse_int",
    "parse_mail_type",
    "parse_node_count",
    "parse_signal",
    "signal_name_to_num",
    "str_to_mbytes",
]


def _ends_on_byte(rest: str) -> bool:
    return rest[1:] == "" or rest[1:] in ("B", "b")


@lru_cache(maxsize=4096)
def str_to_mbytes(arg: str) -> int | None:
    """`str_to_mbytes`: a size with optional K/M/G/T[B] suffix, in MiB (default unit MB).

    Returns None where Slurm returns NO_VAL64 (invalid).
    """
    value, end = strtol(arg)
    if end == 0 or value in (INT64_MAX, INT64_MIN) or value < 0:
        return None
    rest = arg[end:]
    if rest == "":
        return value
    unit = rest[0].upper()
    if unit not in "KMGT" or not _ends_on_byte(rest):
        return None
    if unit == "K":
        return (value + 1023) // 1024
    if unit == "G":
        return value * 1024
    if unit == "T":
        return value * 1024 * 1024
    return value


def mbytes_to_str(mbytes: int) -> str:
    """`mbytes_to_str`: the largest exact unit, without `M` for MiB (`4G`, `1500`)."""
    units = "MGTP"
    i = 0
    while i < len(units) - 1 and not (mbytes and mbytes % 1024):
        mbytes //= 1024
        i += 1
        if mbytes == 0:
            break
    return str(mbytes) if units[i] == "M" else f"{mbytes}{units[i]}"


def parse_int(name: str, val: str, positive: bool) -> int:
    """`parse_int`: a whole string as an int, or Slurm's error and exit status 1."""
    value, end = strtol(val)
    if end != len(val) or value < 0 or (positive and value <= 0):
        raise CompatError.error(f'Invalid numeric value "{val}" for {name}.', exit_code=1)
    if value == INT64_MAX:
        raise CompatError.error(f"Numeric argument ({value}) to big for {name}.", exit_code=1)
    return to_int32(value)


class NodeCount(NamedTuple):
    """`-N min[-max]`; max 0 means "no maximum given"."""

    min: int
    max: int


def _str_to_nodes(s: str) -> tuple[int, str]:
    value, end = strtol(s)
    if end == 0:
        return -1, s
    rest = s[end:]
    if rest[:1] in ("k", "K"):
        value *= 1024
        rest = rest[1:]
    if rest[:1] in ("m", "M"):
        value *= 1024 * 1024
        rest = rest[1:]
    return to_int32(value), rest


@lru_cache(maxsize=4096)
def parse_node_count(arg: str) -> NodeCount:
    """`verify_node_count`: a count or a min-max range (`-5` is read as 1-5, as Slurm does)."""
    dash = arg.find("-")
    if dash >= 0:
        min_str = arg[:dash]
        lo, rest = _str_to_nodes(min_str)
        if not is_whitespace(rest):
            raise CompatError.error(f'"{min_str}" is not a valid node count')
        lo = max(lo, 1) if lo < 0 else lo
        max_str = arg[dash + 1 :]
        hi, rest = _str_to_nodes(max_str)
        if not is_whitespace(rest):
            raise CompatError.error(f'"{max_str}" is not a valid node count')
    else:
        lo, rest = _str_to_nodes(arg)
        hi = lo
        if not is_whitespace(rest) or lo < 0:
            raise CompatError.error(f'"{arg}" is not a valid node count')
    if hi != 0 and hi < lo:
        raise CompatError.error(f"Maximum node count {hi} is less than minimum node count {lo}")
    return NodeCount(lo, hi)


# --- signals -------------------------------------------------------------------------


def signal_name_to_num(name: str) -> int:
    """`sig_name2num`: a number or a name with optional SIG prefix; 0 when unknown."""
    value, end = strtol(name)
    if end != 0:
        return to_int32(value) if is_whitespace(name[end:]) else 0
    s = name.lstrip(" \t\n\v\f\r")
    if s[:3].upper() == "SIG":
        s = s[3:]
    for sig_name, num in SIGNAL_NAMES:
        if s[: len(sig_name)].upper() == sig_name and is_whitespace(s[len(sig_name) :]):
            return num
    return 0


@lru_cache(maxsize=4096)
def parse_signal(arg: str) -> SignalSpec | None:
    """`get_signal_opts` as sbatch runs it; None where Slurm reports it invalid."""
    s = arg
    resv = batch = False
    if s[:1].upper() == "R":
        resv, s = True, s[1:]
    if s[:1].upper() == "B":
        batch, s = True, s[1:]
    if s[:1].upper() == "R":
        resv, s = True, s[1:]
    if s[:1] == ":":
        s = s[1:]
    at = s.find("@")
    num = to_uint16(signal_name_to_num(s if at < 0 else s[:at]))
    if num < 1:
        return None
    if at < 0:
        return SignalSpec(num, 60, batch, resv)
    value, end = strtol(s, at + 1)
    if end == at + 1:
        value = 0
    if value < 0 or value > 0xFFFF or end != len(s):
        return None
    return SignalSpec(num, value, batch, resv)


# --- mail types ----------------------------------------------------------------------

MAIL_TYPES: tuple[str, ...] = (
    "INVALID_DEPEND",
    "BEGIN",
    "END",
    "FAIL",
    "REQUEUE",
    "STAGE_OUT",
    "TIME_LIMIT",
    "TIME_LIMIT_90",
    "TIME_LIMIT_80",
    "TIME_LIMIT_50",
    "ARRAY_TASKS",
)
_MAIL_ALL = frozenset({"INVALID_DEPEND", "BEGIN", "END", "FAIL", "REQUEUE", "STAGE_OUT"})


@lru_cache(maxsize=4096)
def parse_mail_type(arg: str) -> frozenset[str] | None:
    """`parse_mail_type`: the set of mail events; None where Slurm says invalid.

    Unknown words are ignored as Slurm ignores them; NONE stops reading and yields an
    empty set.
    """
    result: set[str] = set()
    for tok in (t for t in arg.split(",") if t):
        word = tok.upper()
        if word == "NONE":
            return frozenset()
        if word == "ALL":
            result |= _MAIL_ALL
        elif word in MAIL_TYPES:
            result.add(word)
    return frozenset(result) if result else None


def mail_type_str(types: frozenset[str]) -> str:
    """`print_mail_type`: as `MailType=` in `scontrol show job` (`BEGIN,END`, `NONE`)."""
    if not types:
        return "NONE"
    order = (
        "ARRAY_TASKS",
        "INVALID_DEPEND",
        "BEGIN",
        "END",
        "FAIL",
        "REQUEUE",
        "STAGE_OUT",
        "TIME_LIMIT_50",
        "TIME_LIMIT_80",
        "TIME_LIMIT_90",
        "TIME_LIMIT",
    )
    return ",".join(t for t in order if t in types)
