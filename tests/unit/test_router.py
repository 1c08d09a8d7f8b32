"""The router's decisions and moves, with in-memory backends standing in for the clusters.

The clusters here are doubles on purpose: the logic under test is the gateway's (which
cluster a job waits for, when a queued job is withdrawn, which events are ignored after a
move). The same paths run against the real Slurm test cluster in
tests/e2e/test_gateway_federation.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from gateway.control.gateway import Gateway
from gateway.model.backend import BackendError, BackendEvent, EventKind, Launch
from gateway.model.cluster import ClusterState, Node, Partition
from gateway.model.job import Job, RankPlacement
from gateway.model.state import JobState, Reason
from tests.support.builders import make_gateway, make_job


def _cluster(name: str, nodes: int = 1, cpus: int = 2, reachable: bool = True) -> ClusterState:
    names = tuple(f"{name}-n{i}" for i in range(1, nodes + 1))
    return ClusterState(
        name=name,
        nodes=tuple(Node(name=n, cpus=cpus, memory_mb=4000, partitions=("debug",)) for n in names),
        partitions=(Partition(name="debug", nodes=names, default=True),),
        reachable=reachable,
    )


class Placed:
    """A cluster the gateway places jobs on (like the local runner): it records launches."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.launched: list[int] = []

    def describe(self) -> ClusterState:
        return _cluster(self.name)

    def submit(self, launch: Launch) -> str:
        self.launched.append(launch.job.job_id)
        return f"{self.name}-{launch.job.job_id}"

    def cancel(self, job: Job, signal: int | None = None, batch_only: bool = False) -> None:
        return None

    def poll(self) -> list[BackendEvent]:
        return []

    def reconcile(self, jobs: Sequence[Job]) -> list[BackendEvent]:
        return []


class Queues(Placed):
    """A cluster with its own queue and planner (like Slurm): a job handed to it pends."""

    places_itself = True

    def __init__(self, name: str, predicted: float | None) -> None:
        super().__init__(name)
        self.predicted = predicted
        self.reachable = True
        self.asked: list[int] = []
        self.withdrawn: list[int] = []
        self.started_before_withdraw = False
        self.events: list[BackendEvent] = []

    def describe(self) -> ClusterState:
        return _cluster(self.name, reachable=self.reachable)

    def submit(self, launch: Launch) -> str:
        super().submit(launch)
        job = launch.job
        self.events.append(
            BackendEvent(
                job_id=job.job_id,
                kind=EventKind.PENDING,
                time=time.time(),
                state=JobState.PENDING,
                reason=Reason.PRIORITY,
                backend_id=f"{self.name}-{job.job_id}",
                run=job.restart_count,
            )
        )
        return f"{self.name}-{job.job_id}"

    def poll(self) -> list[BackendEvent]:
        out, self.events = self.events, []
        return out

    def predict_start(self, job: Job, partition: str) -> float | None:
        self.asked.append(job.job_id)
        if not self.reachable:
            raise BackendError("unreachable", retryable=True)
        return self.predicted

    def withdraw(self, job: Job) -> bool:
        if self.started_before_withdraw:
            return False
        self.withdrawn.append(job.job_id)
        return True


def _gateway(tmp_path: Path, backends: dict[str, Any], routing: dict[str, Any]) -> Gateway:
    return make_gateway(tmp_path, backends, routing=routing)


async def _cycles(gw: Gateway, n: int = 3) -> None:
    for _ in range(n):
        await gw.cycle_once()
        await asyncio.sleep(0.05)  # predictions asked in worker threads come back


def _pending(job_id: int, minutes: int = 10) -> Job:
    return replace(make_job(job_id).cpus(2).time(minutes).build(), time_limit=minutes)


def _blocker(job_id: int, cluster: str, minutes: int) -> Job:
    job = make_job(job_id).cpus(2).time(minutes).build()
    return replace(
        job,
        state=JobState.RUNNING,
        start_time=time.time(),
        time_limit=minutes,
        cluster=cluster,
        nodes=(f"{cluster}-n1",),
        placement=(RankPlacement(f"{cluster}-n1", 1, 2, 1000),),
        num_cpus=2,
        backend_id=f"b-{job_id}",
    )


def test_home_is_chosen_when_it_starts_the_job_now(tmp_path: Path) -> None:
    home, far = Placed("home"), Queues("far", predicted=time.time())

    async def main() -> Job:
        gw = _gateway(tmp_path, {"home": home, "far": far}, {"home": "home"})
        await gw.commit([_pending(1)], "submit")
        await _cycles(gw)
        gw.committer.close()
        return gw.jobs[1]

    job = asyncio.run(main())
    assert home.launched == [1]
    assert far.launched == []
    assert job.routed_to == "home"
    assert job.viable == "home,far"
    assert job.route_note.startswith("home: home starts now")


def test_a_full_home_bursts_to_the_cluster_that_starts_it_now(tmp_path: Path) -> None:
    home, far = Placed("home"), Queues("far", predicted=time.time())

    async def main() -> tuple[Job, list[str]]:
        gw = _gateway(tmp_path, {"home": home, "far": far}, {"home": "home", "margin": 60})
        # home's only node is busy for an hour
        await gw.commit([_blocker(9, "home", 60), _pending(1)], "submit")
        await _cycles(gw)
        gw.committer.close()
        events = [e.kind for e in gw.store.events(1)]
        return gw.jobs[1], events

    job, events = asyncio.run(main())
    assert far.launched == [1]
    assert home.launched == []
    assert job.cluster == "far"
    assert job.state is JobState.PENDING  # queued by the far cluster itself
    assert job.backend_id == "far-1"
    assert job.route_note.startswith("burst: far starts now, home (home) in 1h")
    assert "route" in events


def test_a_job_waits_for_the_prediction_it_needs(tmp_path: Path) -> None:
    """No route is taken on a partial comparison: home busy, the far cluster not asked yet."""
    home, far = Placed("home"), Queues("far", predicted=time.time())

    async def main() -> tuple[Job, Job]:
        gw = _gateway(tmp_path, {"home": home, "far": far}, {"home": "home"})
        await gw.commit([_blocker(9, "home", 60), _pending(1)], "submit")
        await gw.cycle_once()  # asks; the answer comes from a worker thread
        first = gw.jobs[1]
        await _cycles(gw)
        gw.committer.close()
        return first, gw.jobs[1]

    first, later = asyncio.run(main())
    assert first.routed_to is None
    assert first.route_note == "waiting for start predictions"
    assert later.routed_to == "far"


def test_a_queued_job_moves_home_when_home_frees_up(tmp_path: Path) -> None:
    home = Placed("home")
    far = Queues("far", predicted=time.time() + 7200)  # its own queue: two hours

    async def main() -> Job:
        gw = _gateway(tmp_path, {"home": home, "far": far}, {"home": "home", "margin": 60})
        queued = replace(
            _pending(1), cluster="far", backend_id="far-1", routed_to="far", viable="home,far"
        )
        await gw.commit([queued], "submit")
        assert gw.router is not None
        await _cycles(gw)
        gw.committer.close()
        return gw.jobs[1]

    job = asyncio.run(main())
    assert far.withdrawn == [1]
    assert home.launched == [1]
    assert job.cluster == "home"
    assert job.state is JobState.RUNNING


def test_a_job_that_started_before_its_withdrawal_stays(tmp_path: Path) -> None:
    home = Placed("home")
    far = Queues("far", predicted=time.time() + 7200)
    far.started_before_withdraw = True

    async def main() -> Job:
        gw = _gateway(tmp_path, {"home": home, "far": far}, {"home": "home", "margin": 60})
        queued = replace(_pending(1), cluster="far", backend_id="far-1", routed_to="far")
        await gw.commit([queued], "submit")
        await _cycles(gw)
        gw.committer.close()
        return gw.jobs[1]

    job = asyncio.run(main())
    assert home.launched == []
    assert job.cluster == "far"
    assert job.backend_id == "far-1"


def test_events_of_the_cluster_a_job_left_are_ignored(tmp_path: Path) -> None:
    home = Placed("home")
    far = Queues("far", predicted=time.time() + 7200)

    async def main() -> Job:
        gw = _gateway(tmp_path, {"home": home, "far": far}, {"home": "home", "margin": 60})
        queued = replace(_pending(1), cluster="far", backend_id="far-1", routed_to="far")
        await gw.commit([queued], "submit")
        await _cycles(gw)
        # the far cluster reports the withdrawn run as cancelled, then as pending again
        for kind, state in ((EventKind.FINISHED, JobState.CANCELLED), (EventKind.PENDING, None)):
            far.events.append(
                BackendEvent(job_id=1, kind=kind, time=time.time(), state=state, backend_id="x")
            )
            await gw.cycle_once()
        gw.committer.close()
        return gw.jobs[1]

    job = asyncio.run(main())
    assert job.cluster == "home"
    assert job.state is JobState.RUNNING
    assert job.backend_id == "home-1"


def test_an_unreachable_cluster_is_not_chosen_after_the_outage_timeout(tmp_path: Path) -> None:
    home, far = Placed("home"), Queues("far", predicted=time.time())
    far.reachable = False

    async def main() -> Job:
        routing = {"home": "home", "outage_timeout": 0.001}
        gw = _gateway(tmp_path, {"home": home, "far": far}, routing)
        await gw.commit([_blocker(9, "home", 60), _pending(1)], "submit")
        await _cycles(gw)
        gw.committer.close()
        return gw.jobs[1]

    job = asyncio.run(main())
    assert far.launched == []
    assert job.routed_to == "home"  # home in an hour beats unknown
    assert job.state is JobState.PENDING


def test_a_silent_cluster_gets_no_new_job_even_before_the_outage_timeout(
    tmp_path: Path,
) -> None:
    """A cluster that stopped answering is not sent a new job on what it predicted before it
    went silent (CI: a prediction cached while it answered sent a job to a stopped
    slurmctld)."""
    home, far = Placed("home"), Queues("far", predicted=time.time())

    async def main() -> tuple[Job, list[int], Job]:
        gw = _gateway(tmp_path, {"home": home, "far": far}, {"home": "home"})
        await gw.commit([_blocker(9, "home", 60), _pending(1)], "submit")
        await _cycles(gw)  # far answers: its prediction is cached
        first = gw.jobs[1]
        far.reachable = False
        await gw.commit([_pending(2)], "submit")
        await _cycles(gw)
        gw.committer.close()
        return first, list(far.launched), gw.jobs[2]

    first, launched_while_silent, second = asyncio.run(main())
    assert first.cluster == "far"
    assert launched_while_silent == [1]
    assert second.routed_to == "home"
    assert "far unknown" in second.route_note


def test_a_cluster_at_its_max_jobs_is_not_chosen(tmp_path: Path) -> None:
    home, far = Placed("home"), Queues("far", predicted=time.time())

    async def main() -> Job:
        routing = {"home": "home", "cluster": {"far": {"max_jobs": 1}}}
        gw = _gateway(tmp_path, {"home": home, "far": far}, routing)
        busy = replace(_blocker(8, "far", 60), placement=(), nodes=("far-n1",))
        await gw.commit([_blocker(9, "home", 60), busy, _pending(1)], "submit")
        await _cycles(gw)
        gw.committer.close()
        return gw.jobs[1]

    job = asyncio.run(main())
    assert far.launched == []
    assert job.routed_to == "home"
    assert "far unknown" in job.route_note


class _Big(Placed):
    def describe(self) -> ClusterState:
        return _cluster(self.name, nodes=4)


def test_pack_sends_a_short_job_to_the_smaller_cluster_when_both_start_it_now(
    tmp_path: Path,
) -> None:
    """With `[routing] pack`, a job both clusters start now goes to the smaller one (its
    room at home is kept for jobs only home can hold); without it, home keeps it."""

    async def main(routing: dict[str, Any]) -> tuple[Job, list[int], list[int]]:
        home, small = _Big("home"), Placed("small")
        base = tmp_path / str(len(routing))
        base.mkdir()
        gw = _gateway(base, {"home": home, "small": small}, routing)
        await gw.commit([_pending(1)], "submit")
        await _cycles(gw)
        gw.committer.close()
        return gw.jobs[1], home.launched, small.launched

    job, home_runs, small_runs = asyncio.run(main({"home": "home", "pack": "1h"}))
    assert (home_runs, small_runs) == ([], [1])
    assert job.route_note.endswith("(margin 5m, pack 10m)")
    job, home_runs, small_runs = asyncio.run(main({"home": "home"}))
    assert (home_runs, small_runs) == ([1], [])
