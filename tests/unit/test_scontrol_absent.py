"""`scontrol show` of what a Caldera site has none of, in the test cluster's words (its own
reservations aside): no gateway is asked (`show topology` does: test_show_topo.py)."""

from __future__ import annotations

import pytest

from gateway.cli import scontrol_cmd


@pytest.mark.parametrize(
    ("argv", "rc", "out", "err"),
    [
        (["show", "reservation"], 0, "No reservations in the system\n", ""),
        (["show", "res"], 0, "No reservations in the system\n", ""),
        (["show", "reservation", "nosuch"], 1, "Reservation nosuch not found\n", ""),
        (["show", "burstbuffer"], 0, "", ""),
        (["show", "bogus"], 1, "", "invalid entity:bogus for keyword:show \n"),
    ],
)
def test_what_a_site_lacks_is_answered_as_slurm_answers_it(
    argv: list[str], rc: int, out: str, err: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert scontrol_cmd.main(argv) == rc
    got = capsys.readouterr()
    assert (got.out, got.err) == (out, err)
