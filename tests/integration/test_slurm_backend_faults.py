"""Faults: Caldera killed mid-run, slurmctld restarted, the cluster unreachable.

Level-triggered: a new backend object reconciles what an old one left (by id, by tag,
through slurmdbd's submit lines); nothing is lost, nothing runs twice.
"""

from __future__ import annotations

import itertools
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from gateway.model.backend import EventKind
from gateway.model.state import JobState, Reason
from slurm_plugin.backend import SlurmBackend
from slurm_plugin.errors import SlurmUnreachable
from slurm_plugin.mapping import make_tag
from tests.integration.test_slurm_backend import (
    INSTANCE,
    cancel_all_of,
    config,
    launch,
    shared_workdir,
)
from tests.support.slurm_jobs import EventLog
from tests.support.slurm_stack import TESTENV, SlurmStack, ensure_up, scontrol_lines, slurm_env

pytestmark = pytest.mark.slurm

_IDS = itertools.count(3000)


@pytest.fixture
def workdir(slurm_cluster: SlurmStack) -> Iterator[Path]:
    yield from shared_workdir(slurm_cluster)


def stop_slurmctld(stack: SlurmStack) -> None:
    """Stop slurmctld with testenv/slurm's own stop (its pid file; SIGTERM, SIGKILL after
    5 s: a shutting-down 22.05 slurmctld can linger for minutes on a hung agent thread),
    under the lock up.sh and down.sh take."""
    lib = TESTENV / "lib.sh"
    subprocess.run(
        [
            "flock",
            "-w",
            "600",
            f"{stack.base}.lock",
            "bash",
            "-c",
            f'source "{lib}"; stop_pidfile "$RUN/slurmctld.pid" slurmctld 5',
        ],
        env={**slurm_env(), "CALDERA_SLURM_BASE": str(stack.base)},
        check=True,
        capture_output=True,
    )


def copies_of_tag(job_id: int, run: int = 0) -> int:
    """How many Slurm jobs carry this job's tag (slurmctld keeps finished jobs 300 s)."""
    tag = make_tag(INSTANCE, job_id, run)
    return sum(
        1
        for line in scontrol_lines(["-o", "show", "job"]).splitlines()
        if f" Comment={tag} " in line or line.endswith(f" Comment={tag}")
    )


def test_a_new_backend_reconciles_what_a_killed_gateway_left(
    slurm_cluster: SlurmStack, workdir: Path
) -> None:
    old = SlurmBackend(config(slurm_cluster))
    new = SlurmBackend(config(slurm_cluster))
    try:
        running, unrecorded, never = next(_IDS), next(_IDS), next(_IDS)
        a = launch(running, "sleep 3; echo ran", workdir)
        b = launch(unrecorded, "echo ran", workdir)
        c = launch(never, "echo ran", workdir)
        a_bid = old.submit(a)
        b_bid = old.submit(b)  # the gateway died before it stored this id
        EventLog(old).state(running, JobState.RUNNING)
        old.close()  # kill -9: nothing more from the old process
        events = new.reconcile([replace(a.job, backend_id=a_bid), b.job, c.job])
        log = EventLog(new)
        log.events.extend(events)  # what reconcile answered counts as seen
        by_job = {e.job_id: e for e in events}
        assert by_job[running].backend_id == a_bid
        assert by_job[running].kind in (EventKind.STARTED, EventKind.FINISHED)
        assert by_job[unrecorded].backend_id == b_bid  # found by its tag
        assert by_job[never].kind is EventKind.LOST  # the gateway requeues it
        # the gateway retries what it had not stored: no second Slurm job
        assert new.submit(b) == b_bid
        # the gateway requeued the LOST job: its next run is a new Slurm job
        c = replace(c, job=replace(c.job, restart_count=1))
        c_bid = new.submit(c)
        for job_id in (running, unrecorded, never):
            assert log.finished(job_id).state is JobState.COMPLETED
        assert log.of(never, EventKind.FINISHED)[0].run == 1
        assert log.of(running, EventKind.FINISHED)[0].backend_id == a_bid
        assert c_bid not in (a_bid, b_bid)
        for job_id, run in ((running, 0), (unrecorded, 0), (never, 1)):
            assert (workdir / f"slurm-{job_id}.out").read_text() == "ran\n"
            assert copies_of_tag(job_id, run) == 1
    finally:
        cancel_all_of(old)
        cancel_all_of(new)


def test_jobs_stay_tracked_across_a_slurmctld_restart(
    slurm_cluster: SlurmStack, workdir: Path
) -> None:
    backend = SlurmBackend(config(slurm_cluster, command_timeout_s=3))
    log = EventLog(backend)
    jid = next(_IDS)
    try:
        backend.submit(launch(jid, "sleep 4; echo survived", workdir))
        log.state(jid, JobState.RUNNING)
        stop_slurmctld(slurm_cluster)
        try:
            gone = log.wait(
                lambda e: e.job_id == jid and e.reason is Reason.CLUSTER_UNREACHABLE,
                30,
                "unreachable",
            )
            assert gone.state is JobState.RUNNING
            started = time.monotonic()
            with pytest.raises(SlurmUnreachable) as err:
                backend.submit(launch(next(_IDS), "true", workdir))
            assert err.value.retryable
            assert time.monotonic() - started < 2  # fails fast, no 9 s sbatch retries
        finally:
            ensure_up()  # testenv/slurm/up.sh starts slurmctld again (state kept)
        done = log.finished(jid)
        assert done.state is JobState.COMPLETED
        assert (workdir / f"slurm-{jid}.out").read_text() == "survived\n"
        assert backend.describe().reachable
    finally:
        cancel_all_of(backend)


def test_an_unreachable_cluster_keeps_its_jobs_and_is_reconciled_when_back(
    slurm_cluster: SlurmStack, workdir: Path
) -> None:
    etc = Path(tempfile.mkdtemp(prefix="slurm-conf-"))
    for f in slurm_cluster.slurm_conf.parent.iterdir():
        shutil.copy(f, etc / f.name)
    conf = etc / "slurm.conf"
    good = conf.read_text()
    bad = good.replace("SlurmctldPort=6817", "SlurmctldPort=6999")  # nothing listens there
    assert bad != good
    backend = SlurmBackend(config(slurm_cluster, slurm_conf=str(conf), command_timeout_s=3))
    log = EventLog(backend)
    jid = next(_IDS)
    try:
        backend.submit(launch(jid, "sleep 3; echo done", workdir))
        log.state(jid, JobState.RUNNING)
        conf.write_text(bad)
        gone = log.wait(
            lambda e: e.job_id == jid and e.reason is Reason.CLUSTER_UNREACHABLE, 30, "unreachable"
        )
        assert gone.state is JobState.RUNNING  # keeps its state, with the reason
        assert "Unable to contact slurm controller" in (gone.message or "") or "did not answer" in (
            gone.message or ""
        )
        assert not backend.describe().reachable
        with pytest.raises(SlurmUnreachable) as err:
            backend.submit(launch(next(_IDS), "true", workdir))
        assert err.value.retryable
        time.sleep(4)  # the job finishes while Caldera cannot see the cluster
        conf.write_text(good)
        done = log.finished(jid)
        assert done.state is JobState.COMPLETED
        assert (workdir / f"slurm-{jid}.out").read_text() == "done\n"
        assert backend.describe().reachable
    finally:
        conf.write_text(good)
        cancel_all_of(backend)
        shutil.rmtree(etc, ignore_errors=True)
