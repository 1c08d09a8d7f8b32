"""A real gateway whose periodic cycle is two minutes apart still sees a job end at once:
the supervisor pushes the end (containers.notify) and the cycle runs for it."""

from __future__ import annotations

from tests.support.gateway_env import running_gateway


def test_a_job_end_is_seen_without_waiting_for_the_periodic_cycle() -> None:
    with running_gateway("cycle_interval_s = 120\n") as gw:
        # the job outlasts the cycles that its submission and start cause
        job_id = gw.sbatch("--wrap", "sleep 2", user="tester")
        gw.wait(job_id, states=("RUNNING",), timeout=60)
        record = gw.wait(job_id, timeout=60)  # raises after 60 s: well before the cycle
        assert record["state"] == "COMPLETED"
