"""Job array expressions (`--array`) as slurmctld reads and scontrol prints them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.compat.arrays import parse_array
from gateway.model.values import ArraySpec, IndexRange


def indices(text: str, max_size: int = 1001) -> list[int]:
    spec = parse_array(text, max_size)
    assert spec is not None
    return list(spec.indices())


def test_ranges_lists_and_steps() -> None:
    assert indices("0-3") == [0, 1, 2, 3]
    assert indices("1,3,5") == [1, 3, 5]
    assert indices("0-20:5") == [0, 5, 10, 15, 20]
    assert indices("1-10:4") == [1, 5, 9]
    assert indices("[1-3]") == [1, 2, 3]


def test_duplicates_and_overlaps_are_merged() -> None:
    assert indices("1,1,2") == [1, 2]
    assert indices("1-5,3-7") == list(range(1, 8))


def test_throttle_is_read_after_the_percent_sign() -> None:
    spec = parse_array("1-10%2")
    assert spec is not None
    assert spec.throttle == 2
    spec = parse_array("%5")
    assert spec is not None
    assert (list(spec.indices()), spec.throttle) == ([0], 5)


@pytest.mark.parametrize("text", ["3-1", "a-b", "1-5:0", "-1", "1-3x", "", "0-1001"])
def test_bad_arrays_are_refused(text: str) -> None:
    assert parse_array(text, 1001) is None


def test_indices_must_stay_below_max_array_size() -> None:
    assert parse_array("99990-100000", 100001) is not None
    assert parse_array("0-100001", 100001) is None


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("0-9", "0-9"),
        ("1,3,5", "1,3,5"),
        ("0-20:5", "0,5,10,15,20"),  # five tasks or fewer: listed
        ("0-78:3", "0-78:3"),
        ("1-10%2", "1-10%2"),
        ("0-1000:10", "0-1000:10"),
        ("1-3,7-9", "1-3,7-9"),
    ],
)
def test_task_ids_print_like_scontrol(text: str, shown: str) -> None:
    spec = parse_array(text, 100001)
    assert spec is not None
    assert spec.task_str() == shown


def test_long_lists_are_cut_like_scontrol() -> None:
    spec = parse_array(",".join(str(i * i) for i in range(30)))
    assert spec is not None
    assert spec.task_str().endswith("...")


def test_a_million_tasks_stay_as_a_range() -> None:
    spec = parse_array("0-999999", 4_000_001)
    assert spec == ArraySpec((IndexRange(0, 999_999, 1),), 0)
    assert spec.count == 1_000_000


@given(st.text(alphabet="0123456789-,:%[]x ", max_size=20))
def test_any_array_text_gives_a_spec_or_none(text: str) -> None:
    spec = parse_array(text, 1001)
    if spec is not None:
        assert all(0 <= i < 1001 for i in spec.indices())
        assert parse_array(spec.render(), 1001) == spec


@given(
    st.lists(
        st.tuples(st.integers(0, 500), st.integers(0, 40), st.integers(1, 7)),
        min_size=1,
        max_size=4,
    ),
    st.integers(0, 20),
)
def test_rendered_arrays_read_back_to_the_same_indices(
    parts: list[tuple[int, int, int]], throttle: int
) -> None:
    text = ",".join(f"{a}-{a + n}:{s}" for a, n, s in parts) + (f"%{throttle}" if throttle else "")
    spec = parse_array(text, 1001)
    assert spec is not None
    expected = sorted({i for a, n, s in parts for i in range(a, a + n + 1, s)})
    assert list(spec.indices()) == expected
    assert parse_array(spec.render(), 1001) == spec
