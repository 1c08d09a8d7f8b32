"""The slurmrestd transport against the real cluster's slurmrestd (22.05, Unix socket, local
auth, running as `tester`: every job submitted through it runs as tester)."""

from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.model.state import JobState, Reason
from slurm_plugin.backend import SlurmBackend
from slurm_plugin.config import SlurmClusterConfig, Transport
from slurm_plugin.errors import SlurmRejected, SlurmUnreachable
from slurm_plugin.mapping import SlurmRef, make_tag
from slurm_plugin.rest import RestClient
from tests.integration.test_slurm_backend import (
    INSTANCE,
    cancel_all_of,
    config,
    launch,
    shared_workdir,
)
from tests.support.slurm_jobs import EventLog
from tests.support.slurm_stack import SlurmStack, show_job

pytestmark = pytest.mark.slurm

_IDS = itertools.count(2000)


@pytest.fixture
def workdir(slurm_cluster: SlurmStack) -> Iterator[Path]:
    yield from shared_workdir(slurm_cluster)


def rest_config(stack: SlurmStack, url: str | None = None, **kw: object) -> SlurmClusterConfig:
    return config(
        stack,
        transport=Transport.REST,
        rest_url=url or f"unix:{stack.rest_socket}",
        rest_user="tester",
        **kw,
    )


@pytest.fixture
def rest_backend(slurm_cluster: SlurmStack) -> Iterator[SlurmBackend]:
    b = SlurmBackend(rest_config(slurm_cluster))
    yield b
    cancel_all_of(b)


def test_the_api_version_is_discovered_and_the_cluster_read(slurm_cluster: SlurmStack) -> None:
    client = RestClient(rest_config(slurm_cluster))
    assert client.api() == "v0.0.38"
    assert client.version() == "22.05.8"
    client.ping()
    raw = client.cluster()
    assert {"real", "debug"} <= {p.name for p in raw.cluster.partitions}
    node04 = next(n for n in raw.cluster.nodes if n.name == "node04")
    assert node04.gres == (("gpu", "a100", 4),)
    older = RestClient(rest_config(slurm_cluster, rest_versions=("v0.0.99", "v0.0.37")))
    assert older.api() == "v0.0.37"


def test_a_job_submitted_through_slurmrestd_is_tracked_signalled_and_cancelled(
    rest_backend: SlurmBackend, workdir: Path
) -> None:
    log = EventLog(rest_backend)
    jid = next(_IDS)
    job = launch(
        jid, 'id -un; echo "$CALDERA_JOB_ID"; exit 2', workdir, user="tester", comment="via rest"
    )
    bid = rest_backend.submit(job)
    rec = show_job(bid)
    assert rec["Comment"].strip() == f"{make_tag(INSTANCE, jid)} via rest"
    assert rec["Command"] == "(null)"  # slurmrestd, not sbatch, submitted it
    done = log.finished(jid)
    assert (done.state, done.exit_code) == (JobState.FAILED, 2 << 8)
    assert (workdir / f"slurm-{jid}.out").read_text().split() == ["tester", str(jid)]
    client = rest_backend.client
    rows = client.status([SlurmRef(int(bid))])
    assert rows[0].exit_code == 2 << 8
    assert rows[0].comment.startswith(make_tag(INSTANCE, jid))
    first = client.statuses({"tester"})
    again = client.statuses({"tester"})  # 304 Not Modified, or a fresh list
    assert {r.ref.text for r in first} & {r.ref.text for r in again}
    # hold, release and cancel of a queued job through slurmrestd's job update
    qid = next(_IDS)
    queued = launch(qid, "true", workdir, user="tester", begin=2_000_000_000)
    qbid = rest_backend.submit(queued)
    assert isinstance(client, RestClient)
    client.control(SlurmRef(int(qbid)), "hold")
    assert show_job(qbid)["Reason"] == "JobHeldUser"
    client.control(SlurmRef(int(qbid)), "release")
    assert show_job(qbid)["Reason"] in ("BeginTime", "None")
    client.update(SlurmRef(int(qbid)), {"TimeLimit": "9"})
    assert show_job(qbid)["TimeLimit"] == "00:09:00"
    client.signal(SlurmRef(int(qbid)), None)
    assert log.finished(qid, 60).state is JobState.CANCELLED


def test_what_slurmrestd_cannot_say_goes_through_the_commands(
    rest_backend: SlurmBackend, workdir: Path
) -> None:
    log = EventLog(rest_backend)
    pinned, as_root = next(_IDS), next(_IDS)
    # --nodelist has no key in 22.05's job description
    bid = rest_backend.submit(launch(pinned, "hostname", workdir, user="tester", nodelist="node02"))
    assert show_job(bid)["ReqNodeList"] == "node02"
    # slurmrestd acts as tester: root's job goes through the commands, as root
    rbid = rest_backend.submit(launch(as_root, "id -un", workdir, user="root"))
    assert show_job(rbid)["UserId"].startswith("root(")
    assert log.finished(pinned).nodes == ("node02",)
    log.finished(as_root)
    assert (workdir / f"slurm-{as_root}.out").read_text().split() == ["root"]


def test_slurmrestd_errors_and_unreachability(slurm_cluster: SlurmStack, workdir: Path) -> None:
    link_dir = Path(tempfile.mkdtemp(prefix="rest-link-"))
    link = link_dir / "slurmrestd.sock"
    os.symlink(slurm_cluster.rest_socket, link)
    rest_only = rest_config(slurm_cluster, url=f"unix:{link}", commands=False, partitions=())
    b = SlurmBackend(rest_only)
    try:
        with pytest.raises(SlurmRejected) as err:
            b.submit(launch(next(_IDS), "true", workdir, user="tester", partitions=("nope",)))
        assert "Invalid partition name specified" in str(err.value)
        assert not err.value.retryable
        with pytest.raises(SlurmRejected, match="commands are disabled"):
            b.submit(launch(next(_IDS), "true", workdir, user="root", partitions=("real",)))
        log = EventLog(b)
        jid = next(_IDS)
        job = launch(jid, "sleep 1", workdir, user="tester", partitions=("real",))
        b.submit(job)
        link.unlink()  # slurmrestd gone
        gone = log.wait(
            lambda e: e.job_id == jid and e.reason is Reason.CLUSTER_UNREACHABLE, 30, "unreachable"
        )
        assert gone.state in (JobState.PENDING, JobState.RUNNING)
        assert not b.describe().reachable
        with pytest.raises(SlurmUnreachable) as down:
            b.submit(launch(next(_IDS), "true", workdir, user="tester", partitions=("real",)))
        assert down.value.retryable
        os.symlink(slurm_cluster.rest_socket, link)  # back
        done = log.finished(jid)
        assert done.state is JobState.COMPLETED
        assert b.describe().reachable
    finally:
        if not link.exists():
            os.symlink(slurm_cluster.rest_socket, link)
        cancel_all_of(b)
        link.unlink()
        link_dir.rmdir()
