"""End to end on the local backend: walltime backfill and `squeue --start`.

One 4-cpu node, real time (no time scaling: the plan is in the jobs' own minutes). A job
on 2 cpus runs with a 5-minute limit; a 4-cpu job must wait for it and gets the node
reserved from that job's end; a 1-cpu, 1-minute job starts at once in the reservation's
shadow, and a 1-cpu, 10-minute one waits because it would delay the big job.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import pytest

from tests.support.gateway_env import Gateway, running_gateway

CONFIG = '[[nodes]]\nname = "bfnode"\ncpus = 4\nmemory_mb = 4000\n'
HEADER = (
    "             JOBID PARTITION     NAME     USER ST          START_TIME  NODES "
    "SCHEDNODES           NODELIST(REASON)"
)


@pytest.fixture
def one_node() -> Iterator[Gateway]:
    with running_gateway(CONFIG, "caldera-e2e-bf-") as gw:
        yield gw


def _until(gw: Gateway, job_id: int, key: str, want: object, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while gw.job(job_id)[key] != want:
        assert time.monotonic() < deadline, f"job {job_id}: {key} != {want}: {gw.job(job_id)}"
        time.sleep(0.1)


def test_a_short_job_backfills_while_the_big_job_keeps_its_planned_start(one_node: Gateway) -> None:
    gw = one_node
    first = gw.sbatch("-n", "2", "-t", "5", "-J", "first", "--wrap", "sleep 120")
    _until(gw, first, "state", "RUNNING")
    started = float(gw.job(first)["start_time"])  # type: ignore[arg-type]
    # the node is free for the big job once `first` reaches its limit, in bf_resolution steps
    planned = math.ceil((started + 300) / 60) * 60
    big = gw.sbatch("-n", "4", "-t", "5", "-J", "big", "--wrap", "true")
    short = gw.sbatch("-n", "1", "-t", "1", "-J", "short", "--wrap", "sleep 30")
    long_ = gw.sbatch("-n", "1", "-t", "10", "-J", "long", "--wrap", "sleep 30")
    _until(gw, short, "state", "RUNNING")
    _until(gw, long_, "reason", "Priority")
    assert gw.job(big)["state"] == "PENDING"
    assert gw.job(big)["reason"] == "Resources"
    assert gw.job(big)["sched_start"] == planned  # not delayed by the backfilled job
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(planned))

    out = gw.ok(["squeue", "--start"]).splitlines()
    assert out[0] == HEADER
    rows = {line.split()[0]: line for line in out[1:]}
    assert rows[str(big)] == (
        f"{big:>18} {'debug':>9} {'big':>8} {'root':>8} {'PD':>2} {stamp:>19} {1:>6} "
        f"{'bfnode':<20} (Resources)"
    )
    assert rows[str(long_)].split()[4:] == [
        "PD",
        time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(planned + 300)),
        "1",
        "bfnode",
        "(Priority)",
    ]
    assert str(short) not in rows  # --start shows pending jobs only
    assert str(first) not in rows
    assert list(rows) == [str(big), str(long_)]  # by expected start

    shown = gw.ok(["scontrol", "show", "job", str(big)])
    end = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(planned + 300))
    assert f"StartTime={stamp} EndTime={end} " in shown
    fields = gw.ok(["squeue", "-h", "-j", str(big), "-o", "%S|%Y"]).strip()
    assert fields == f"{stamp}|bfnode"
    gw.ok(["scancel", str(big), str(long_)])  # the waiting ones first: none starts meanwhile
    gw.ok(["scancel", str(short), str(first)])
