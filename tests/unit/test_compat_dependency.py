"""Job dependency expressions (`--dependency`) as slurmctld reads and scontrol prints them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.compat.dependency import DependencyError, parse_dependency
from gateway.compat.slurm_errors import SlurmErrno
from gateway.model.values import ALL_TASKS, Dependency, DepItem, DepKind, DepState


def shown(text: str, arrays: frozenset[int] = frozenset()) -> str:
    return parse_dependency(text).display(arrays)


@pytest.mark.parametrize(
    ("text", "display"),
    [
        ("after:12", "after:12(unfulfilled)"),
        ("afterany:12", "afterany:12(unfulfilled)"),
        ("afterok:12", "afterok:12(unfulfilled)"),
        ("afternotok:12", "afternotok:12(unfulfilled)"),
        ("aftercorr:12", "aftercorr:12(unfulfilled)"),
        ("afterburstbuffer:12", "afterburstbuffer:12(unfulfilled)"),
        ("singleton", "singleton(unfulfilled)"),
        ("12", "afterany:12(unfulfilled)"),
        ("AFTEROK:12", "afterok:12(unfulfilled)"),
    ],
)
def test_every_dependency_type(text: str, display: str) -> None:
    assert shown(text) == display


def test_comma_means_all_and_question_mark_means_any() -> None:
    assert shown("afterok:1,afternotok:2") == "afterok:1(unfulfilled),afternotok:2(unfulfilled)"
    assert shown("afterok:1?afterany:2") == "afterok:1(unfulfilled)?afterany:2(unfulfilled)"


def test_a_delay_carries_over_to_the_later_jobs_of_its_list() -> None:
    assert shown("afterany:1+10:2") == "afterany:1+10(unfulfilled),afterany:2+10(unfulfilled)"
    assert shown("afterany:1:2+10") == "afterany:1(unfulfilled),afterany:2+10(unfulfilled)"


def test_array_tasks_and_whole_arrays() -> None:
    assert shown("afterok:7_*") == "afterok:7_*(unfulfilled)"
    assert shown("afterok:7_2") == "afterok:7_2(unfulfilled)"
    assert shown("afterok:7", frozenset({7})) == "afterok:7_*(unfulfilled)"


def test_task_brackets_expand_to_each_task() -> None:
    dep = parse_dependency("afterok:7_[1-3]+2")
    assert [i.target() for i in dep.items] == ["7_1", "7_2", "7_3"]
    assert [i.minutes for i in dep.items] == [0, 0, 2]  # the delay follows the last task


def test_repeated_items_are_kept_once() -> None:
    assert shown("afterok:5,afterok:5") == "afterok:5(unfulfilled)"
    assert shown("singleton,singleton") == "singleton(unfulfilled)"


def test_a_state_in_parentheses_is_searched_in_the_whole_rest() -> None:
    assert shown("afterok:5,afterany:6(failed)") == "afterok:5(failed)"


def test_zero_or_empty_clears_dependencies() -> None:
    assert parse_dependency("0") == Dependency(())
    assert parse_dependency("") == Dependency(())


@pytest.mark.parametrize(
    "text",
    [
        "afterok:abc",
        "afterfoo:1",
        "afterok:1+0",
        "singletonx",
        "afterok:1,",
        "afterok:1 x",
        "afterok:0",
        "afterok:1(failed",
        "123,afterok:5",
    ],
)
def test_bad_dependencies_are_refused_as_slurmctld_does(text: str) -> None:
    with pytest.raises(DependencyError) as info:
        parse_dependency(text)
    assert info.value.errno is SlurmErrno.DEPENDENCY
    assert (
        info.value.render()
        == "sbatch: error: Batch job submission failed: Job dependency problem\n"
    )


def test_job_expansion_is_not_supported() -> None:
    with pytest.raises(DependencyError) as info:
        parse_dependency("expand:5")
    assert info.value.errno is SlurmErrno.NOT_SUPPORTED


def test_trailing_text_after_a_job_list_is_ignored() -> None:
    assert shown("afterok:5+3junk") == "afterok:5+3(unfulfilled)"


@given(st.text(alphabet="afterokny:,?+_*()[]0123456789singlto-", max_size=24))
def test_any_text_gives_a_dependency_or_a_dependency_error(text: str) -> None:
    try:
        dep = parse_dependency(text, 100)
    except DependencyError:
        return
    assert parse_dependency(dep.render(), 100) == dep


KINDS = [k for k in DepKind if k is not DepKind.SINGLETON]


@st.composite
def dep_items(draw: st.DrawFn) -> DepItem:
    if draw(st.booleans()) and draw(st.booleans()):
        return DepItem(DepKind.SINGLETON, state=draw(st.sampled_from([*DepState][::2])))
    return DepItem(
        draw(st.sampled_from(KINDS)),
        draw(st.integers(1, 2**32 - 1)),
        draw(st.one_of(st.none(), st.just(ALL_TASKS), st.integers(0, 1000))),
        draw(st.integers(0, 10_000)),
        draw(st.sampled_from([DepState.UNFULFILLED, DepState.FAILED])),
    )


@given(st.lists(dep_items(), min_size=1, max_size=5), st.booleans())
def test_rendered_dependencies_read_back(items: list[DepItem], any_of: bool) -> None:
    unique: list[DepItem] = []
    for item in items:
        if all((u.job_id, u.task, u.kind) != (item.job_id, item.task, item.kind) for u in unique):
            unique.append(item)
    dep = Dependency(tuple(unique), any_of)
    assert parse_dependency(dep.render(), 1001) == dep
