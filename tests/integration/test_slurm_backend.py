"""SlurmBackend through the Slurm commands against the real 22.05 test cluster (testenv/slurm).

Jobs run on partition `real` (node01-04, shared with other sessions: waits can be long).
Every job carries this run's own tag instance, and only those jobs are cancelled.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from gateway.model.backend import EventKind
from gateway.model.job import Job
from gateway.model.state import JobState, Reason
from gateway.model.values import INFINITE, Dependency, DepItem, DepKind
from slurm_plugin.backend import SlurmBackend
from slurm_plugin.config import OfferedPartition, SlurmClusterConfig, SubmitAs
from slurm_plugin.errors import SlurmRejected
from slurm_plugin.mapping import make_tag
from tests.support.slurm_jobs import EventLog, make_launch, wrap
from tests.support.slurm_stack import SlurmStack, scontrol_lines, show_job

pytestmark = pytest.mark.slurm

_IDS = itertools.count(1000)
INSTANCE = f"it{os.getpid()}"


def config(stack: SlurmStack, **kw: object) -> SlurmClusterConfig:
    """The test cluster as Caldera's cluster `slurm`: `real` offered as `caldera-real`."""
    base: dict[str, object] = {
        "name": "slurm",
        "slurm_conf": str(stack.slurm_conf),
        "instance": INSTANCE,
        "poll_interval_s": 0.2,
        "partitions": (
            OfferedPartition("real", "caldera-real", True),
            OfferedPartition("debug", "caldera-debug"),
        ),
    }
    base.update(kw)
    return SlurmClusterConfig(**base)  # type: ignore[arg-type]


def cancel_all_of(backend: SlurmBackend) -> None:
    """scancel every Slurm job this backend submitted or adopted (only those)."""
    ids = sorted(set(backend.known_jobs().values()))
    if ids:
        subprocess.run(
            ["scancel", *ids],
            env={**os.environ, "SLURM_CONF": str(backend.config.slurm_conf)},
            capture_output=True,
            check=False,
        )
    backend.close()


def shared_workdir(stack: SlurmStack) -> Iterator[Path]:
    """A directory every node and user can write (job output lands here)."""
    path = Path(tempfile.mkdtemp(prefix="slurm-backend-", dir=stack.jobs_dir))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def backend_for(stack: SlurmStack) -> Iterator[SlurmBackend]:
    """A backend on the test cluster; its jobs are cancelled afterwards."""
    b = SlurmBackend(config(stack))
    yield b
    cancel_all_of(b)


@pytest.fixture
def workdir(slurm_cluster: SlurmStack) -> Iterator[Path]:
    yield from shared_workdir(slurm_cluster)


@pytest.fixture
def backend(slurm_cluster: SlurmStack) -> Iterator[SlurmBackend]:
    yield from backend_for(slurm_cluster)


def launch(job_id: int, command: str, workdir: Path, **kw: object):  # type: ignore[no-untyped-def]
    fields: dict[str, object] = {"partitions": ("caldera-real",), "time_limit": 2}
    fields.update(kw)
    return make_launch(job_id, wrap(command), workdir=str(workdir), **fields)  # type: ignore[arg-type]


def with_id(job: Job, backend_id: str) -> Job:
    return replace(job, backend_id=backend_id)


def test_discovery_offers_the_configured_partitions_with_nodes_gres_and_limits(
    backend: SlurmBackend,
) -> None:
    state = backend.describe()
    assert state.name == "slurm"
    assert state.reachable
    assert [p.name for p in state.partitions] == ["caldera-real", "caldera-debug"]
    real = state.partition("caldera-real")
    assert real is not None
    assert real.default
    assert real.nodes == ("node01", "node02", "node03", "node04")
    assert real.max_time == INFINITE
    nodes = {n.name: n for n in state.nodes}
    assert len(nodes) == 104  # debug has the 100 virtual nodes too
    assert (nodes["node01"].cpus, nodes["node01"].memory_mb) == (2, 2000)
    assert nodes["node04"].gres == (("gpu", "a100", 4),)
    assert nodes["node03"].gpu_count() == 2
    assert set(nodes["node01"].partitions) == {"caldera-real", "caldera-debug"}
    assert backend.client.version() == "22.05.8"
    backend.client.ping()


def test_a_job_runs_as_its_user_and_reports_exit_code_output_and_accounting(
    backend: SlurmBackend, workdir: Path, slurm_cluster: SlurmStack
) -> None:
    log = EventLog(backend)
    jid = next(_IDS)
    user_job = launch(
        jid,
        'id -un; echo "caldera=$CALDERA_JOB_ID"; srun true; exit 3',
        workdir,
        user="tester",
        comment="user words",
    )
    bid = backend.submit(user_job)
    assert backend.slurm_id(user_job.job) == bid
    assert backend.caldera_id(bid) == jid
    rec = show_job(bid)
    assert rec["UserId"].startswith("tester(")
    assert rec["Comment"].strip() == f"{make_tag(INSTANCE, jid)} user words"
    assert rec["Partition"] == "real"
    # root asks for another user's job with sbatch --uid (submit_as = "uid-option")
    other = SlurmBackend(config(slurm_cluster, submit_as=SubmitAs.UID_OPTION))
    try:
        oid = next(_IDS)
        other_bid = other.submit(launch(oid, "id -un", workdir, user="tester2"))
        assert show_job(other_bid)["UserId"].startswith("tester2(")
        EventLog(other).finished(oid)
    finally:
        cancel_all_of(other)
    done = log.finished(jid)
    assert (done.state, done.reason, done.exit_code) == (
        JobState.FAILED,
        Reason.NON_ZERO_EXIT_CODE,
        3 << 8,
    )
    assert done.backend_id == bid
    assert len(done.nodes) == 1
    assert (workdir / f"slurm-{jid}.out").read_text().split() == ["tester", f"caldera={jid}"]
    assert (workdir / f"slurm-{oid}.out").read_text().split() == ["tester2"]
    log.wait(
        lambda e: (
            e.job_id == jid
            and e.kind is EventKind.STEP
            and e.step is not None
            and e.step.step_id == "batch"
        ),
        60,
        "batch step",
    )
    steps = {e.step.step_id: e.step for e in log.of(jid, EventKind.STEP) if e.step is not None}
    assert steps["batch"].exit_code == 3 << 8
    assert steps["batch"].job_id == jid
    merged = backend.accounting([with_id(user_job.job, bid)])[jid]
    assert merged.job.job_id == jid
    assert merged.job.partition == "caldera-real"
    assert merged.job.state is JobState.FAILED
    assert merged.job.exit_code == 3 << 8
    assert merged.job.user == "tester"
    assert {s.step_id for s in merged.steps} >= {"batch", "0"}
    assert all(s.job_id == jid for s in merged.steps)


def test_submit_is_idempotent_even_from_a_new_backend_object(
    backend: SlurmBackend, workdir: Path, slurm_cluster: SlurmStack
) -> None:
    jid = next(_IDS)
    queued = launch(jid, "true", workdir, begin=int(time.time()) + 3600)
    first = backend.submit(queued)
    assert backend.submit(queued) == first
    fresh = SlurmBackend(config(slurm_cluster))  # a restarted gateway, before reconcile
    try:
        assert fresh.submit(queued) == first
    finally:
        fresh.close()
    tags = scontrol_lines(["-o", "show", "job"]).count(f"Comment={make_tag(INSTANCE, jid)} ")
    assert tags == 1
    log = EventLog(backend)
    pending = log.state(jid, JobState.PENDING, 30)
    assert pending.reason is Reason.BEGIN_TIME
    assert pending.run == 0
    backend.cancel(queued.job)
    assert log.finished(jid, 60).state is JobState.CANCELLED
    # Caldera requeued it (restart count 1): the next run is a new Slurm job
    rerun = replace(queued, job=replace(queued.job, restart_count=1))
    second = backend.submit(rerun)
    assert second != first
    assert backend.submit(rerun) == second
    assert show_job(second)["Comment"].startswith(make_tag(INSTANCE, jid, 1))
    assert log.state(jid, JobState.PENDING, 30).run in (0, 1)
    backend.cancel(rerun.job)
    assert (
        log.wait(
            lambda e: e.job_id == jid and e.kind is EventKind.FINISHED and e.run == 1,
            60,
            "FINISHED of run 1",
        ).state
        is JobState.CANCELLED
    )


def test_hold_release_and_time_limit_of_a_job_slurm_queues(
    backend: SlurmBackend, workdir: Path
) -> None:
    log = EventLog(backend)
    jid = next(_IDS)
    queued = launch(jid, "true", workdir, begin=int(time.time()) + 3600, user="tester")
    bid = backend.submit(queued)
    log.wait(lambda e: e.job_id == jid and e.reason is Reason.BEGIN_TIME, 30, "BeginTime")
    backend.hold(queued.job)
    log.wait(lambda e: e.job_id == jid and e.reason is Reason.JOB_HELD_USER, 30, "held")
    assert show_job(bid)["Reason"] == "JobHeldUser"
    backend.release(queued.job)
    log.wait(
        lambda e: e.job_id == jid and e.reason is Reason.BEGIN_TIME and log.of(jid).index(e) > 1,
        30,
        "released",
    )
    backend.update_time_limit(queued.job, 7)
    assert show_job(bid)["TimeLimit"] == "00:07:00"
    backend.cancel(queued.job)
    assert log.finished(jid, 60).state is JobState.CANCELLED


def test_signal_and_end_the_attempt_of_a_running_job(backend: SlurmBackend, workdir: Path) -> None:
    log = EventLog(backend)
    jid = next(_IDS)
    script = "trap 'echo got USR1' USR1; echo start; for i in $(seq 120); do sleep 0.5; done"
    job = launch(jid, script, workdir, user="tester")
    bid = backend.submit(job)
    started = log.state(jid, JobState.RUNNING)
    assert started.kind is EventKind.STARTED
    assert started.started_at is not None
    assert started.nodes
    out = workdir / f"slurm-{jid}.out"
    deadline = time.monotonic() + 30
    while "start" not in (out.read_text() if out.exists() else ""):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    backend.cancel(job.job, signal=10, batch_only=True)
    while "got USR1" not in out.read_text():
        assert time.monotonic() < deadline, out.read_text()
        time.sleep(0.1)
    # the gateway's requeue: the run ends, confirmed by Slurm, before the next may start
    backend.end_attempt(job.job)
    assert show_job(bid)["JobState"] == "CANCELLED"
    assert log.finished(jid, 60).state is JobState.CANCELLED
    size = len(out.read_text())
    time.sleep(1.5)
    assert len(out.read_text()) == size  # nothing of it runs any more


def test_array_tasks_are_one_task_slurm_arrays_named_after_caldera(
    backend: SlurmBackend, workdir: Path
) -> None:
    from gateway.model.values import ArraySpec, IndexRange

    log = EventLog(backend)
    array_id = next(_IDS)
    spec = ArraySpec((IndexRange(0, 2, 1),), 0)
    tasks = [array_id, next(_IDS), next(_IDS)]
    bids = []
    for index, jid in enumerate(tasks):
        bids.append(
            backend.submit(
                launch(
                    jid,
                    'echo "$SLURM_ARRAY_TASK_ID $CALDERA_ARRAY_JOB_ID $CALDERA_JOB_ID"',
                    workdir,
                    array=spec,
                    array_job_id=array_id,
                    array_task=index,
                )
            )
        )
    for index, (jid, bid) in enumerate(zip(tasks, bids, strict=True)):
        assert bid.endswith(f"_{index}")
        assert backend.caldera_id(bid) == jid
        assert log.finished(jid).state is JobState.COMPLETED
        text = (workdir / f"slurm-{array_id}_{index}.out").read_text()
        assert text.split() == [str(index), str(array_id), str(jid)]


def test_dependencies_among_the_clusters_jobs_are_slurms_own(
    backend: SlurmBackend, workdir: Path
) -> None:
    log = EventLog(backend)
    first, after_ok, after_not_ok = next(_IDS), next(_IDS), next(_IDS)
    a = launch(first, "sleep 3", workdir)
    a_bid = backend.submit(a)
    a_job = replace(a.job, backend_id=a_bid)
    dep_ok = Dependency((DepItem(DepKind.AFTER_OK, first),))
    b = launch(after_ok, "true", workdir, dependency=dep_ok)
    assert backend.native_dependency_ok(b.job, [a_job])
    assert not backend.native_dependency_ok(b.job, [replace(a_job, cluster="elsewhere")])
    b_bid = backend.submit(b)
    assert show_job(b_bid)["Dependency"].startswith(f"afterok:{a_bid}")
    c = launch(
        after_not_ok,
        "true",
        workdir,
        dependency=Dependency((DepItem(DepKind.AFTER_NOT_OK, first),)),
    )
    backend.submit(c)
    held = log.wait(
        lambda e: e.job_id == after_ok and e.reason is Reason.DEPENDENCY, 60, "Dependency"
    )
    assert held.state is JobState.PENDING
    a_done = log.finished(first)
    b_done = log.finished(after_ok)
    assert b_done.state is JobState.COMPLETED
    assert b_done.time >= a_done.time
    never = log.wait(
        lambda e: e.job_id == after_not_ok and e.reason is Reason.DEPENDENCY_NEVER_SATISFIED,
        60,
        "never",
    )
    assert never.state is JobState.PENDING
    backend.cancel(c.job)
    assert log.finished(after_not_ok, 60).state is JobState.CANCELLED


def test_slurms_own_errors_reach_the_user(slurm_cluster: SlurmStack, workdir: Path) -> None:
    plain = SlurmBackend(config(slurm_cluster, partitions=()))  # every partition, same names
    try:
        with pytest.raises(SlurmRejected) as err:
            plain.submit(launch(next(_IDS), "true", workdir, partitions=("nope",)))
        assert not err.value.retryable
        assert str(err.value) == (
            "sbatch: error: invalid partition specified: nope\n"
            "sbatch: error: Batch job submission failed: Invalid partition name specified"
        )
        assert err.value.errno == 2000
        with pytest.raises(SlurmRejected) as err:
            # as sbatch's parser records -c 4 (it raises mincpus too)
            plain.submit(
                launch(
                    next(_IDS), "true", workdir, partitions=("real",), cpus_per_task=4, mincpus=4
                )
            )
        assert str(err.value) == (
            "sbatch: error: CPU count per node can not be satisfied\n"
            "sbatch: error: Batch job submission failed: "
            "Requested node configuration is not available"
        )
        assert err.value.errno == 2014
        assert plain.known_jobs() == {}
    finally:
        cancel_all_of(plain)
