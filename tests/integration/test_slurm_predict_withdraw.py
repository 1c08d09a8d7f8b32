"""Predicted start (Slurm's own planner) and safe withdrawal, on the real test clusters.

The tests work in a partition of their own, made at runtime over node03 and node04
(`scontrol create partition`, deleted at the end): DOWN keeps its jobs pending, UP releases
them at once, which is the race a withdrawal must win or lose cleanly. Every job records
each of its runs under flock in a log of its own making; a withdrawn run must have no record,
a kept one exactly one.
"""

from __future__ import annotations

import itertools
import os
import random
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

from gateway.model.backend import BackendError, EventKind, Launch
from gateway.model.job import Job
from gateway.model.state import JobState
from slurm_plugin.backend import SlurmBackend
from slurm_plugin.config import OfferedPartition, SlurmClusterConfig, Transport
from slurm_plugin.mapping import make_tag, parse_tag, withdrawal_comment
from tests.integration.test_slurm_backend import cancel_all_of, shared_workdir
from tests.support.slurm_burst import SlurmClusters
from tests.support.slurm_jobs import EventLog, make_launch
from tests.support.slurm_stack import SlurmStack, show_job

pytestmark = pytest.mark.slurm

INSTANCE = f"pw{os.getpid()}"
PART = f"pw{os.getpid()}"  # the Slurm partition of this module; Caldera calls it "w"
_IDS = itertools.count(4000)


def slurm(stack: SlurmStack, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=stack.env_dict(), capture_output=True, text=True, check=False)


def make_part(stack: SlurmStack, state: str) -> subprocess.CompletedProcess[str]:
    nodes, limit = "Nodes=node[03-04]", "MaxTime=INFINITE"
    return slurm(stack, "scontrol", "create", f"PartitionName={PART}", nodes, state, limit)


def set_up(stack: SlurmStack, up: bool) -> None:
    """This module's partition UP or DOWN (made again if a reconfigure dropped it)."""
    state = "State=UP" if up else "State=DOWN"
    proc = slurm(stack, "scontrol", "update", f"PartitionName={PART}", state)
    if "Invalid partition name" in proc.stderr:
        proc = make_part(stack, state)
    assert proc.returncode == 0, proc.stderr


@pytest.fixture(scope="module")
def part(slurm_cluster: SlurmStack) -> Iterator[str]:
    """This module's partition (DOWN), deleted with its jobs at the end."""
    made = make_part(slurm_cluster, "State=DOWN")
    assert made.returncode == 0, made.stderr
    try:
        yield PART
    finally:
        slurm(slurm_cluster, "scancel", "-p", PART)
        slurm(slurm_cluster, "scontrol", "delete", f"PartitionName={PART}")


@pytest.fixture
def workdir(slurm_cluster: SlurmStack) -> Iterator[Path]:
    yield from shared_workdir(slurm_cluster)


def config(stack: SlurmStack, **kw: object) -> SlurmClusterConfig:
    base: dict[str, object] = {
        "name": "slurm",
        "slurm_conf": str(stack.slurm_conf),
        "instance": INSTANCE,
        "poll_interval_s": 0.1,
        "partitions": (OfferedPartition(PART, "w"), OfferedPartition("real", "caldera-real")),
    }
    base.update(kw)
    return SlurmClusterConfig(**base)  # type: ignore[arg-type]


@pytest.fixture
def backend(slurm_cluster: SlurmStack, part: str) -> Iterator[SlurmBackend]:
    b = SlurmBackend(config(slurm_cluster))
    yield b
    cancel_all_of(b)


def runs_script(log: Path, seconds: float) -> str:
    """A job that records its run (Caldera job, Slurm job) under flock, then sleeps."""
    return (
        "#!/bin/sh\n"
        f"flock {log} sh -c 'echo \"$CALDERA_JOB_ID $SLURM_JOB_ID\" >> {log}'\n"
        f"sleep {seconds}\n"
    )


def recorded_runs(log: Path) -> dict[int, list[str]]:
    """Caldera job -> the Slurm jobs that ran it (from the jobs' own records)."""
    out: dict[int, list[str]] = {}
    if log.exists():
        for line in log.read_text().splitlines():
            job, slurm_id = line.split()
            out.setdefault(int(job), []).append(slurm_id)
    return out


def a_launch(workdir: Path, seconds: float = 0.5, **kw: object) -> Launch:
    fields: dict[str, object] = {"partitions": ("w",), "time_limit": 2}
    fields.update(kw)
    return make_launch(
        next(_IDS),
        runs_script(workdir / "runs.log", seconds),
        workdir=str(workdir),
        **fields,  # type: ignore[arg-type]
    )


def wait_until(pred: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)


def slurm_state(stack: SlurmStack, slurm_id: str) -> dict[str, str]:
    return show_job(slurm_id, env=stack.env_dict())


def test_predicted_start_is_now_when_idle_and_after_the_blockers_when_full(
    slurm_cluster: SlurmStack, backend: SlurmBackend, workdir: Path
) -> None:
    set_up(slurm_cluster, True)
    job = a_launch(workdir).job
    before = time.time()
    idle = backend.predict_start(job, "w")
    assert idle is not None
    assert before - 2 <= idle <= time.time() + 1
    set_up(slurm_cluster, False)
    assert backend.predict_start(job, "w") == idle  # the same shape, within the TTL: kept
    set_up(slurm_cluster, True)
    # fill both nodes with jobs of a 1-minute limit: the planner puts the job after them
    blockers = [
        slurm(
            slurm_cluster,
            "sbatch",
            "--parsable",
            f"--partition={PART}",
            "--exclusive",
            "--time=1",
            f"--chdir={workdir}",
            "--output=/dev/null",
            "--wrap=sleep 100",
        ).stdout.strip()
        for _ in range(2)
    ]
    try:
        wait_until(
            lambda: all(slurm_state(slurm_cluster, b)["JobState"] == "RUNNING" for b in blockers),
            20,
            "blockers running",
        )
        ends = [slurm_state(slurm_cluster, b)["EndTime"] for b in blockers]
        end_epochs = [time.mktime(time.strptime(e, "%Y-%m-%dT%H:%M:%S")) for e in ends]
        full = backend.predict_start(replace(job, spec=replace(job.spec, time_limit=3)), "w")
        assert full is not None
        assert min(end_epochs) - 1 <= full <= max(end_epochs) + 1
        # the commands answer for the slurmrestd transport (v0.0.38 has no job_will_run)
        rest = SlurmBackend(
            config(
                slurm_cluster,
                transport=Transport.REST,
                rest_url=f"unix:{slurm_cluster.rest_socket}",
                rest_user="tester",
            ),
            watcher=False,
        )
        assert rest.predict_start(replace(job, spec=replace(job.spec, time_limit=3)), "w") == full
        rest_only = SlurmBackend(
            config(
                slurm_cluster,
                commands=False,
                transport=Transport.REST,
                rest_url=f"unix:{slurm_cluster.rest_socket}",
                rest_user="tester",
            ),
            watcher=False,
        )
        assert rest_only.predict_start(job, "w") is None
    finally:
        slurm(slurm_cluster, "scancel", *blockers)
    # a request that can never run there, a partition it does not offer, a DOWN partition
    assert backend.predict_start(replace(job, spec=replace(job.spec, nodes_min=3)), "w") is None
    assert backend.predict_start(job, "nosuch") is None
    set_up(slurm_cluster, False)
    assert backend.predict_start(replace(job, spec=replace(job.spec, time_limit=4)), "w") is None


def unreachable(stack: SlurmStack, tmp: Path) -> SlurmBackend:
    """A backend whose slurm.conf names a port no slurmctld listens on."""
    conf = tmp / "slurm.conf"
    text = stack.slurm_conf.read_text().replace("SlurmctldPort=6817", "SlurmctldPort=6999")
    assert "SlurmctldPort=6999" in text
    conf.write_text(text)
    return SlurmBackend(config(stack, slurm_conf=str(conf), command_timeout_s=3), watcher=False)


def test_an_unreachable_cluster_predicts_nothing_and_withdraws_nothing(
    slurm_cluster: SlurmStack, backend: SlurmBackend, workdir: Path, tmp_path: Path
) -> None:
    set_up(slurm_cluster, False)
    launch = a_launch(workdir)
    slurm_id = backend.submit(launch)
    dead = unreachable(slurm_cluster, tmp_path)
    started = time.monotonic()
    assert dead.predict_start(launch.job, "w") is None
    with pytest.raises(BackendError) as err:
        dead.withdraw(replace(launch.job, backend_id=slurm_id))
    assert err.value.retryable
    assert time.monotonic() - started < 5  # a ping fails at once; sbatch would retry 18 s
    rec = slurm_state(slurm_cluster, slurm_id)  # nothing changed
    assert rec["JobState"] == "PENDING"
    assert rec["Comment"] == make_tag(INSTANCE, launch.job.job_id)
    assert int(rec["Priority"]) > 0
    assert backend.withdraw(launch.job)


def test_withdrawn_pending_job_is_cancelled_unreported_and_can_come_back(
    slurm_cluster: SlurmStack, backend: SlurmBackend, workdir: Path
) -> None:
    set_up(slurm_cluster, False)
    log = EventLog(backend)
    launch = a_launch(workdir)
    jid = launch.job.job_id
    first = backend.submit(launch)
    log.state(jid, JobState.PENDING, 20)
    assert backend.withdraw(launch.job)
    rec = slurm_state(slurm_cluster, first)
    assert rec["JobState"] == "CANCELLED"
    assert rec["Comment"] == withdrawal_comment(INSTANCE, jid, None)
    assert rec.get("NodeList", "") in ("", "(null)")
    assert backend.withdraw(launch.job)  # asked again: still gone
    # the gateway has the answer: no FINISHED (nor CANCELLED) is reported for that run
    time.sleep(0.5)
    log.drain()
    assert [e.kind for e in log.of(jid)] == [EventKind.PENDING]
    # the gateway places the same run here again: a new Slurm job, which runs once
    again = backend.submit(launch)
    assert again != first
    set_up(slurm_cluster, True)
    done = log.finished(jid, 30)
    assert done.state is JobState.COMPLETED
    assert done.backend_id == again
    assert recorded_runs(workdir / "runs.log") == {jid: [again]}
    wait_until(
        lambda: (
            "CANCELLED"
            in slurm(slurm_cluster, "sacct", "-X", "-n", "-P", "-j", first, "-o", "State").stdout
        ),
        20,
        "slurmdbd's record of the withdrawn job",
    )


def test_withdrawal_racing_the_start_never_cancels_a_started_job(
    slurm_cluster: SlurmStack, backend: SlurmBackend, workdir: Path
) -> None:
    rng = random.Random(12)
    log = EventLog(backend)
    answers: dict[int, bool] = {}
    slurm_ids: dict[int, str] = {}
    span = 0.6  # withdrawals come within this many seconds of the partition going UP
    for _ in range(10):
        set_up(slurm_cluster, False)
        launches = [a_launch(workdir, seconds=0.3) for _ in range(4)]
        for launch in launches:
            slurm_ids[launch.job.job_id] = backend.submit(launch)
        for launch in launches:
            log.state(launch.job.job_id, JobState.PENDING, 20)
        release = threading.Timer(0.1, set_up, (slurm_cluster, True))

        def withdraw(job: Job, delay: float) -> bool:
            time.sleep(delay)
            return backend.withdraw(job)

        with ThreadPoolExecutor(len(launches)) as pool:
            release.start()
            futures = {
                launch.job.job_id: pool.submit(withdraw, launch.job, rng.uniform(0.0, span))
                for launch in launches
            }
            answers.update({jid: f.result() for jid, f in futures.items()})
        release.join()
        for launch in launches:
            if not answers[launch.job.job_id]:
                assert log.finished(launch.job.job_id, 30).state is JobState.COMPLETED
        seen = set(answers.values())
        if seen == {True, False}:
            break
        # a loaded slurmctld starts jobs later than a quiet one: widen (or narrow) the window
        span = span * 2 if seen == {True} else span / 2
    time.sleep(0.5)  # a withdrawn job that (wrongly) started would have recorded by now
    runs = recorded_runs(workdir / "runs.log")
    for jid, kept in answers.items():
        rec = slurm_state(slurm_cluster, slurm_ids[jid])
        if kept is False:  # it started before the hold: it ran once, to its end
            assert runs.get(jid) == [slurm_ids[jid]]
            assert rec["JobState"] == "COMPLETED"
            # unmarked, unless it ended before the unmarking reached it
            assert parse_tag(rec["Comment"], INSTANCE) == (jid, 0)
        else:  # withdrawn: never ran, never reported
            assert jid not in runs
            assert rec["JobState"] == "CANCELLED"
            assert not log.of(jid, EventKind.FINISHED)
            assert not log.of(jid, EventKind.STARTED)
    # the race was run: some withdrawals won it, some lost it
    assert set(answers.values()) == {True, False}, answers


def test_a_withdrawal_cut_short_by_a_gateway_kill_is_finished_or_undone_after_restart(
    slurm_cluster: SlurmStack, workdir: Path, part: str
) -> None:
    set_up(slurm_cluster, False)
    old = SlurmBackend(config(slurm_cluster))
    new = SlurmBackend(config(slurm_cluster))
    try:
        held, started = a_launch(workdir), a_launch(workdir, seconds=2)
        held_id, started_id = old.submit(held), old.submit(started)
        old.close()  # its watcher stops; what the killed gateway did last, done by hand:
        # both marked (withdraw's first step), one held (its second), none cancelled
        for launch, slurm_id in ((held, held_id), (started, started_id)):
            mark = withdrawal_comment(INSTANCE, launch.job.job_id, None)
            update = ("scontrol", "update", f"JobId={slurm_id}", f"Comment={mark}")
            assert slurm(slurm_cluster, *update).returncode == 0
        assert slurm(slurm_cluster, "scontrol", "hold", held_id).returncode == 0
        set_up(slurm_cluster, True)  # the unheld one starts meanwhile
        wait_until(
            lambda: slurm_state(slurm_cluster, started_id)["JobState"] == "RUNNING",
            20,
            "the marked, unheld job running",
        )
        log = EventLog(new)
        log.events += new.reconcile(
            [replace(held.job, backend_id=held_id), replace(started.job, backend_id=started_id)]
        )
        gone = log.wait(
            lambda e: e.job_id == held.job.job_id and e.kind is EventKind.WITHDRAWN, 20, "WITHDRAWN"
        )
        assert gone.backend_id == held_id
        assert gone.run == 0
        assert log.finished(started.job.job_id, 30).state is JobState.COMPLETED
        assert slurm_state(slurm_cluster, held_id)["JobState"] == "CANCELLED"
        assert slurm_state(slurm_cluster, started_id)["Comment"] == make_tag(
            INSTANCE, started.job.job_id
        )
        assert not log.of(held.job.job_id, EventKind.FINISHED)
        assert recorded_runs(workdir / "runs.log") == {started.job.job_id: [started_id]}
    finally:
        cancel_all_of(old)
        cancel_all_of(new)


def test_two_clusters_side_by_side_siblings_of_one_job(
    slurm_burst_cluster: SlurmClusters, workdir: Path, part: str
) -> None:
    """Two `kind = "slurm"` clusters in one gateway (same instance tag, own slurm.conf): a
    job held as siblings on both; the home one is revoked, the burst one runs once."""
    home_stack, burst_stack = slurm_burst_cluster.home, slurm_burst_cluster.burst
    set_up(home_stack, False)
    home = SlurmBackend(config(home_stack, name="home"))
    burst = SlurmBackend(
        config(
            burst_stack,
            name="burst",
            partitions=(OfferedPartition("burst", "w"),),
        )
    )
    try:
        launch = a_launch(workdir)
        job = launch.job
        # the same job and Caldera partition name on both: each cluster's own answer
        assert home.predict_start(job, "w") is None  # home's partition is down
        soon = burst.predict_start(job, "w")
        assert soon is not None
        assert soon <= time.time() + 1
        home_id = home.submit(replace(launch, cluster="home", job=replace(job, cluster="home")))
        home_log, burst_log = EventLog(home), EventLog(burst)
        home_log.state(job.job_id, JobState.PENDING, 20)
        burst_id = burst.submit(replace(launch, cluster="burst", job=replace(job, cluster="burst")))
        done = burst_log.finished(job.job_id, 30)
        assert done.state is JobState.COMPLETED
        assert done.backend_id == burst_id
        assert home.withdraw(job)  # the sibling at home is revoked
        assert slurm_state(home_stack, home_id)["JobState"] == "CANCELLED"
        time.sleep(0.3)
        home_log.drain()
        assert [e.kind for e in home_log.of(job.job_id)] == [EventKind.PENDING]
        assert home.known_jobs() == {job.job_id: home_id}
        assert burst.known_jobs() == {job.job_id: burst_id}
        assert recorded_runs(workdir / "runs.log") == {job.job_id: [burst_id]}
    finally:
        cancel_all_of(home)
        cancel_all_of(burst)
