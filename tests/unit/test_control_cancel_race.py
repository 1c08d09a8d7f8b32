"""scancel and the backend's report of the end race: neither may undo the other.

The Kubernetes e2e test saw a cancelled job stay RUNNING for ever: the backend's FINISHED
event was applied while `scancel` waited for the backend, and scancel then stored its own,
older copy of the running job over it. Here the backend applies its event from inside
`cancel` (as the poll loop can), which makes that interleaving certain.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from gateway.control import ops
from gateway.control.arraytasks import parse_targets
from gateway.control.gateway import Gateway
from gateway.control.submit import Caller
from gateway.model.backend import BackendError, BackendEvent, EventKind, Launch
from gateway.model.cluster import ClusterState, Node, Partition
from gateway.model.job import Job
from gateway.model.state import JobState
from tests.support.builders import make_gateway, make_job

OWNER = Caller(uid=1000, gid=1000, user="u", group="g", operator=False)


class ReportsDuringCancel:
    """A backend whose end-of-job report reaches the gateway before `cancel` returns."""

    name = "remote"

    def __init__(self, refuse: bool = False) -> None:
        self.refuse = refuse
        self.gw: Gateway | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def describe(self) -> ClusterState:
        return ClusterState(name=self.name, nodes=(), partitions=())

    def submit(self, launch: Launch) -> str:
        raise AssertionError("nothing is submitted here")

    def cancel(self, job: Job, signal: int | None = None, batch_only: bool = False) -> None:
        if self.refuse:
            raise BackendError("cluster unreachable", retryable=True)
        assert self.gw is not None
        assert self.loop is not None
        ended = BackendEvent(
            job_id=job.job_id, kind=EventKind.FINISHED, time=2.0, state=JobState.CANCELLED
        )
        applied = asyncio.run_coroutine_threadsafe(self.gw._apply_events([ended]), self.loop)
        applied.result(timeout=10)

    def poll(self) -> list[BackendEvent]:
        return []

    def reconcile(self, jobs: Sequence[Job]) -> list[BackendEvent]:
        return []


def _run(tmp_path: Path, backend: ReportsDuringCancel) -> tuple[Job, Job | None, list[str]]:
    async def main() -> tuple[Job, Job | None, list[str]]:
        gw = make_gateway(tmp_path, {"remote": backend})
        backend.gw, backend.loop = gw, asyncio.get_running_loop()
        running = make_job(7).state(JobState.RUNNING, start_time=1.0).build()
        await gw.commit([replace(running, cluster="remote", backend_id="b-7")], "submit")
        targets = parse_targets("7")
        assert targets is not None
        results = await ops.cancel(gw, targets, OWNER)
        gw.committer.close()
        return gw.jobs[7], gw.store.get(7), [str(r.error) for r in results]

    return asyncio.run(main())


def test_the_backends_end_report_during_scancel_is_kept(tmp_path: Path) -> None:
    memory, stored, errors = _run(tmp_path, ReportsDuringCancel())
    assert errors == ["None"]
    assert memory.state is JobState.CANCELLED
    assert stored is not None
    assert stored.state is JobState.CANCELLED
    assert memory.cancelled_by == stored.cancelled_by == OWNER.uid


def test_a_refused_cancel_records_no_canceller(tmp_path: Path) -> None:
    memory, stored, errors = _run(tmp_path, ReportsDuringCancel(refuse=True))
    assert errors != ["None"]
    assert memory.state is JobState.RUNNING
    assert stored is not None
    assert stored.cancelled_by is None
    assert memory.cancelled_by is None


class SlowToStart(ReportsDuringCancel):
    """A backend that takes a while to start a job, and knows nothing of it until then
    (as the local runner: no supervisor yet, "job N is not known")."""

    def __init__(self) -> None:
        super().__init__()
        self.started = threading.Event()
        self.cancelled: list[int] = []

    def describe(self) -> ClusterState:
        node = Node(name="n1", cpus=4, memory_mb=4000, partitions=("debug",))
        return ClusterState(
            name=self.name,
            nodes=(node,),
            partitions=(Partition(name="debug", nodes=("n1",), default=True),),
        )

    def submit(self, launch: Launch) -> str:
        time.sleep(0.5)
        self.started.set()
        return f"slow-{launch.job.job_id}"

    def cancel(self, job: Job, signal: int | None = None, batch_only: bool = False) -> None:
        if not self.started.is_set():
            raise BackendError(f"job {job.job_id} is not known to the backend")
        self.cancelled.append(job.job_id)


def test_scancel_while_the_launch_is_in_flight_reaches_the_started_job(tmp_path: Path) -> None:
    """A backfill e2e test saw "Requested operation not supported": the job was RUNNING in
    memory while its backend had not started it yet. scancel now waits for the launch."""

    async def main() -> tuple[list[str], list[int]]:
        backend = SlowToStart()
        gw = make_gateway(tmp_path, {"remote": backend})
        await gw.commit([replace(make_job(3).build(), cluster="remote")], "submit")
        cycle = asyncio.create_task(gw.cycle_once())
        while gw.jobs[3].state is not JobState.RUNNING:
            await asyncio.sleep(0.01)
        assert not backend.started.is_set()  # the window this test is about
        targets = parse_targets("3")
        assert targets is not None
        results = await ops.cancel(gw, targets, OWNER)
        await cycle
        gw.committer.close()
        return [str(r.error) for r in results], backend.cancelled

    errors, cancelled = asyncio.run(main())
    assert errors == ["None"]
    assert cancelled == [3]
