"""srun under salloc ends its step once the allocation is revoked, with srun's and
slurmstepd's lines (containers/srun_revoke.py; tests/differential/test_srun_steps_vs_slurm.py
compares the whole session with the test cluster)."""

from __future__ import annotations

import threading
import time

import pytest

from containers.srun_revoke import RevocationWatch


def test_the_step_is_told_and_terminated_once_the_allocation_is_revoked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    answers = iter(["", "", "CANCELLED"])
    ended = threading.Event()
    graces: list[float] = []

    def terminate(grace: float) -> None:
        graces.append(grace)
        ended.set()

    watch = RevocationWatch("12", "12.0", "node01", 5.0, terminate, lambda _: next(answers))
    watch.start()
    assert ended.wait(5)
    watch.stop()
    assert watch.revoked
    assert graces == [5.0]
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "srun: Job step aborted: Waiting up to 7 seconds for job step to finish."
    assert err[1].startswith("slurmstepd-node01: error: *** STEP 12.0 ON node01 CANCELLED AT ")


def test_a_holding_or_silent_gateway_keeps_the_step() -> None:
    calls: list[str] = []

    def holding(job: str) -> str:
        calls.append(job)
        return ""  # running, or no answer

    watch = RevocationWatch("12", "12.0", "node01", 5.0, lambda _: None, holding).start()
    time.sleep(1.2)
    watch.stop()
    assert not watch.revoked
    assert set(calls) == {"12"}
