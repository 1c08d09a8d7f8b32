"""Fixed records for the formatter golden tests, and checks of the records themselves.

They reproduce, field for field, jobs and nodes recorded on the real Slurm 22.05 test
cluster (submitted 2026-11-22T07:09:56 UTC):

    591  sbatch -p real -w node01 -t 30 -J sleeper --wrap "sleep 600"   (cancelled at +3 s)
    592  sbatch -p real -N2 -t 1:00:00 -J multi --wrap "srun sleep 600"
    593  sbatch -p real --array=1-9%2 -t 5 -J arr --wrap "sleep 300"     (597 = 593_1, 598 = 593_2)
    594  sbatch -H -p debug -J held --mem=500 --wrap true
    595  sbatch -p real -J fail --wrap "exit 3"
    596  sbatch -p real -J ok --wrap true

The golden strings in the other `test_fmt_*` files are that cluster's own output.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from gateway.compat.fmt_common import JobExtras, NodeExtras, PartitionExtras
from gateway.compat.job_fields import SiteDefaults
from gateway.model.cluster import ClusterState, Node, NodeState, Partition
from gateway.model.job import Job, Step, wait_status
from gateway.model.jobspec import JobSpec
from gateway.model.state import JobState, Reason
from gateway.model.values import INFINITE, ArraySpec, IndexRange

T0 = 1795331396  # 2026-11-22T07:09:56 UTC
SITE = SiteDefaults(default_partition="debug", def_mem_per_cpu_mb=100)
OUT = "/tmp/caldera-slurm/jobs"


@pytest.fixture(autouse=True)
def utc() -> Iterator[None]:
    old = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if old is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = old
    time.tzset()


def _job(job_id: int, name: str, **kw: Any) -> Job:
    spec_kw: dict[str, Any] = {"mem_per_cpu_mb": 100, "requeue": True}
    spec_kw.update(kw.pop("spec", {}))
    spec = JobSpec(name=name, workdir="/tmp/fmtx", **spec_kw)
    base: dict[str, Any] = {
        "job_id": job_id,
        "spec": spec,
        "user": "root",
        "uid": 0,
        "group": "root",
        "gid": 0,
        "submit_time": float(T0),
        "partition": "real",
        "account": "root",
        "qos": "normal",
        "cluster": "caldera",
        "eligible_time": float(T0),
    }
    base.update(kw)
    return Job(**base)


def running_jobs() -> list[Job]:
    """squeue's records three seconds after submission, in slurmctld's order."""
    started = {"state": JobState.RUNNING, "start_time": float(T0)}
    pending_array = ArraySpec((IndexRange(3, 9),), 2)
    requested = ArraySpec((IndexRange(1, 9),), 2)
    return [
        _job(
            591,
            "sleeper",
            **started,
            nodes=("node01",),
            num_cpus=1,
            time_limit=30,
            end_time=float(T0 + 1800),
            priority=4294901539,
            spec={"stdout": f"{OUT}/%j.out", "time_limit": 30},
        ),
        _job(
            592,
            "multi",
            **started,
            nodes=("node01", "node02"),
            num_cpus=2,
            time_limit=60,
            end_time=float(T0 + 3600),
            priority=4294901538,
            spec={"stdout": f"{OUT}/%j.out", "nodes_min": 2, "ntasks": 2, "time_limit": 60},
        ),
        _job(
            597,
            "arr",
            **started,
            nodes=("node02",),
            num_cpus=1,
            time_limit=5,
            end_time=float(T0 + 300),
            priority=4294901537,
            array_job_id=593,
            array_task_id=1,
            spec={"stdout": f"{OUT}/%A_%a.out", "time_limit": 5, "array": requested},
        ),
        _job(
            594,
            "held",
            partition="debug",
            reason=Reason.JOB_HELD_USER,
            num_cpus=1,
            time_limit=INFINITE,
            priority=0,
            eligible_time=None,
            spec={"mem_per_cpu_mb": None, "mem_per_node_mb": 500, "hold": True},
        ),
        _job(
            595,
            "fail",
            state=JobState.FAILED,
            reason=Reason.NON_ZERO_EXIT_CODE,
            start_time=float(T0),
            end_time=float(T0),
            nodes=("node03",),
            num_cpus=1,
            time_limit=INFINITE,
            exit_code=wait_status(3),
            priority=4294901536,
            spec={"stdout": f"{OUT}/%j.out"},
        ),
        _job(
            596,
            "ok",
            state=JobState.COMPLETED,
            start_time=float(T0),
            end_time=float(T0),
            nodes=("node04",),
            num_cpus=1,
            time_limit=INFINITE,
            priority=4294901535,
            spec={"stdout": f"{OUT}/%j.out"},
        ),
        _job(
            598,
            "arr",
            **started,
            nodes=("node03",),
            num_cpus=1,
            time_limit=5,
            end_time=float(T0 + 300),
            priority=4294901537,
            array_job_id=593,
            array_task_id=2,
            spec={"stdout": f"{OUT}/%A_%a.out", "time_limit": 5, "array": requested},
        ),
        _job(
            593,
            "arr",
            reason=Reason.JOB_ARRAY_TASK_LIMIT,
            num_cpus=1,
            time_limit=5,
            priority=4294901537,
            array_job_id=593,
            array_pending=pending_array,
            eligible_time=None,
            spec={"stdout": f"{OUT}/%A_%a.out", "time_limit": 5, "array": pending_array},
        ),
    ]


def cancelled(job: Job) -> Job:
    """591 after `scancel` at +3 s."""
    return replace(
        job, state=JobState.CANCELLED, end_time=float(T0 + 3), exit_code=wait_status(0, 15)
    )


SQUEUE_EXTRAS = {
    j: JobExtras(
        alloc_node="localhost", alloc_sid=17056, accrue_time=float(T0), last_sched_eval=float(T0)
    )
    for j in (591, 592, 593, 595, 596, 597, 598)
} | {594: JobExtras(alloc_node="localhost", alloc_sid=17056, last_sched_eval=float(T0))}


def accounting() -> tuple[list[Job], dict[int, tuple[Step, ...]], dict[int, JobExtras]]:
    """sacct's records of the same jobs at +47 s (592 and the array tasks still running)."""
    jobs = {j.job_id: j for j in running_jobs()}
    jobs[591] = cancelled(jobs[591])
    jobs[594] = replace(jobs[594], time_limit=0xFFFF_FFFE, num_cpus=1)
    flags = ("SchedMain", "StartRecieved")
    extras = {
        591: JobExtras(requid=0, acct_flags=flags),
        592: JobExtras(acct_flags=flags),
        594: JobExtras(acct_flags=("StartRecieved",), reason_prev="JobHeldUser"),
        595: JobExtras(acct_flags=flags),
        596: JobExtras(acct_flags=flags),
        597: JobExtras(acct_flags=flags),
        598: JobExtras(acct_flags=flags),
        593: JobExtras(acct_flags=("StartRecieved",), reason_prev="JobArrayTaskLimit"),
    }
    one = "cpu=1,mem=100M,node=1"

    def batch(
        job_id: int,
        node: str,
        state: JobState,
        end: float | None,
        status: int = 0,
    ) -> Step:
        return Step(
            job_id=job_id,
            step_id="batch",
            name="batch",
            state=state,
            start_time=float(T0),
            end_time=end,
            exit_code=status,
            nodes=(node,),
            cpus=1,
            extra={"tres_alloc": one},
        )

    steps: dict[int, tuple[Step, ...]] = {
        591: (batch(591, "node01", JobState.CANCELLED, float(T0 + 3), wait_status(0, 15)),),
        592: (
            batch(592, "node01", JobState.RUNNING, None),
            Step(
                job_id=592,
                step_id="0",
                name="sleep",
                state=JobState.RUNNING,
                start_time=float(T0),
                nodes=("node01", "node02"),
                ntasks=2,
                cpus=2,
                extra={"tres_alloc": "cpu=2,mem=200M,node=2", "submit_line": "srun sleep 600"},
            ),
        ),
        595: (batch(595, "node03", JobState.FAILED, float(T0), wait_status(3)),),
        596: (batch(596, "node04", JobState.COMPLETED, float(T0)),),
        597: (batch(597, "node02", JobState.RUNNING, None),),
        598: (batch(598, "node03", JobState.RUNNING, None),),
    }
    order = [591, 592, 594, 595, 596, 597, 598, 593]
    return [jobs[i] for i in order], steps, extras


def cluster() -> tuple[ClusterState, dict[str, NodeExtras], dict[str, PartitionExtras]]:
    """node01..node04 idle and three virtual nodes that never answer, in three partitions
    (a subset of the test cluster: debug is the default, xyz-cluster the longest name)."""
    real = [
        Node(
            name=f"node0{i}",
            cpus=2,
            memory_mb=2000,
            features=("real",),
            sockets=2,
            cores_per_socket=1,
            partitions=("debug", "real", *(("xyz-cluster",) if i > 2 else ())),
        )
        for i in range(1, 5)
    ]
    big = [
        Node(
            name=f"big00{i}",
            cpus=256,
            memory_mb=1000000,
            state=NodeState.DOWN,
            features=("gpu", "v100", "v100-32g"),
            gres=(("gpu", "v100", 8),),
            sockets=2,
            cores_per_socket=128,
            reason="virtual node (no slurmd)",
            partitions=("debug", "xyz-cluster"),
        )
        for i in range(1, 4)
    ]
    nodes = (*real, *big)
    parts = (
        Partition(name="debug", nodes=tuple(n.name for n in nodes), default=True),
        Partition(name="real", nodes=tuple(n.name for n in real)),
        Partition(name="xyz-cluster", nodes=("node03", "node04", "big001", "big002", "big003")),
    )
    nex = {n.name: NodeExtras(weight=1, address=f"10.77.0.1{n.name[-1]}", port=6818) for n in real}
    nex |= {
        n.name: NodeExtras(
            state_flags=("RESERVED", "NOT_RESPONDING"),
            base_state="DOWN",
            weight=100,
            address="127.0.0.1",
            port=6898,
            last_busy=float(T0 - 241),
            tres="cpu=256,mem=1000000M,billing=256,gres/gpu=8,gres/gpu:v100=8",
        )
        for n in big
    }
    return ClusterState(name="caldera", nodes=nodes, partitions=parts), nex, {}


def test_records_describe_the_recorded_jobs() -> None:
    jobs = running_jobs()
    assert [j.job_id for j in jobs] == [591, 592, 597, 594, 595, 596, 598, 593]
    assert jobs[-1].display_id == "593_[3-9%2]"
    acct, steps, _ = accounting()
    assert [s.step_id for s in steps[592]] == ["batch", "0"]
    assert len(acct) == 8


def test_cluster_has_the_three_partitions() -> None:
    state, nex, _ = cluster()
    assert [p.name for p in state.partitions] == ["debug", "real", "xyz-cluster"]
    assert nex["big001"].state_flags == ("RESERVED", "NOT_RESPONDING")
