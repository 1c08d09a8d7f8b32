"""The backend conformance suite: what "a backend works" means, for every adapter against
its real system (the local runner; the real Slurm test cluster; the real kube-apiserver with
KWOK nodes). A new backend is done when it passes this module.

Each adapter is driven through the port only (`gateway.model.backend.Backend` and the
capabilities `capabilities_of` resolves), through a small `Harness` that knows how to
write a job for that system and how to look behind the backend's back (its output, its
copies). Where a system cannot do something (Kubernetes cannot signal a pod; the local runner
queues nothing) the test says so and checks that the backend says so too.

The time-limit job of each adapter is submitted when its harness is built, so that the
minute Slurm and Kubernetes need passes while the other tests run.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from gateway.backend import Capabilities, capabilities_of
from gateway.model.backend import Backend, BackendError, BackendEvent, EventKind, Launch
from gateway.model.job import Job, RankPlacement
from gateway.model.state import JobState, Reason
from tests.support.slurm_jobs import EventLog

_IDS = itertools.count(7100)
LONG = "trap 'echo got USR1 >> {sig}' USR1; echo started; for i in $(seq 600); do sleep 0.1; done"
EXITS_3 = "echo started; exit 3"
# runs far past its one-minute limit: LONG itself ends after about 60 s, which raced
# slurmctld's time-limit check (it runs every 30 s) and ended COMPLETED once in CI
OUTLIVES_ITS_LIMIT = LONG.replace("seq 600", "seq 6000")


@dataclass
class Harness:
    """One adapter on its real system, as the suite drives it."""

    name: str
    backend: Backend
    # (job id, script, run, time limit minutes, held back) -> the Launch the gateway makes
    make: Callable[[int, str, int, int | None, bool], Launch]
    fresh: Callable[[], Backend]  # another backend object on the same system (a restart)
    copies: Callable[[Launch], int]  # how many jobs of this run the system holds or held
    output: Callable[[Launch], Path | None]  # the job's output file, where it has one
    # end a running job with this exit code, where jobs do not end by themselves (KWOK)
    end: Callable[[Launch, int], None] | None = None
    withdrawable: Callable[[int], Launch] | None = None  # a job placed where it cannot run
    log: EventLog | None = None
    time_limited: Launch | None = None

    @property
    def caps(self) -> Capabilities:
        return capabilities_of(self.backend)

    @property
    def events(self) -> EventLog:
        assert self.log is not None
        return self.log

    def launch(
        self,
        script: str = LONG,
        *,
        run: int = 0,
        time_limit: int | None = None,
        held: bool = False,
        job_id: int | None = None,
    ) -> Launch:
        jid = next(_IDS) if job_id is None else job_id
        return self.make(jid, script, run, time_limit, held)

    def others(self) -> list[Job]:
        """The other jobs a gateway would believe running here now (reconcile is told every
        job: what it is not told about is an orphan the backend may remove)."""
        return [] if self.time_limited is None else [self.time_limited.job]

    def started(self, launch: Launch, timeout: float = 120.0) -> BackendEvent:
        job = launch.job
        return self.events.wait(
            lambda e: (
                e.job_id == job.job_id
                and e.run == job.restart_count
                and e.kind is EventKind.STARTED
            ),
            timeout,
            f"STARTED of job {job.job_id} run {job.restart_count}",
        )

    def finished(self, launch: Launch, timeout: float = 120.0) -> BackendEvent:
        job = launch.job
        return self.events.wait(
            lambda e: (
                e.job_id == job.job_id
                and e.run == job.restart_count
                and e.kind is EventKind.FINISHED
            ),
            timeout,
            f"FINISHED of job {job.job_id} run {job.restart_count}",
        )

    def let_end(self, launch: Launch, code: int) -> None:
        """Let a job whose script exits with `code` end (a KWOK pod is told to, once it
        runs; elsewhere the script ends by itself, maybe between two polls of a backend
        that queues it, so that no STARTED is seen before its FINISHED)."""
        if self.end is not None:
            self.started(launch)
            self.end(launch, code)

    def printed(self, launch: Launch, text: str = "started", timeout: float = 60.0) -> None:
        """Wait until the job's output holds `text` (at once where jobs write none)."""
        out = self.output(launch)
        if out is None:
            return
        deadline = time.monotonic() + timeout
        while text not in (out.read_text() if out.exists() else ""):
            assert time.monotonic() < deadline, f"{text!r} not in {out}"
            self.events.drain()
            time.sleep(0.1)


def _with_run(launch: Launch, run: int, time_limit: int | None) -> Launch:
    job = replace(launch.job, restart_count=run)
    if time_limit is not None:
        job = replace(job, time_limit=time_limit, spec=replace(job.spec, time_limit=time_limit))
    return replace(launch, job=job)


def _local(request: pytest.FixtureRequest) -> Iterator[Harness]:
    from containers.backend import LocalBackend
    from tests.integration.test_local_backend_support import NODE, make_launch, temporary_env

    if os.geteuid() != 0:
        pytest.skip("the local runner runs jobs as other users (root)")
    envs = temporary_env()
    env = next(envs)
    backend = env.backend()

    def make(jid: int, script: str, run: int, limit: int | None, held: bool) -> Launch:
        text = "#!/bin/bash\n" + script.format(sig=env.work / f"sig-{jid}.txt") + "\n"
        return _with_run(make_launch(env, text, user="tester", job_id=jid), run, limit)

    def output(launch: Launch) -> Path:
        job = launch.job
        suffix = "" if job.restart_count == 0 else f".{job.restart_count}"
        return env.work / f"slurm-{job.job_id}.out{suffix}"

    def copies(launch: Launch) -> int:
        return (env.work / f"slurm-{launch.job.job_id}.out").read_text().count("started")

    yield Harness(
        "local",
        backend,
        make,
        lambda: LocalBackend(env.spool, node_name=NODE),
        copies,
        lambda launch: env.work / f"slurm-{launch.job.job_id}.out",
    )
    next(envs, None)


def _slurm(request: pytest.FixtureRequest) -> Iterator[Harness]:
    from slurm_plugin.backend import SlurmBackend
    from tests.integration.test_slurm_backend import cancel_all_of, config, launch, shared_workdir
    from tests.integration.test_slurm_backend_faults import copies_of_tag

    stack = request.getfixturevalue("slurm_cluster")
    dirs = shared_workdir(stack)
    workdir = next(dirs)
    backends: list[SlurmBackend] = []

    def new() -> SlurmBackend:
        backends.append(SlurmBackend(config(stack)))
        return backends[-1]

    def make(jid: int, script: str, run: int, limit: int | None, held: bool) -> Launch:
        command = script.format(sig=workdir / f"sig-{jid}.txt")
        extra: dict[str, object] = {"begin": int(time.time()) + 3600} if held else {}
        return _with_run(launch(jid, command, workdir, user="tester", **extra), run, limit)

    yield Harness(
        "slurm",
        new(),
        make,
        new,
        lambda launch: copies_of_tag(launch.job.job_id, launch.job.restart_count),
        lambda launch: workdir / f"slurm-{launch.job.job_id}.out",
    )
    for backend in backends:
        cancel_all_of(backend)
    next(dirs, None)


def _kubernetes(request: pytest.FixtureRequest) -> Iterator[Harness]:
    from tests.integration.test_k8s_bridge_helpers import (
        admin_client,
        end_rank,
        make_launch,
        new_backend,
        new_namespace,
    )

    env = request.getfixturevalue("k8s_env")
    namespaces = new_namespace(env, "conformance")
    ns = next(namespaces)
    kube = admin_client(env)
    backends = []

    def new() -> Backend:
        backends.append(new_backend(env, ns, kill_wait_s=1))
        return backends[-1]

    def make(jid: int, script: str, run: int, limit: int | None, held: bool) -> Launch:
        partition = "nowhere" if held else "k8s"  # no node is in it: the gang waits unbound
        text = "#!/bin/sh\n" + script.format(sig="/tmp/sig") + "\n"
        return _with_run(
            make_launch(jid, partition=partition, attempt=run, script=text), run, limit
        )

    def pods(launch: Launch) -> list[str]:
        from k8s_bridge.kube import PODS

        job = launch.job
        selector = f"caldera.io/job-id={job.job_id},caldera.io/attempt={job.restart_count}"
        items, _ = kube.list(PODS, ns, label_selector=selector)
        return [p["metadata"]["name"] for p in items]

    def end(launch: Launch, code: int) -> None:
        for pod in pods(launch):
            end_rank(kube, ns, pod, exit_code=code)

    def withdrawable(jid: int) -> Launch:
        launch = make(jid, LONG, 0, None, False)
        # placed by the gateway on a node the cluster does not have (deleted meanwhile)
        return replace(launch, placement=(RankPlacement("kwok-node-gone", 1, 1, 0, ()),))

    yield Harness(
        "kubernetes",
        new(),
        make,
        new,
        lambda launch: len(pods(launch)),
        lambda launch: None,
        end,
        withdrawable,
    )
    for backend in backends:
        backend.close()
    next(namespaces, None)


_BUILDERS: dict[str, Callable[[pytest.FixtureRequest], Iterator[Harness]]] = {
    "local": _local,
    "slurm": _slurm,
    "kubernetes": _kubernetes,
}


@pytest.fixture(scope="module")
def systems(request: pytest.FixtureRequest) -> Iterator[dict[str, Harness | str]]:
    """Every selected adapter on its system, each with its time-limit job already submitted
    (built together, so that Slurm's and Kubernetes' minute pass at the same time); an
    adapter that cannot run here maps to the reason it is skipped."""
    wanted = {
        item.callspec.params["adapter"]
        for item in request.session.items
        if isinstance(item, pytest.Function) and item.module.__name__ == __name__
    }
    built: dict[str, Harness | str] = {}
    running: list[Iterator[Harness]] = []
    try:
        for name in (n for n in _BUILDERS if n in wanted):
            harnesses = _BUILDERS[name](request)
            try:
                harness = next(harnesses)
            except pytest.skip.Exception as exc:
                built[name] = str(exc)
                continue
            running.append(harnesses)
            harness.log = EventLog(harness.backend)
            harness.time_limited = harness.launch(OUTLIVES_ITS_LIMIT, time_limit=1)
            harness.backend.submit(harness.time_limited)
            built[name] = harness
        yield built
    finally:
        for harnesses in running:
            next(harnesses, None)


@pytest.fixture(
    scope="module",
    params=[
        pytest.param("local"),
        pytest.param("slurm", marks=pytest.mark.slurm),
        pytest.param("kubernetes", marks=pytest.mark.k8s),
    ],
)
def adapter(request: pytest.FixtureRequest, systems: dict[str, Harness | str]) -> Harness:
    """One adapter on its real system."""
    harness = systems[request.param]
    if isinstance(harness, str):
        pytest.skip(harness)
    return harness


def _close(backend: Backend) -> None:
    """A backend object a test made stops (its threads, its controller)."""
    closes = capabilities_of(backend).closes
    if closes is not None:
        closes.close()


def _job(launch: Launch, backend_id: str | None) -> Job:
    return replace(launch.job, backend_id=backend_id)


def test_submitting_the_same_run_twice_makes_one_backend_job(adapter: Harness) -> None:
    launch = adapter.launch(EXITS_3)
    first = adapter.backend.submit(launch)
    assert adapter.backend.submit(launch) == first
    adapter.let_end(launch, 3)
    adapter.finished(launch)
    assert adapter.copies(launch) == 1


def test_a_restarted_gateway_reconciles_and_resubmits_without_a_second_job(
    adapter: Harness,
) -> None:
    launch = adapter.launch()
    backend_id = adapter.backend.submit(launch)
    adapter.started(launch)
    # the gateway was killed before it stored the backend's answer: a new backend object
    # is asked about the job (by job id only), and the launcher's retry submits it again
    fresh = adapter.fresh()
    events = fresh.reconcile([launch.job, *adapter.others()])
    mine = [e for e in events if e.job_id == launch.job.job_id and e.kind is not EventKind.STEP]
    # found by its tag (Slurm: SUBMITTED first, with the id the lost answer carried)
    assert [e.kind for e in mine if e.kind is not EventKind.SUBMITTED] == [EventKind.STARTED]
    assert {e.backend_id for e in mine} == {backend_id}
    assert fresh.submit(launch) == backend_id
    adapter.printed(launch)
    assert adapter.copies(launch) == 1
    fresh.cancel(_job(launch, backend_id))
    log = EventLog(fresh)
    log.events.extend(events)
    assert log.finished(launch.job.job_id, 60).state is JobState.CANCELLED
    _close(fresh)


def test_a_job_the_backend_never_had_is_reported_lost(adapter: Harness) -> None:
    launch = adapter.launch()  # the gateway stored it started; the submit never arrived
    fresh = adapter.fresh()
    events = fresh.reconcile([launch.job, *adapter.others()])
    _close(fresh)
    mine = [e for e in events if e.job_id == launch.job.job_id]
    assert [e.kind for e in mine] == [EventKind.LOST]
    assert mine[0].run == launch.job.restart_count


_QUEUEING = [  # not the local runner: it starts every job it is given, so none waits there
    pytest.param("slurm", marks=pytest.mark.slurm),
    pytest.param("kubernetes", marks=pytest.mark.k8s),
]


@pytest.mark.parametrize("adapter", _QUEUEING, indirect=True)
def test_cancel_of_a_pending_job(adapter: Harness) -> None:
    launch = adapter.launch(held=True)
    backend_id = adapter.backend.submit(launch)
    if adapter.name == "slurm":  # Slurm queues it and says why (maybe after a first poll)
        adapter.events.wait(
            lambda e: (
                e.job_id == launch.job.job_id
                and e.kind is EventKind.PENDING
                and e.reason is Reason.BEGIN_TIME
            ),
            60,
            "PENDING (BeginTime)",
        )
    else:  # the gang's pod exists and waits unbound: no node is in its partition
        deadline = time.monotonic() + 30
        while adapter.copies(launch) != 1:
            assert time.monotonic() < deadline, "the gang's pod was never created"
            time.sleep(0.1)
    adapter.backend.cancel(_job(launch, backend_id))
    done = adapter.finished(launch, 60)
    assert done.state is JobState.CANCELLED
    assert not adapter.events.of(launch.job.job_id, EventKind.STARTED)


def test_cancel_of_a_running_job(adapter: Harness) -> None:
    launch = adapter.launch()
    backend_id = adapter.backend.submit(launch)
    started = adapter.started(launch)
    # STARTED names the run's nodes; where the gateway placed the run it may leave them to
    # that placement, which must then be where it runs
    placed = tuple(p.node for p in launch.placement)
    assert started.nodes or placed
    if placed and started.nodes:
        assert set(started.nodes) == set(placed)
    adapter.backend.cancel(_job(launch, backend_id))
    assert adapter.finished(launch, 60).state is JobState.CANCELLED


def test_signal_delivery_to_the_batch_shell(adapter: Harness) -> None:
    launch = adapter.launch()
    backend_id = adapter.backend.submit(launch)
    adapter.started(launch)
    job = _job(launch, backend_id)
    if adapter.name == "kubernetes":
        # a KWOK pod runs no process: the API server's exec into it fails, and says so (on
        # real kubelet nodes the signal reaches the batch shell: test_gateway_kubelet_srun)
        with pytest.raises(BackendError, match="signal 10 not sent"):
            adapter.backend.cancel(job, signal.SIGUSR1, batch_only=True)
    else:
        adapter.printed(launch)
        adapter.backend.cancel(job, signal.SIGUSR1, batch_only=True)
        sig = adapter.output(launch)
        assert sig is not None
        sig = sig.parent / f"sig-{launch.job.job_id}.txt"
        deadline = time.monotonic() + 30
        while not (sig.exists() and "got USR1" in sig.read_text()):
            assert time.monotonic() < deadline, "USR1 never reached the batch shell"
            time.sleep(0.1)
    adapter.backend.cancel(job)
    assert adapter.finished(launch, 60).state is JobState.CANCELLED


def test_requeue_ends_the_old_run_before_the_next_starts(adapter: Harness) -> None:
    first = adapter.launch()
    backend_id = adapter.backend.submit(first)
    adapter.started(first)
    job = _job(first, backend_id)
    ends = adapter.caps.ends_attempts
    if ends is not None:
        ends.end_attempt(job)  # returns once the run is confirmed gone
    else:
        adapter.backend.cancel(job, signal.SIGKILL)  # the gateway's requeue elsewhere
    old_end = adapter.finished(first, 60)
    assert old_end.state is not JobState.COMPLETED
    second = adapter.launch(job_id=first.job.job_id, run=1)
    assert adapter.backend.submit(second) != backend_id or adapter.name == "local"
    new_start = adapter.started(second)
    # the old run's end was reported before the new run's start, and happened before it
    assert adapter.events.events.index(old_end) < adapter.events.events.index(new_start)
    assert (new_start.started_at or new_start.time) >= old_end.time - 1
    adapter.backend.cancel(_job(second, None))
    assert adapter.finished(second, 60).state is JobState.CANCELLED


# only Kubernetes hands back a job it never started; the others place (or start) every job
@pytest.mark.parametrize(
    "adapter", [pytest.param("kubernetes", marks=pytest.mark.k8s)], indirect=True
)
def test_withdraw_of_a_job_that_never_started(adapter: Harness) -> None:
    assert adapter.withdrawable is not None
    launch = adapter.withdrawable(next(_IDS))
    adapter.backend.submit(launch)
    withdrawn = adapter.events.wait(
        lambda e: e.job_id == launch.job.job_id and e.kind is EventKind.WITHDRAWN,
        60,
        "WITHDRAWN",
    )
    assert withdrawn.run == launch.job.restart_count
    assert not adapter.events.of(launch.job.job_id, EventKind.STARTED)


def test_accounting_of_a_finished_job(adapter: Harness) -> None:
    launch = adapter.launch(EXITS_3)
    backend_id = adapter.backend.submit(launch)
    adapter.let_end(launch, 3)
    done = adapter.finished(launch)
    assert (done.state, done.exit_code) == (JobState.FAILED, 3 << 8)
    assert done.time >= (done.started_at or 0)
    accounting = adapter.caps.accounting
    if accounting is not None:
        # slurmdbd records the job and its steps shortly after slurmctld ends it
        job = _job(launch, backend_id)
        deadline = time.monotonic() + 30
        while True:
            record = accounting.accounting([job]).get(launch.job.job_id)
            if record is not None and record.steps:
                break
            assert time.monotonic() < deadline, f"no accounting of job {backend_id}: {record}"
            time.sleep(0.5)
        assert (record.job.state, record.job.exit_code) == (JobState.FAILED, 3 << 8)
        assert [s.step_id for s in record.steps][:1] == ["batch"]


def test_time_limit_is_enforced(adapter: Harness) -> None:
    launch = adapter.time_limited
    assert launch is not None
    done = adapter.finished(launch, 240)
    assert done.state is JobState.TIMEOUT
