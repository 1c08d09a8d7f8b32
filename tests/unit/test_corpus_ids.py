"""The lifecycle comparison's job-id normalisation (tests/differential/corpus_lifecycle.py):
ids become J0, J1 .. where an id stands, but the script's own file name keeps its digits
(a CI run gave Caldera job 14 to NERSC's `..._14_advanced_pilot_...` and reported its
Command as a difference)."""

from __future__ import annotations

from pathlib import Path

from tests.differential.corpus_lifecycle import Collected

NAME = "NERSC_htc_training__hypershell__14_advanced_pilot__bin__xcore-pilot"


def _collected() -> Collected:
    return Collected(NAME, 0, "", "14", Path("/x"), ids=["14", "15"])


def test_the_scripts_own_name_keeps_its_digits() -> None:
    assert _collected().ids_out(f"ROOT/{NAME}") == f"ROOT/{NAME}"


def test_ids_are_replaced_around_it() -> None:
    col = _collected()
    assert col.ids_out(f"ROOT/{NAME} slurm-14.out job 15") == f"ROOT/{NAME} slurm-J0.out job J1"
    assert col.ids_out("14.batch") == "J0.batch"
