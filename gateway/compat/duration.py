"""Time limits as Slurm reads and prints them (`--time`, `--time-min`, `TimeLimit=`).

Forms: minutes, minutes:seconds, hours:minutes:seconds, days-hours,
days-hours:minutes, days-hours:minutes:seconds, and -1/INFINITE/UNLIMITED. Seconds round
up to the next minute. A limit of 0 means no limit.
"""

from __future__ import annotations

from functools import lru_cache

from gateway.compat.cnum import strtol, to_int32
from gateway.model.values import INFINITE, NO_VAL

__all__ = [
    "mins_to_str",
    "secs_to_str",
    "time_str_to_mins",
    "time_str_to_secs",
]


def _is_valid_timespec(s: str) -> bool:
    digit = dash = colon = 0
    already_digit = False
    for ch in s:
        if "0" <= ch <= "9":
            if not already_digit:
                digit += 1
                already_digit = True
        elif ch == "-":
            already_digit = False
            dash += 1
            if colon:
                return False
        elif ch == ":":
            already_digit = False
            colon += 1
        else:
            return False
    if not digit or dash > 1 or colon > 2:
        return False
    if dash:
        return not ((colon == 1 and digit < 3) or (colon == 2 and digit < 4))
    return not ((colon == 1 and digit < 2) or (colon == 2 and digit < 3))


def _sscanf_ints(s: str, seps: str) -> list[int]:
    """`sscanf(s, "%d<sep0>%d<sep1>%d...")`: the ints assigned before the first mismatch."""
    values: list[int] = []
    pos = 0
    for k in range(len(seps) + 1):
        value, end = strtol(s, pos)
        if end == pos:
            break
        values.append(to_int32(value))
        pos = end
        if k == len(seps) or pos >= len(s) or s[pos] != seps[k]:
            break
        pos += 1
    return values


@lru_cache(maxsize=4096)
def time_str_to_secs(s: str) -> int:
    """Slurm's `time_str2secs`: seconds, INFINITE, or NO_VAL when invalid."""
    if not s:
        return NO_VAL
    if s.lower() in ("-1", "infinite", "unlimited"):
        return INFINITE
    if not _is_valid_timespec(s):
        return NO_VAL
    d = h = m = sec = 0
    if "-" in s:
        got = _sscanf_ints(s, "-::")
        d, h, m, sec = ([*got, 0, 0, 0, 0])[:4]
        d, h, m = to_int32(d * 86400), to_int32(h * 3600), to_int32(m * 60)
    else:
        got = _sscanf_ints(s, "::")
        if len(got) == 3:
            h, m, sec = to_int32(got[0] * 3600), to_int32(got[1] * 60), got[2]
        else:
            first = got[0] if got else 0
            second = got[1] if len(got) > 1 else 0
            sec, m, h = second, to_int32(first * 60), 0
    return to_int32(d + h + m + sec)


def time_str_to_mins(s: str) -> int:
    """Slurm's `time_str2mins`: minutes rounded up, INFINITE, or NO_VAL."""
    secs = time_str_to_secs(s)
    if secs in (INFINITE, NO_VAL):
        return secs
    # C integer division truncates toward zero.
    total = secs + 59
    return int(total / 60) if total < 0 else total // 60


def mins_to_str(minutes: int) -> str:
    """Slurm's `mins2time_str` (`TimeLimit=` in `scontrol show job`)."""
    if minutes == INFINITE:
        return "UNLIMITED"
    if minutes == NO_VAL or minutes < 0:
        return "INVALID"
    days, rest = divmod(minutes, 1440)
    hours, mins = divmod(rest, 60)
    if days:
        return f"{days}-{hours:02d}:{mins:02d}:00"
    return f"{hours:02d}:{mins:02d}:00"


def secs_to_str(seconds: int) -> str:
    """Slurm's `secs2time_str` (elapsed times in squeue and sacct)."""
    if seconds == INFINITE:
        return "UNLIMITED"
    if seconds < 0:
        return "INVALID"
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    mins, secs = divmod(rest, 60)
    if days:
        return f"{days}-{hours:02d}:{mins:02d}:{secs:02d}"
    return f"{hours:02d}:{mins:02d}:{secs:02d}"
