"""Time limits (`--time`, `--time-min`) as Slurm reads and prints them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.compat.cnum import to_int32
from gateway.compat.duration import mins_to_str, secs_to_str, time_str_to_mins, time_str_to_secs
from gateway.compat.render import secs_arg, time_arg
from gateway.model.values import INFINITE, NO_VAL

TIME_CHARS = st.text(alphabet="0123456789-:+ ablimnuNUI", max_size=14)


@pytest.mark.parametrize(
    ("text", "minutes"),
    [
        ("30", 30),
        ("90", 90),
        ("1:30", 2),  # min:sec, seconds round up
        ("0:59", 1),
        ("0:1", 1),
        ("2:00:00", 120),
        ("1:00:01", 61),
        ("1-0", 1440),
        ("1-2", 1560),
        ("1-2:30", 1590),
        ("2-03:04:05", 2 * 1440 + 3 * 60 + 5),
        ("00:05:00", 5),
    ],
)
def test_every_time_form_reads_as_slurm_does(text: str, minutes: int) -> None:
    assert time_str_to_mins(text) == minutes


@pytest.mark.parametrize("text", ["UNLIMITED", "unlimited", "INFINITE", "infinite", "-1"])
def test_unlimited_words_mean_infinite(text: str) -> None:
    assert time_str_to_mins(text) == INFINITE


@pytest.mark.parametrize("text", ["", "abc", "1-2-3", "1:2:3:4", "1:", "-", "1-:", "1.5"])
def test_malformed_times_are_no_val(text: str) -> None:
    assert time_str_to_mins(text) == NO_VAL


def test_zero_minutes_is_zero_here_and_unlimited_for_the_option() -> None:
    assert time_str_to_mins("0") == 0  # the --time converter turns 0 into INFINITE


@pytest.mark.parametrize(
    ("minutes", "shown"),
    [(30, "00:30:00"), (90, "01:30:00"), (1440, "1-00:00:00"), (1590, "1-02:30:00")],
)
def test_time_limit_prints_like_scontrol(minutes: int, shown: str) -> None:
    assert mins_to_str(minutes) == shown


def test_infinite_prints_unlimited() -> None:
    assert mins_to_str(INFINITE) == "UNLIMITED"
    assert secs_to_str(INFINITE) == "UNLIMITED"


def test_seconds_print_with_days() -> None:
    assert secs_to_str(90061) == "1-01:01:01"
    assert secs_to_str(300) == "00:05:00"


@given(st.text(max_size=16))
def test_any_text_gives_seconds_infinite_or_no_val(text: str) -> None:
    secs = time_str_to_secs(text)
    assert secs in (INFINITE, NO_VAL) or -(2**31) <= secs < 2**31


@given(TIME_CHARS)
def test_minutes_are_seconds_rounded_up(text: str) -> None:
    secs = time_str_to_secs(text)
    mins = time_str_to_mins(text)
    if secs in (INFINITE, NO_VAL):
        assert mins == secs
    elif secs >= 0:
        assert mins == -(-secs // 60)


@given(st.integers(min_value=-(2**31), max_value=2**31 - 1))
def test_any_seconds_value_has_a_text_that_reads_back(seconds: int) -> None:
    assert time_str_to_secs(secs_arg(seconds)) == seconds


@given(st.integers(min_value=-35_791_393, max_value=35_791_395))
def test_any_minutes_value_has_a_time_text_that_reads_back(minutes: int) -> None:
    if minutes == 0:
        return  # 0 is unlimited for --time
    assert time_str_to_mins(time_arg(minutes)) == minutes


@given(st.integers(min_value=0, max_value=10**6))
def test_printed_limits_read_back(minutes: int) -> None:
    assert time_str_to_mins(mins_to_str(minutes)) == minutes


def test_overflowing_days_wrap_like_a_c_int() -> None:
    assert time_str_to_secs("30000-0") == to_int32(30000 * 86400)
