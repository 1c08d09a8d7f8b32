"""One queue over the local machine and a Kubernetes cluster: a job bursts to Kubernetes when
home is full, and a job waiting in Kubernetes' queue moves home when home frees up - each
job run once.

An outage is the API server stopped (SIGSTOP: it holds its connections and answers
nothing, as a partitioned or hung control plane does) and continued afterwards.

The home cluster is the gateway's own local site (two 2-CPU nodes); the other cluster is the
real API server of testenv/k8s with its KWOK nodes, offered as partition `debug` too, whose
gangs Caldera's binder places (so the router predicts their starts from its own plan). KWOK
runs nothing: a rank "ends" when the test annotates its pod (end_rank), so on Kubernetes
"ran" means the job's pods were bound and Running; at home the job's script records its run.
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from k8s_bridge.kube import PODS, KubeClient
from tests.integration.test_k8s_bridge_helpers import (
    assert_nothing_left,
    end_rank,
    kube,
    new_namespace,
    wait_until,
)
from tests.support.gateway_env import Gateway, discard_gateway, start_gateway
from tests.support.k8s_env import K8sEnv

pytestmark = [pytest.mark.k8s, pytest.mark.federation]
__all__ = ["kube"]


@pytest.fixture
def ns(k8s_env: K8sEnv) -> Iterator[str]:
    yield from new_namespace(k8s_env, "fedk")


@pytest.fixture
def fedk(k8s_env: K8sEnv, ns: str) -> Iterator[Gateway]:
    base = Path(tempfile.mkdtemp(prefix="caldera-fedk-", dir="/tmp"))
    config = (
        'cluster_name = "home"\n'
        "agents = false\n"
        '[[nodes]]\nname = "fedk1"\ncpus = 2\nmemory_mb = 2000\n'
        '[[nodes]]\nname = "fedk2"\ncpus = 2\nmemory_mb = 2000\n'
        '[[partitions]]\nname = "debug"\ndefault = true\n'
        "[kubernetes]\n[[kubernetes.cluster]]\n"
        'name = "kwok"\n'
        f'kubeconfig = "{k8s_env.admin_kubeconfig}"\n'
        "volcano = false\n"
        f'namespace = "{ns}"\n'
        'default_partition = "debug"\n'
        "[[kubernetes.cluster.filesystem]]\n"
        f'prefix = "{base}"\n'
        '[routing]\nhome = "home"\nmargin = "30s"\noutage_timeout = "10s"\n'
    )
    gw = start_gateway(base, config)
    try:
        yield gw
    finally:
        gw.run(["scancel", "-u", "root"])
        discard_gateway(gw, base)


def _submit(gw: Gateway, body: str, *args: str) -> int:
    path = gw.workdir / f"job-{time.time_ns()}.sh"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return gw.sbatch(*args, str(path))


def _pods(kube: KubeClient, ns: str, job: int, phase: str | None = "Running") -> list[str]:
    items, _ = kube.list(PODS, ns, label_selector=f"caldera.io/job-id={job}")
    return sorted(
        p["metadata"]["name"]
        for p in items
        if phase is None or (p.get("status") or {}).get("phase") == phase
    )


def _routing(gw: Gateway, job: int) -> list[tuple[str, str | None, str]]:
    page = gw.api(f"/ui/api/jobs/{job}")
    assert isinstance(page, dict)
    return [(r["kind"], r["from"], r["to"]) for r in page["routing"]]


def test_a_full_home_bursts_to_kubernetes_and_the_gang_runs_there_once(
    fedk: Gateway, kube: KubeClient, ns: str
) -> None:
    marker = fedk.workdir / "blocker.ran"
    blocker = _submit(fedk, f"touch {marker}\nsleep 300\n", "-t", "10", "-N", "2", "--exclusive")
    fedk.wait(blocker, states=("RUNNING",), timeout=60)
    job = _submit(fedk, "srun hostname\n", "-N", "2", "-t", "5")
    wait_until("2 ranks running on kwok", lambda: len(_pods(kube, ns, job)) == 2, 60)
    wait_until("the job RUNNING", lambda: fedk.job(job)["state"] == "RUNNING", 30)
    record = fedk.job(job)
    assert record["cluster"] == "kwok", record
    shown = fedk.ok(["scontrol", "show", "job", str(job)])
    assert "FedOrigin=home FedViableSiblings=home,kwok FedActiveSiblings=kwok" in shown
    assert "Routing=burst: kwok starts now, home (home) in " in shown
    line = fedk.ok(["squeue", "-h", "-j", str(job), "-o", "%i %P %T %D %N"]).split()
    assert line[:4] == [str(job), "debug", "RUNNING", "2"], line
    assert all(
        n.startswith("kwok-node-")
        for n in fedk.ok(["scontrol", "show", "hostnames", line[4]]).split()
    )
    end_rank(kube, ns, f"caldera-{job}-0")
    final = fedk.wait(job, timeout=60)
    assert final["state"] == "COMPLETED", final
    acct = fedk.ok(["sacct", "-j", str(job), "-X", "-P", "-n", "-o", "JobID,State,NNodes"])
    assert acct.strip() == f"{job}|COMPLETED|2", acct
    assert _routing(fedk, job) == [("route", None, "kwok")]
    assert_nothing_left(kube, ns)
    assert marker.exists()
    fedk.ok(["scancel", str(blocker)])


def test_a_job_queued_on_kubernetes_moves_home_when_home_frees_up(
    fedk: Gateway, kube: KubeClient, ns: str, k8s_env: K8sEnv
) -> None:
    blocker = _submit(fedk, "sleep 300\n", "-t", "20", "-N", "2", "--exclusive")
    fedk.wait(blocker, states=("RUNNING",), timeout=60)
    # every KWOK node taken for 3 minutes by a job pinned there
    nodes = str(k8s_env.nodes)
    filler = _submit(fedk, "sleep 600\n", "-M", "kwok", "-N", nodes, "--exclusive", "-t", "3")
    wait_until("the filler's ranks running", lambda: len(_pods(kube, ns, filler)) == int(nodes), 60)
    runs = fedk.workdir / "mover.runs"
    job = _submit(fedk, f"echo $SLURM_JOB_ID >> {runs}\n", "-t", "1")
    # Kubernetes frees up in ~3 minutes, home in ~20: it waits in Kubernetes' queue

    def queued_on_kwok() -> bool:
        record = fedk.job(job)
        return record["cluster"] == "kwok" and record["state"] == "PENDING"

    wait_until("the job waiting on kwok", queued_on_kwok, 60)
    assert _pods(kube, ns, job, phase=None) == []  # nothing of it exists there yet
    fedk.ok(["scancel", str(blocker)])  # home frees up: the next review moves it
    final = fedk.wait(job, timeout=120)
    assert final["state"] == "COMPLETED", final
    assert final["cluster"] == "home"
    assert runs.read_text().split() == [str(job)]  # ran once, at home
    assert _pods(kube, ns, job, phase=None) == []  # and never on Kubernetes
    # nothing of it was handed to Kubernetes (Caldera places there itself): a new route,
    # from the cluster it waited for, not a revoke
    assert _routing(fedk, job) == [("route", None, "kwok"), ("route", "kwok", "home")]
    assert "Routing=home: home starts now" in fedk.ok(["scontrol", "show", "job", str(job)])
    fedk.ok(["scancel", str(filler)])
    assert_nothing_left(kube, ns)


def _stopped_api_server(env: K8sEnv) -> int:
    pid = int((env.base_dir / "run" / "kube-apiserver.pid").read_text().split()[0])
    os.kill(pid, signal.SIGSTOP)
    return pid


def test_an_unanswering_cluster_loses_its_unstarted_jobs_and_keeps_its_running_ones(
    fedk: Gateway, kube: KubeClient, ns: str, k8s_env: K8sEnv
) -> None:
    """Kubernetes stops answering for longer than outage_timeout (10 s): the job routed
    there and not started goes home (and runs once, there), the gang running there stays
    the job's one run and is reconciled when the API server answers again."""
    blocker = _submit(fedk, "sleep 300\n", "-t", "20", "-N", "2", "--exclusive")
    fedk.wait(blocker, states=("RUNNING",), timeout=60)
    nodes = str(k8s_env.nodes)
    filler = _submit(fedk, "sleep 600\n", "-M", "kwok", "-N", nodes, "--exclusive", "-t", "3")
    wait_until("the filler running", lambda: len(_pods(kube, ns, filler)) == int(nodes), 60)
    wait_until("the filler RUNNING", lambda: fedk.job(filler)["state"] == "RUNNING", 30)
    runs = fedk.workdir / "outage.runs"
    job = _submit(fedk, f"echo $SLURM_JOB_ID >> {runs}\n", "-t", "1")
    wait_until(
        "the job waiting on kwok",
        lambda: fedk.job(job)["cluster"] == "kwok" and fedk.job(job)["state"] == "PENDING",
        60,
    )
    pid = _stopped_api_server(k8s_env)
    try:
        # the outage lasts past outage_timeout: the job's route leaves kwok
        wait_until("the job routed home", lambda: fedk.job(job)["cluster"] == "home", 90)
        assert fedk.job(filler)["state"] == "RUNNING"  # still its one run
        fedk.ok(["scancel", str(blocker)])
        final = fedk.wait(job, timeout=90)
        assert final["state"] == "COMPLETED", final
        assert final["cluster"] == "home"
    finally:
        os.kill(pid, signal.SIGCONT)
    assert runs.read_text().split() == [str(job)]
    assert _pods(kube, ns, job, phase=None) == []
    kinds = _routing(fedk, job)
    assert kinds[0] == ("route", None, "kwok"), kinds
    assert kinds[-1] == ("route", "kwok", "home"), kinds
    # back: the filler's gang is found as it was and ends as its rank 0 says
    assert len(_pods(kube, ns, filler)) == int(nodes)
    end_rank(kube, ns, f"caldera-{filler}-0")
    final = fedk.wait(filler, timeout=90)
    assert final["state"] == "COMPLETED", final
    assert final["cluster"] == "kwok"
    assert_nothing_left(kube, ns)
