"""`--begin`/`--deadline` times as Slurm's `parse_time` reads them (clock given, local time)."""

from __future__ import annotations

import contextlib
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.compat.begin import TimeSpecError, parse_time
from gateway.compat.errors import CompatError

# Wednesday 2026-11-18 10:30:00 local time
NOW = time.mktime((2026, 11, 18, 10, 30, 0, 0, 0, -1))


def local(y: int, mo: int, d: int, h: int = 0, mi: int = 0, s: int = 0) -> int:
    return int(time.mktime((y, mo, d, h, mi, s, 0, 0, -1)))


@pytest.mark.parametrize(
    ("text", "delta"),
    [
        ("now", 0),
        ("now+600", 600),  # seconds by default
        ("now+30minutes", 1800),
        ("now+1hour", 3600),
        ("now+2days", 2 * 86400),
        ("now+1week", 7 * 86400),
        ("now-5minutes", -300),
        ("now + 1 hour", 3600),
    ],
)
def test_relative_forms_count_from_now(text: str, delta: int) -> None:
    assert parse_time(text, NOW) == int(NOW) + delta


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("16:00", local(2026, 11, 18, 16)),
        ("09:00", local(2026, 11, 19, 9)),  # already past today: tomorrow
        ("23:59:30", local(2026, 11, 18, 23, 59, 30)),
        ("4:30PM", local(2026, 11, 18, 16, 30)),
        ("teatime", local(2026, 11, 18, 16)),
        ("fika", local(2026, 11, 18, 15)),
        ("noon", local(2026, 11, 18, 12)),
        ("midnight", local(2026, 11, 19, 0)),
        ("today", local(2026, 11, 18)),
        ("tomorrow", local(2026, 11, 19)),
        ("tomorrowT10:00", local(2026, 11, 19, 10)),
        ("2030-01-01", local(2030, 1, 1)),
        ("2030-06-15T12:34:56", local(2030, 6, 15, 12, 34, 56)),
        ("12/25", local(2026, 12, 25)),
        ("12/25/30", local(2030, 12, 25)),
        ("1225", local(2026, 12, 25)),
        ("12.31.29", local(2029, 12, 31)),
        ("01/05", local(2027, 1, 5)),  # earlier in the year: next year
        ("uts1900000000", 1_900_000_000),
    ],
)
def test_absolute_forms(text: str, expected: int) -> None:
    assert parse_time(text, NOW) == expected


@pytest.mark.parametrize(
    ("text", "pos"),
    # positions as real sbatch 22.05 prints them
    [("abc", 0), ("25:00", 0), ("now+", 3), ("13/01", 0), ("now+5fortnights", 4), ("12:7", 4)],
)
def test_bad_times_report_slurms_position(text: str, pos: int) -> None:
    with pytest.raises(TimeSpecError) as info:
        parse_time(text, NOW)
    assert info.value.pos == pos
    assert info.value.render() == f"Invalid time specification (pos={pos}): {text}\n"


def test_nothing_specified_is_zero() -> None:
    assert parse_time("", NOW) == 0


@given(st.text(max_size=20))
def test_any_text_gives_an_epoch_or_a_compat_error(text: str) -> None:
    try:
        value = parse_time(text, NOW)
    except CompatError:
        return
    assert isinstance(value, int)


@given(st.text(alphabet="0123456789:/-.Tnowtdaymrihgsekul+ ", max_size=20))
def test_date_like_text_gives_an_epoch_or_a_compat_error(text: str) -> None:
    with contextlib.suppress(CompatError):
        parse_time(text, NOW)
