"""Output/error/input file name patterns: how slurmstepd opens them, how scontrol shows them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.compat.filename import (
    NO_TASK,
    PatternContext,
    default_output,
    expand_for_display,
    expand_for_open,
)

JOB = PatternContext(
    job_id=42,
    job_name="train",
    user="alice",
    workdir="/home/alice",
    node_name="node07",
    node_id=3,
    task_id=0,
)
TASK = PatternContext(
    job_id=45,
    job_name="sweep",
    user="alice",
    workdir="/w",
    array_job_id=40,
    array_task_id=5,
)


@pytest.mark.parametrize(
    ("pattern", "path"),
    [
        ("out-%j.txt", "/home/alice/out-42.txt"),
        ("out-%J.txt", "/home/alice/out-42.txt"),
        ("%x-%u.log", "/home/alice/train-alice.log"),
        ("%N-%n-%t-%s.log", "/home/alice/node07-3-0-batch.log"),
        ("100%%-%j.out", "/home/alice/100%-42.out"),
        ("w%5j.out", "/home/alice/w00042.out"),
        ("/tmp/abs-%j.out", "/tmp/abs-42.out"),
        ("/tmp/esc\\%j.out", "/tmp/esc%j.out"),  # a backslash turns expansion off
        ("esc\\%j.out", "/home/aliceesc%j.out"),  # ...and Slurm then forgets the "/"
    ],
)
def test_the_batch_step_opens_expanded_paths(pattern: str, path: str) -> None:
    assert expand_for_open(pattern, JOB) == path


def test_array_patterns_use_the_array_job_and_task() -> None:
    assert expand_for_open("arr-%A_%a.out", TASK) == "/w/arr-40_5.out"
    assert expand_for_open("arr-%3a.out", TASK) == "/w/arr-005.out"


def test_widths_are_capped_at_ten() -> None:
    assert expand_for_open("%20j", JOB) == "/home/alice/0000000042"


@pytest.mark.parametrize(
    ("pattern", "shown"),
    [
        ("out-%j.txt", "/home/alice/out-42.txt"),
        ("%x-%u.log", "/home/alice/train-alice.log"),
        ("o%3a-%5j-%N.txt", "/home/alice/o%3a-%5j-%N.txt"),  # scontrol leaves these alone
        ("100%%-%J", "/home/alice/100%%-%J"),
    ],
)
def test_scontrol_expands_only_a_few_letters(pattern: str, shown: str) -> None:
    assert expand_for_display(pattern, JOB) == shown


def test_scontrol_shows_slurms_default_names() -> None:
    assert expand_for_display(None, JOB) == "/home/alice/slurm-42.out"
    assert expand_for_display(None, TASK) == "/w/slurm-40_5.out"
    assert expand_for_display(None, JOB, is_stdin=True) == "/dev/null"
    assert default_output(True) == "slurm-%A_%a.out"


def test_a_pending_array_shows_no_task_for_percent_a() -> None:
    meta = PatternContext(42, "x", "u", "/w", array_job_id=42, array_task_id=NO_TASK)
    assert expand_for_display("%A_%a", meta) == f"/w/42_{NO_TASK}"


@given(st.text(max_size=20))
def test_any_pattern_expands_to_an_absolute_path(pattern: str) -> None:
    assert expand_for_open(pattern, JOB).startswith("/")
    assert expand_for_display(pattern, JOB).startswith("/")


@given(st.text(alphabet="%jJAaxuNnts0123456789\\/-._", max_size=16))
def test_pattern_letters_never_break_expansion(pattern: str) -> None:
    assert isinstance(expand_for_open(pattern, TASK), str)
