"""Value parsers and printers of sacctmgr, as `src/sacctmgr/common.c` and slurmdb's TRES
helpers do them: integers with `-1` meaning "clear", times in minutes, TRES lists.

Every parser raises `SacctmgrError` carrying the message sacctmgr prints. Where sacctmgr
itself accepts nonsense silently (a negative limit other than -1 becomes NONE), Caldera
refuses with a message naming the setting: nothing half-applied.
"""

from __future__ import annotations

import re

from gateway.compat.duration import mins_to_str, time_str_to_mins, time_str_to_secs
from gateway.model.values import INFINITE, NO_VAL

__all__ = [
    "CLEAR",
    "SacctmgrError",
    "format_tres",
    "merge_tres",
    "parse_count",
    "parse_float",
    "parse_minutes",
    "parse_seconds",
    "parse_tres",
    "wall_str",
]

CLEAR = -1  # a parsed value that clears the setting (sacctmgr's INFINITE flag)

_BASE_TRES = ("cpu", "mem", "energy", "node", "billing", "fs/disk", "vmem", "pages")
_TRES_PREFIXES = ("gres/", "license/", "bb/", "ic/", "fs/")
_MEM_UNITS = {"": 1, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3}


class SacctmgrError(Exception):
    """What sacctmgr prints (to stderr) when it refuses; exit status 1."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _strtol(text: str) -> tuple[int, str]:
    """C's strtol base 10: the leading integer (0 if none) and what follows it."""
    m = re.match(r"\s*([+-]?\d+)", text)
    if m is None:
        return 0, text
    return int(m.group(1)), text[m.end() :]


def parse_count(text: str, what: str) -> int:
    """`get_uint`: a non-negative count, or CLEAR for -1. Junk, or a negative number other
    than -1, is refused (`Invalid value for <what> (<text>)`)."""
    value = text.strip().strip("'\"")
    num, rest = _strtol(value)
    if (num == 0 and rest) or rest.strip() or not value:
        raise SacctmgrError(f"sacctmgr: error: Invalid value for {what} ({value})")
    if num < 0:
        if num != -1:
            raise SacctmgrError(
                f"sacctmgr: error: Invalid value for {what} ({value}): only -1 (clear) "
                "may be negative"
            )
        return CLEAR
    if num >= NO_VAL:
        raise SacctmgrError(f"sacctmgr: error: Invalid value for {what} ({value}): too large")
    return num


def parse_float(text: str, what: str) -> float:
    """`get_double` (UsageFactor): a non-negative number; -1 clears."""
    value = text.strip().strip("'\"")
    try:
        num = float(value)
    except ValueError:
        raise SacctmgrError(f"sacctmgr: error: Invalid value for {what} ({value})") from None
    if num != num or num in (float("inf"), float("-inf")):
        raise SacctmgrError(f"sacctmgr: error: Invalid value for {what} ({value})")
    if num < 0:
        if num != -1:
            raise SacctmgrError(
                f"sacctmgr: error: Invalid value for {what} ({value}): only -1 (clear) "
                "may be negative"
            )
        return float(CLEAR)
    return num


def parse_minutes(text: str, what: str, option: str) -> int:
    """`time_str2mins` for MaxWall/GrpWall: minutes, CLEAR for -1 (or UNLIMITED), else
    ` Bad <what> time format: <option>`."""
    value = text.strip().strip("'\"")
    if value == "-1":
        return CLEAR
    mins = time_str_to_mins(value)
    if mins == INFINITE:
        return CLEAR
    if mins == NO_VAL or mins < 0:
        raise SacctmgrError(f" Bad {what} time format: {option}")
    return mins


def parse_seconds(text: str, what: str, option: str) -> int:
    """`time_str2secs` for GraceTime/PreemptExemptTime: seconds, CLEAR for -1."""
    value = text.strip().strip("'\"")
    if value == "-1":
        return CLEAR
    secs = time_str_to_secs(value)
    if secs == INFINITE:
        return CLEAR
    if secs == NO_VAL or secs < 0:
        raise SacctmgrError(f" Bad {what} time format: {option}")
    return secs


def wall_str(minutes: int | None) -> str | None:
    """`mins2time_str` as sacctmgr prints MaxWall (None: unset)."""
    return None if minutes is None else mins_to_str(minutes)


def _known_tres(name: str) -> bool:
    return name in _BASE_TRES or (
        name.startswith(_TRES_PREFIXES) and len(name.split("/", 1)[1]) > 0
    )


def parse_tres(text: str) -> dict[str, int]:
    """`slurmdb_format_tres_str`: `cpu=4,mem=4G,gres/gpu=2`; memory in MiB; -1 clears
    that TRES (kept as CLEAR). An unknown type is refused as slurmdb does."""
    out: dict[str, int] = {}
    value = text.strip().strip("'\"")
    if not value:
        raise SacctmgrError("sacctmgr: error: slurmdb_format_tres_str: no TRES given")
    for item in value.split(","):
        name, eq, amount = item.partition("=")
        name = name.strip().lower()
        if not eq:
            raise SacctmgrError(
                f"sacctmgr: error: slurmdb_format_tres_str: no value found for {name}"
            )
        if not _known_tres(name):
            raise SacctmgrError(
                f"sacctmgr: error: slurmdb_format_tres_str: no TRES known by type {name}"
            )
        out[name] = _tres_amount(name, amount.strip())
    return out


def _tres_amount(name: str, amount: str) -> int:
    if amount == "-1":
        return CLEAR
    m = re.fullmatch(r"(\d+)([KMGTP]?)", amount, re.IGNORECASE)
    if m is None or (m.group(2) and name != "mem"):
        raise SacctmgrError(f"sacctmgr: error: Invalid value for TRES {name} ({amount})")
    num = int(m.group(1)) * _MEM_UNITS[m.group(2).upper()]
    if num >= NO_VAL:
        raise SacctmgrError(f"sacctmgr: error: Invalid value for TRES {name} ({amount})")
    return int(num)


def merge_tres(old: dict[str, int] | None, new: dict[str, int]) -> dict[str, int]:
    """`slurmdb_combine_tres_strings` with REPLACE: new amounts win, -1 removes."""
    out = dict(old or {})
    for name, amount in new.items():
        if amount == CLEAR:
            out.pop(name, None)
        else:
            out[name] = amount
    return out


def _mem_str(mib: int) -> str:
    for unit, size in (("P", 1024**3), ("T", 1024**2), ("G", 1024)):
        if mib and mib % size == 0:
            return f"{mib // size}{unit}"
    return f"{mib}M"


def format_tres(tres: dict[str, int] | None) -> str | None:
    """As sacctmgr prints a TRES list: by name, memory with an exact unit (4096 -> 4G)."""
    if not tres:
        return None
    parts = [f"{k}={_mem_str(v) if k == 'mem' else v}" for k, v in sorted(tres.items())]
    return ",".join(parts)
