"""`squeue --start` of Caldera next to the real Slurm 22.05 test cluster (sched/backfill).

The same job sequence on both: a job that fills the machine (10-minute limit), a job as
wide that must wait (5 minutes), a 1-minute job, a job without a time limit, and a held
job. Slurm's machine is partition `real` (4 nodes, exclusive jobs); Caldera's is one 4-cpu
node. Compared: the header, the rows' order, state, node count, reason, which jobs have an
expected start and which show `N/A` / `(null)`, and how the expected starts relate (the
waiting job at the running job's end, the two small ones once the waiting job has run).
Times are not compared to the second: Slurm plans in its backfill pass on its own clock.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from datetime import datetime

import pytest

from tests.support.gateway_env import Gateway, running_gateway
from tests.support.slurm_stack import SlurmStack, cancel, job_id_from_sbatch, slurm_env

pytestmark = pytest.mark.slurm

NAME = "cbfdiff"  # a name no other test uses: the cluster is shared
CONFIG = '[[nodes]]\nname = "bfnode"\ncpus = 4\nmemory_mb = 4000\n'


@pytest.fixture
def one_node() -> Iterator[Gateway]:
    with running_gateway(CONFIG, "caldera-diff-bf-") as gw:
        yield gw


def _real(argv: list[str]) -> str:
    out = subprocess.run(
        argv, env=slurm_env(), capture_output=True, text=True, errors="replace", timeout=60
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def _rows(text: str) -> tuple[str, list[list[str]]]:
    lines = text.splitlines()
    return lines[0], [line.split() for line in lines[1:]]


def _when(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def _shape(rows: list[list[str]], ids: list[str]) -> list[tuple[str, ...]]:
    """Per row: which of the test's jobs, state, reason, whether it has a start and nodes
    (node counts differ by construction: 4 nodes there, one 4-cpu node here)."""
    out: list[tuple[str, ...]] = []
    for r in rows:
        if r[0] not in ids:
            continue  # other sessions' jobs on the shared cluster
        has_start = r[5] != "N/A"
        has_nodes = r[7] != "(null)"
        out.append((f"job{ids.index(r[0])}", r[4], r[-1], str(has_start), str(has_nodes)))
    return out


def test_squeue_start_shows_what_slurms_backfill_plans(
    cluster: SlurmStack, one_node: Gateway
) -> None:
    real_ids: list[str] = []
    try:
        for argv in (
            ["-N4", "--exclusive", "-t", "10", "--wrap", "sleep 600"],
            ["-N4", "--exclusive", "-t", "5", "--wrap", "true"],
            ["-N1", "-t", "1", "--wrap", "true"],
            ["-N1", "--wrap", "true"],
            ["-N1", "-H", "--wrap", "true"],
        ):
            real_ids.append(
                job_id_from_sbatch(
                    _real(["sbatch", "-p", "real", "-J", NAME, "-o", "/dev/null", *argv])
                )
            )
            time.sleep(0.5)  # submission order is priority order on both
        ours: list[str] = []
        for argv in (
            ["-n", "4", "-t", "10", "--wrap", "sleep 600"],
            ["-n", "4", "-t", "5", "--wrap", "true"],
            ["-n", "1", "-t", "1", "--wrap", "true"],
            ["-n", "1", "--wrap", "true"],
            ["-n", "1", "-H", "--wrap", "true"],
        ):
            ours.append(str(one_node.sbatch("-J", NAME, *argv)))
            time.sleep(0.5)
        # Slurm's estimates appear with its next backfill pass (bf_interval, 30 s)
        deadline = time.monotonic() + 120
        while True:
            real_head, real_rows = _rows(_real(["squeue", "--start", "-n", NAME]))
            planned = [r for r in real_rows if r[0] in real_ids[1:4] and r[5] != "N/A"]
            if len(planned) == 3:
                break
            assert time.monotonic() < deadline, real_rows
            time.sleep(2)
        our_head, our_rows = _rows(one_node.ok(["squeue", "--start", "-n", NAME]))

        assert our_head == real_head
        assert (
            _shape(our_rows, ours)
            == _shape(real_rows, real_ids)
            == [
                ("job1", "PD", "(Resources)", "True", "True"),
                ("job2", "PD", "(Priority)", "True", "True"),
                ("job3", "PD", "(Priority)", "True", "True"),
                ("job4", "PD", "(JobHeldUser)", "False", "False"),
            ]
        )
        for rows, ids, gap in ((real_rows, real_ids, 60.0), (our_rows, ours, 60.0)):
            start = {r[0]: _when(r[5]) for r in rows if r[0] in ids and r[5] != "N/A"}
            big, short, unlimited = (start[ids[k]] for k in (1, 2, 3))
            assert short == unlimited  # both wait for the big job, no gap before it
            assert abs(short - (big + 300)) <= gap  # once it has run its 5 minutes
    finally:
        cancel(*real_ids)
