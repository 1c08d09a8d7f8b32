"""A Kubernetes cluster behind the gateway: the installed commands, a real gateway, the real
API server of testenv/k8s with KWOK nodes (Caldera's binder places the gangs).

KWOK has no kubelet: a rank "ends" when the test annotates its pod (end_rank), as the
integration tests do; what the pods would run is not executed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from k8s_bridge.kube import PODS, KubeClient
from tests.integration.test_k8s_bridge_helpers import (
    assert_nothing_left,
    end_rank,
    kube,
    new_namespace,
    wait_until,
)
from tests.support.gateway_env import Gateway, running_gateway
from tests.support.k8s_env import K8sEnv

pytestmark = pytest.mark.k8s
__all__ = ["kube"]


@pytest.fixture
def ns(k8s_env: K8sEnv) -> Iterator[str]:
    yield from new_namespace(k8s_env, "gw")


@pytest.fixture
def k8s_gateway(k8s_env: K8sEnv, ns: str) -> Iterator[Gateway]:
    config = (
        "agents = false\n"
        "[kubernetes]\n"
        "[[kubernetes.cluster]]\n"
        'name = "kwok"\n'
        f'kubeconfig = "{k8s_env.admin_kubeconfig}"\n'
        "volcano = false\n"
        f'namespace = "{ns}"\n'
        "max_pending_pods = 64\n"
    )
    with running_gateway(config, "caldera-e2e-k8s-") as gw:
        yield gw


def _pods(kube: KubeClient, ns: str, job_id: int, phase: str = "Running") -> list[str]:
    items, _ = kube.list(PODS, ns, label_selector=f"caldera.io/job-id={job_id}")
    return sorted(
        p["metadata"]["name"] for p in items if (p.get("status") or {}).get("phase") == phase
    )


def _state(gw: Gateway, job_id: int) -> str:
    return str(gw.job(job_id)["state"])


def test_sinfo_shows_the_kubernetes_partition_next_to_the_local_one(
    k8s_gateway: Gateway, k8s_env: K8sEnv
) -> None:
    out = k8s_gateway.ok(["sinfo", "-h", "-o", "%P %D %c"])
    rows = dict(line.split(" ", 1) for line in out.splitlines())
    assert rows["k8s"] == f"{k8s_env.nodes} 64"
    assert "debug*" in rows


def test_a_gang_job_runs_on_kubernetes_and_ends_with_rank_zero(
    k8s_gateway: Gateway, kube: KubeClient, ns: str
) -> None:
    gw = k8s_gateway
    job = gw.sbatch("-p", "k8s", "-N", "3", "--gres=gpu:8", "--wrap", "srun hostname")
    wait_until("3 ranks running", lambda: len(_pods(kube, ns, job)) == 3, 60)
    wait_until("the job RUNNING", lambda: _state(gw, job) == "RUNNING", 30)
    line = gw.ok(["squeue", "-h", "-j", str(job), "-o", "%i %P %T %D %N"]).split()
    assert line[:4] == [str(job), "k8s", "RUNNING", "3"]
    nodes = gw.ok(["scontrol", "show", "hostnames", line[4]]).split()
    assert len(set(nodes)) == 3  # --gres=gpu:8 is a whole KWOK node per rank
    assert all(n.startswith("kwok-node-") for n in nodes)
    end_rank(kube, ns, f"caldera-{job}-0")
    gw.wait(job)
    acct = gw.ok(
        ["sacct", "-j", str(job), "-X", "-P", "-n", "-o", "JobID,Partition,State,ExitCode"]
    )
    assert acct.strip() == f"{job}|k8s|COMPLETED|0:0"
    assert_nothing_left(kube, ns)


def test_a_failed_rank_fails_the_job_with_its_exit_code(
    k8s_gateway: Gateway, kube: KubeClient, ns: str
) -> None:
    gw = k8s_gateway
    job = gw.sbatch("-p", "k8s", "-N", "2", "--no-requeue", "--wrap", "srun ./solver")
    wait_until("2 ranks running", lambda: len(_pods(kube, ns, job)) == 2, 60)
    end_rank(kube, ns, f"caldera-{job}-1", exit_code=3)
    gw.wait(job)
    acct = gw.ok(["sacct", "-j", str(job), "-X", "-P", "-n", "-o", "State,ExitCode"])
    assert acct.strip() == "FAILED|3:0"
    assert_nothing_left(kube, ns)


def test_scancel_removes_every_object_and_unsupported_signals_are_refused(
    k8s_gateway: Gateway, kube: KubeClient, ns: str
) -> None:
    gw = k8s_gateway
    job = gw.sbatch("-p", "k8s", "-N", "2", "--wrap", "sleep 600")
    wait_until("2 ranks running", lambda: len(_pods(kube, ns, job)) == 2, 60)
    wait_until("the job RUNNING", lambda: _state(gw, job) == "RUNNING", 30)
    # a KWOK pod runs no process, so the exec that carries the signal fails (on real
    # kubelet nodes it is delivered: test_gateway_kubelet_srun.py)
    r = gw.run(["scancel", "-s", "USR1", str(job)])
    assert r.returncode == 2036 % 256  # scancel exits with the Slurm error code, truncated
    assert r.stderr == (
        f"scancel: error: Kill job error on job id {job}: "
        "Requested operation not supported on this system\n"
    )
    assert _state(gw, job) == "RUNNING"
    gw.ok(["scancel", str(job)])
    gw.wait(job)
    assert _state(gw, job) == "CANCELLED"
    assert_nothing_left(kube, ns)


def test_requeue_runs_the_job_again_as_a_new_attempt(
    k8s_gateway: Gateway, kube: KubeClient, ns: str
) -> None:
    gw = k8s_gateway
    job = gw.sbatch("-p", "k8s", "-N", "2", "--wrap", "srun ./step")
    wait_until("attempt 0 running", lambda: len(_pods(kube, ns, job)) == 2, 60)
    wait_until("the job RUNNING", lambda: _state(gw, job) == "RUNNING", 30)
    gw.ok(["scontrol", "requeue", str(job)])
    # pending for slurmctld's requeue delay (cred_expire + 1 s), lifted as a user would
    assert gw.ok(["squeue", "-h", "-j", str(job), "-o", "%T %r"]).split() == [
        "PENDING",
        "BeginTime",
    ]
    gw.ok(["scontrol", "update", f"JobId={job}", "StartTime=now"])
    wait_until(
        "attempt 1 running",
        lambda: _pods(kube, ns, job) == [f"caldera-{job}-r1-0", f"caldera-{job}-r1-1"],
        60,
    )
    wait_until("the job RUNNING again", lambda: _state(gw, job) == "RUNNING", 30)
    show = gw.ok(["scontrol", "show", "job", str(job)])
    assert re.search(r"\bRestarts=1\b", show)
    end_rank(kube, ns, f"caldera-{job}-r1-0")
    gw.wait(job)
    assert _state(gw, job) == "COMPLETED"
    assert_nothing_left(kube, ns)
