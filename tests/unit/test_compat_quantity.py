"""Memory sizes, node counts, integers, signals and mail types as sbatch reads them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.compat.errors import CompatError
from gateway.compat.quantity import (
    MAIL_TYPES,
    NodeCount,
    mail_type_str,
    mbytes_to_str,
    parse_int,
    parse_mail_type,
    parse_node_count,
    parse_signal,
    signal_name_to_num,
    str_to_mbytes,
)
from gateway.model.values import SignalSpec

# --- memory ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "mb"),
    [
        ("1500", 1500),
        ("4096M", 4096),
        ("4G", 4096),
        ("2g", 2048),
        ("8GB", 8192),
        ("1T", 1024 * 1024),
        ("1500K", 2),  # KiB round up to a MiB
        ("2048KB", 2),
        ("1024k", 1),
        ("0", 0),
    ],
)
def test_memory_units_default_to_megabytes(text: str, mb: int) -> None:
    assert str_to_mbytes(text) == mb


@pytest.mark.parametrize("text", ["", "abc", "1.5G", "4X", "-1", "4GiB", "4 G", "G"])
def test_bad_memory_sizes_are_refused(text: str) -> None:
    assert str_to_mbytes(text) is None


@given(st.text(max_size=12))
def test_any_memory_text_gives_megabytes_or_none(text: str) -> None:
    value = str_to_mbytes(text)
    assert value is None or value >= 0


@given(st.integers(min_value=0, max_value=2**30 - 1))
def test_printed_sizes_read_back_below_a_petabyte(mb: int) -> None:
    assert str_to_mbytes(mbytes_to_str(mb)) == mb


# --- integers and node counts ---------------------------------------------------------


def test_parse_int_reports_like_slurm() -> None:
    with pytest.raises(CompatError) as info:
        parse_int("--ntasks", "four", True)
    assert info.value.render() == 'sbatch: error: Invalid numeric value "four" for --ntasks.\n'
    assert info.value.exit_code == 1


def test_parse_int_positive_refuses_zero() -> None:
    with pytest.raises(CompatError):
        parse_int("-c", "0", True)
    assert parse_int("--wait-all-nodes", "0", False) == 0


@pytest.mark.parametrize(
    ("text", "count"),
    [
        ("1", NodeCount(1, 1)),
        ("2-4", NodeCount(2, 4)),
        ("-3", NodeCount(1, 3)),  # an empty minimum is 1
        ("2-0", NodeCount(2, 0)),  # 0: no maximum
        ("2k", NodeCount(2048, 2048)),
    ],
)
def test_node_count_forms(text: str, count: NodeCount) -> None:
    assert parse_node_count(text) == count


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("abc", 'sbatch: error: "abc" is not a valid node count\n'),
        ("1-x", 'sbatch: error: "x" is not a valid node count\n'),
        ("3-1", "sbatch: error: Maximum node count 1 is less than minimum node count 3\n"),
    ],
)
def test_bad_node_counts_are_refused_with_slurms_line(text: str, line: str) -> None:
    with pytest.raises(CompatError) as info:
        parse_node_count(text)
    assert info.value.render() == line


@given(st.text(alphabet="0123456789-kKmM x", max_size=10))
def test_any_node_count_text_gives_a_range_or_compat_error(text: str) -> None:
    try:
        count = parse_node_count(text)
    except CompatError:
        return
    assert count.max == 0 or count.max >= count.min


# --- signals --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("USR1", SignalSpec(10)),
        ("SIGUSR2@30", SignalSpec(12, 30)),
        ("B:TERM@60", SignalSpec(15, 60, batch_only=True)),
        ("R:10", SignalSpec(10, reservation=True)),
        ("RB:HUP@5", SignalSpec(1, 5, batch_only=True, reservation=True)),
        ("10", SignalSpec(10)),
    ],
)
def test_signal_forms(text: str, spec: SignalSpec) -> None:
    assert parse_signal(text) == spec


@pytest.mark.parametrize("text", ["FOO", "USR1@70000", "0", "USR1@x", ""])
def test_bad_signals_are_refused(text: str) -> None:
    assert parse_signal(text) is None


@given(st.text(max_size=12))
def test_any_signal_text_gives_a_spec_or_none(text: str) -> None:
    spec = parse_signal(text)
    if spec is not None:
        assert parse_signal(spec.render()) == spec


def test_signal_names_with_and_without_sig_prefix() -> None:
    assert signal_name_to_num("SIGKILL") == signal_name_to_num("kill") == 9


# --- mail types -----------------------------------------------------------------------


def test_mail_all_is_the_usual_set() -> None:
    assert parse_mail_type("ALL") == frozenset(
        {"INVALID_DEPEND", "BEGIN", "END", "FAIL", "REQUEUE", "STAGE_OUT"}
    )


def test_mail_none_stops_reading_and_clears() -> None:
    assert parse_mail_type("BEGIN,NONE,END") == frozenset()


def test_unknown_mail_words_are_ignored_unless_nothing_is_left() -> None:
    assert parse_mail_type("begin,sometimes") == frozenset({"BEGIN"})
    assert parse_mail_type("sometimes") is None


def test_mail_types_print_in_slurms_order() -> None:
    assert mail_type_str(frozenset({"END", "BEGIN", "ARRAY_TASKS"})) == "ARRAY_TASKS,BEGIN,END"
    assert mail_type_str(frozenset()) == "NONE"


@given(st.lists(st.sampled_from([*MAIL_TYPES, "ALL", "NONE", "x", ""]), max_size=5))
def test_any_mail_list_gives_a_set_or_none(words: list[str]) -> None:
    parsed = parse_mail_type(",".join(words))
    if parsed:
        assert parse_mail_type(mail_type_str(parsed)) == parsed
