"""Option values sbatch checks when it reads them: distribution, CPU frequency, binding..."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.compat.option_values import (
    acctg_freq_errors,
    cpu_freq_errors,
    distribution_errors,
    is_arbitrary,
    mem_bind_errors,
    profile_is_valid,
)


@pytest.mark.parametrize(
    "text",
    [
        "block",
        "cyclic",
        "block:cyclic",
        "cyclic:fcyclic:block",
        "*",
        "*:*",
        "BLOCK",
        "pack",
        "block,nopack",
        "arbitrary",
        "hostfile",
        "plane=4",
        "block::cyclic",
    ],
)
def test_known_distributions_are_accepted(text: str) -> None:
    assert distribution_errors(text) is None


@pytest.mark.parametrize(
    ("text", "lines"),
    [
        ("zigzag", ["Invalid --distribution specification"]),
        ("block:block:block:block", ["Invalid --distribution specification"]),
        ("block,tight", ["Invalid --distribution specification"]),
        (",block", ["Invalid --distribution specification"]),
        (
            "plane",
            ["Invalid plane size or size not specified", "Invalid --distribution specification"],
        ),
        (
            "plane=0",
            ["Invalid plane size or size not specified", "Invalid --distribution specification"],
        ),
    ],
)
def test_bad_distributions_give_sbatchs_lines(text: str, lines: list[str]) -> None:
    assert distribution_errors(text) == lines


def test_arbitrary_distribution_is_recognised_with_flags() -> None:
    assert is_arbitrary("arbitrary,pack")
    assert is_arbitrary("hostfile")
    assert not is_arbitrary("block")
    assert not is_arbitrary(None)


@pytest.mark.parametrize(
    "text",
    ["high", "low", "medium", "highm1", "2000", "1000-2000:performance", "ondemand", "userspace"],
)
def test_cpu_frequencies_sbatch_accepts(text: str) -> None:
    assert cpu_freq_errors(text) is None


@pytest.mark.parametrize(
    ("text", "first"),
    [
        ("turbo", 'unrecognized --cpu-freq argument "turbo"'),
        (
            "performance:ondemand",
            "governor cannot be specified twice performance{-}:ondemand in --cpu-freq",
        ),
        ("3000-1000", "min cpu-frec (3000) must be < max cpu-freq (1000)"),
        ("1000:performance", "gov on cpu-frec (performance) illegal without max"),
        ("conservative", "governor of conservative is not allowed in slurm.conf"),
        ("performance-2000", "min cpu-frec (performance) must be < max cpu-freq (2000)"),
    ],
)
def test_bad_cpu_frequencies_give_sbatchs_lines(text: str, first: str) -> None:
    lines = cpu_freq_errors(text)
    assert lines is not None
    assert (lines[0], lines[-1]) == (first, "Invalid --cpu-freq argument")


@pytest.mark.parametrize(
    "text", ["local", "rank,v", "map_mem:0,1", "mask_mem:0x3,0xc", "none", "sort"]
)
def test_memory_bindings_sbatch_accepts(text: str) -> None:
    assert mem_bind_errors(text) is None


def test_bad_memory_bindings() -> None:
    assert mem_bind_errors("nowhere") == ['unrecognized --mem-bind argument "nowhere"']
    assert mem_bind_errors("map_mem") == ['missing list for "--mem-bind=map_mem:<list>"']
    assert mem_bind_errors("map_mem:1*0") == ["Invalid map_mem multiplier: 0"]


def test_accounting_frequencies_and_profiles() -> None:
    assert acctg_freq_errors("task=30,energy=60") is None
    assert acctg_freq_errors("often") == ["Invalid --acctg-freq specification: often"]
    assert profile_is_valid("task,energy")
    assert not profile_is_valid("everything")


@given(st.text(max_size=24))
def test_any_value_is_accepted_or_explained(text: str) -> None:
    for check in (distribution_errors, cpu_freq_errors, mem_bind_errors, acctg_freq_errors):
        lines = check(text)
        assert lines is None or all(isinstance(line, str) for line in lines)
    assert isinstance(profile_is_valid(text), bool)
