"""Absolute and relative times (`--begin`, `--deadline`, `sacct -S`) as Slurm's `parse_time`.

Accepted: `now[{+|-}N[seconds|minutes|hours|days|weeks]]`, `HH:MM[:SS][AM|PM]`,
`MMDD[YY]`, `MM/DD[/YY]`, `MM.DD[.YY]`, `YYYY-MM-DD[THH:MM[:SS]]`, `today`, `tomorrow`,
`midnight`, `noon`, `fika` (15:00), `teatime` (16:00) and `uts<epoch>`. The clock is an
argument, so the function stays pure; local time is the process's time zone, as in Slurm.
"""

from __future__ import annotations

import time as _time

from gateway.compat.cnum import strtol
from gateway.compat.errors import Diagnostic, Level, SpecError

__all__ = ["TimeSpecError", "parse_time"]

_UNITS: tuple[tuple[str, int], ...] = (
    ("seconds", 1),
    ("second", 1),
    ("minutes", 60),
    ("minute", 60),
    ("hours", 3600),
    ("hour", 3600),
    ("days", 86400),
    ("day", 86400),
    ("weeks", 604800),
    ("week", 604800),
)


class TimeSpecError(SpecError):
    """An invalid time; `pos` is the offset Slurm reports with "Invalid time specification"."""

    def __init__(self, pos: int, text: str) -> None:
        self.pos = pos
        self.text = text
        super().__init__(Diagnostic(Level.RAW, self.line()))

    def line(self) -> str:
        """The line Slurm prints to stderr for it."""
        return f"Invalid time specification (pos={self.pos}): {self.text}"


class _Tm:
    """C's struct tm, as parse_time fills it (-1: not given)."""

    __slots__ = ("hour", "mday", "minute", "month", "second", "year")

    def __init__(self) -> None:
        self.year = -1  # years since 1900
        self.month = -1  # 0-11
        self.mday = -1
        self.hour = -1
        self.minute = -1
        self.second = 0


def _at(s: str, i: int) -> str:
    return s[i] if 0 <= i < len(s) else "\0"


def _digit(ch: str) -> bool:
    return "0" <= ch <= "9"


def _get_delta(s: str, pos: int) -> tuple[int, int]:
    """Returns (new pos, delta seconds); raises with Slurm's pos on error."""
    cnt = 0
    digits = 0
    offset = pos + 1
    while _at(s, offset) not in ("\0", "\n"):
        ch = s[offset]
        if ch.isspace():
            offset += 1
            continue
        low = s[offset:].lower()
        unit = next(((n, m) for n, m in _UNITS if low.startswith(n)), None)
        if unit is not None:
            offset += len(unit[0])
            cnt *= unit[1]
            break
        if _digit(ch):
            cnt = cnt * 10 + ord(ch) - 48
            digits += 1
            offset += 1
            continue
        raise TimeSpecError(offset - 1, s)
    if not digits:
        raise TimeSpecError(pos, s)
    return offset - 1, cnt


def _get_time(s: str, pos: int, tm: _Tm) -> int:
    off = pos
    if not _digit(_at(s, off)):
        raise TimeSpecError(off, s)
    hr = ord(s[off]) - 48
    off += 1
    if _at(s, off) != ":":
        if not _digit(_at(s, off)):
            raise TimeSpecError(off, s)
        hr = hr * 10 + ord(s[off]) - 48
        off += 1
    if hr > 23:
        raise TimeSpecError(off - 2, s)
    if _at(s, off) != ":":
        raise TimeSpecError(off, s)
    off += 1
    if not _digit(_at(s, off)) or not _digit(_at(s, off + 1)):
        raise TimeSpecError(off if not _digit(_at(s, off)) else off + 1, s)
    minute = (ord(s[off]) - 48) * 10 + ord(s[off + 1]) - 48
    off += 2
    if minute > 59:
        raise TimeSpecError(off - 2, s)
    sec = 0
    if _at(s, off) == ":":
        off += 1
        if not _digit(_at(s, off)) or not _digit(_at(s, off + 1)):
            raise TimeSpecError(off if not _digit(_at(s, off)) else off + 1, s)
        sec = (ord(s[off]) - 48) * 10 + ord(s[off + 1]) - 48
        off += 2
        if sec > 59:
            raise TimeSpecError(off - 2, s)
    while _at(s, off).isspace() and _at(s, off) != "\0":
        off += 1
    suffix = s[off : off + 2].lower()
    if suffix == "pm":
        hr += 12
        if hr > 23:
            if hr != 24:
                raise TimeSpecError(off, s)
            hr = 12
        off += 2
    elif suffix == "am":
        if hr > 11:
            if hr != 12:
                raise TimeSpecError(off, s)
            hr = 0
        off += 2
    tm.hour, tm.minute, tm.second = hr, minute, sec
    return off - 1


def _two_digits(s: str, off: int) -> tuple[int, int]:
    """One digit (unchecked, as in Slurm) and an optional second one."""
    value = ord(_at(s, off)) - 48
    off += 1
    if _digit(_at(s, off)):
        value = value * 10 + ord(s[off]) - 48
        off += 1
    return value, off


def _get_date(s: str, pos: int, tm: _Tm) -> int:
    off = pos
    if len(s) >= off + 7 and _at(s, off + 4) == "-" and _at(s, off + 7) == "-":
        yr = 0
        for _ in range(4):
            if not _digit(_at(s, off)):
                raise TimeSpecError(off, s)
            yr = yr * 10 + ord(s[off]) - 48
            off += 1
        off += 1
        mon, off = _two_digits(s, off)
        if mon < 1 or mon > 12:
            raise TimeSpecError(off - 2, s)
        off += 1
        if not _digit(_at(s, off)):
            raise TimeSpecError(off, s)
        day, off = _two_digits(s, off)
        if day < 1 or day > 31:
            raise TimeSpecError(off - 2, s)
        tm.month, tm.mday, tm.year = mon - 1, day, yr - 1900
        return off - 1
    mon, off = _two_digits(s, off)
    if mon < 1 or mon > 12:
        raise TimeSpecError(off - 2, s)
    if _at(s, off) in "./" and _at(s, off) != "\0":
        off += 1
    if not _digit(_at(s, off)):
        raise TimeSpecError(off, s)
    day, off = _two_digits(s, off)
    if day < 1 or day > 31:
        raise TimeSpecError(off - 2, s)
    if _at(s, off) in "./" and _at(s, off) != "\0":
        off += 1
    yr = 0
    if _digit(_at(s, off)):
        yr = ord(s[off]) - 48
        off += 1
        if not _digit(_at(s, off)):
            raise TimeSpecError(off, s)
        yr = yr * 10 + ord(s[off]) - 48
        off += 1
    tm.month, tm.mday = mon - 1, day
    if yr:
        tm.year = yr + 100
    return off - 1


def _local(epoch: float) -> _time.struct_time:
    return _time.localtime(epoch)


def parse_time(text: str, now: float, past: bool = False) -> int:
    """Slurm's `parse_time`: seconds since the epoch; 0 when nothing was specified.

    Raises TimeSpecError where Slurm prints "Invalid time specification".
    """
    if text[:3].lower() == "uts":
        value, end = strtol(text, 3)
        if value < 1_000_000 or value == 2**63 - 1 or end != len(text) or end == 3:
            raise TimeSpecError(0, text)
        return value
    now_tm = _local(now)
    tm = _Tm()
    pos = 0
    s = text
    while _at(s, pos) not in ("\0", "\n"):
        ch = s[pos]
        low = s[pos:].lower()
        if ch in " \t-T":
            pass
        elif low.startswith("today"):
            tm.month, tm.mday, tm.year = now_tm.tm_mon - 1, now_tm.tm_mday, now_tm.tm_year - 1900
            pos += 4
        elif low.startswith("tomorrow"):
            later = _local(now + 86400)
            tm.month, tm.mday, tm.year = later.tm_mon - 1, later.tm_mday, later.tm_year - 1900
            pos += 7
        elif low.startswith(("midnight", "noon", "fika", "teatime")):
            word = next(w for w in ("midnight", "noon", "fika", "teatime") if low.startswith(w))
            tm.hour = {"midnight": 0, "noon": 12, "fika": 15, "teatime": 16}[word]
            tm.minute = tm.second = 0
            pos += len(word) - 1
        elif low.startswith("now"):
            delta = 0
            i = pos + 3
            while True:
                c = _at(s, i)
                if c in "+-" and c != "\0":
                    pos += i
                    pos, delta = _get_delta(s, pos)
                    delta = -delta if c == "-" else delta
                    break
                if c in " \t" and c != "\0":
                    i += 1
                    continue
                if c in ("\0", "\n"):
                    pos += i - 1
                    break
                raise TimeSpecError(pos + i, s)
            try:
                later = _local(now + delta)
            except (OverflowError, OSError, ValueError):  # past time_t: no such date
                raise TimeSpecError(pos, s) from None
            tm.month, tm.mday, tm.year = later.tm_mon - 1, later.tm_mday, later.tm_year - 1900
            tm.hour, tm.minute, tm.second = later.tm_hour, later.tm_min, later.tm_sec
        elif not _digit(ch):
            raise TimeSpecError(pos, s)
        elif _at(s, pos + 1) == ":" or _at(s, pos + 2) == ":":
            pos = _get_time(s, pos, tm)
        else:
            pos = _get_date(s, pos, tm)
        pos += 1
    return _resolve(tm, now_tm, now, past, pos, s)


def _resolve(tm: _Tm, now_tm: _time.struct_time, now: float, past: bool, pos: int, s: str) -> int:
    now_mon = now_tm.tm_mon - 1
    if tm.hour == -1 and tm.month == -1:
        return 0
    if tm.hour == -1:
        tm.hour = tm.minute = 0
    elif tm.month == -1:
        soon = (
            past
            or tm.hour > now_tm.tm_hour
            or (tm.hour == now_tm.tm_hour and tm.minute > now_tm.tm_min)
        )
        day = now_tm if soon else _local(now + 86400)
        tm.month, tm.mday, tm.year = day.tm_mon - 1, day.tm_mday, day.tm_year - 1900
    if tm.year == -1:
        this_year = now_tm.tm_year - 1900
        if past:
            tm.year = this_year - 1 if tm.month > now_mon else this_year
        else:
            key = (tm.month, tm.mday, tm.hour, tm.minute)
            now_key = (now_mon, now_tm.tm_mday, now_tm.tm_hour, now_tm.tm_min)
            tm.year = this_year if key > now_key else this_year + 1
    try:
        return int(
            _time.mktime(
                (tm.year + 1900, tm.month + 1, tm.mday, tm.hour, tm.minute, tm.second, 0, 0, -1)
            )
        )
    except (OverflowError, ValueError) as exc:
        raise TimeSpecError(pos, s) from exc
