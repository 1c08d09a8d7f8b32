"""Jobs that fail on real kubelet nodes (testenv/kubelet) end as Slurm users expect: a node
that goes NotReady fails its job (NODE_FAIL) or requeues it as a whole (--requeue), a rank
that dies or whose pod is deleted ends the whole gang, and an image that cannot be pulled or a
pod the API server refuses ends the job FAILED with Reason=JobLaunchFailure and the cluster's
message. One gateway (Caldera's own gang mode) and one namespace for the module: these tests
are slow (a node is NotReady only after the node controller's grace period, 40 s).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from k8s_bridge.kube import PODS, KubeClient
from tests.integration.test_k8s_bridge_helpers import admin_client, assert_nothing_left, wait_until
from tests.support.gateway_env import Gateway, discard_gateway, start_gateway
from tests.support.kubelet_env import KubeletEnv, KubeletNode, node_down, nodes_up
from tests.support.kubelet_gateway import cluster_config, job_namespace, shared_tree

pytestmark = pytest.mark.kubelet

Obj = dict[str, object]


@pytest.fixture(scope="module")
def core(kubelet_env: KubeletEnv) -> client.CoreV1Api:
    return client.CoreV1Api(kubelet_env.k8s.api_client())


@pytest.fixture(scope="module")
def ns(kubelet_env: KubeletEnv) -> Iterator[str]:
    yield from job_namespace(kubelet_env, "gw-klf")


@pytest.fixture(scope="module")
def kube(kubelet_env: KubeletEnv) -> KubeClient:
    return admin_client(kubelet_env.k8s)


@pytest.fixture(scope="module")
def base() -> Iterator[Path]:
    yield from shared_tree("caldera-e2e-kubelet-faults-")


@pytest.fixture(scope="module")
def gw(kubelet_env: KubeletEnv, ns: str, base: Path) -> Iterator[Gateway]:
    config = cluster_config(
        kubelet_env, ns, base, cluster="allow_host_mounts = true\nnode_lost_after_s = 5\n"
    )
    gw = start_gateway(base / "gw", config)
    try:
        yield gw
    finally:
        discard_gateway(gw)


@pytest.fixture
def out(base: Path) -> Path:
    """A directory the pods write into (a hostPath: the nodes share this filesystem)."""
    path = base / "out" / uuid.uuid4().hex[:6]
    path.mkdir()
    os.chmod(path, 0o1777)
    return path


@pytest.fixture
def home(base: Path) -> Path:
    return base / "users" / "tester"


def _sbatch(gw: Gateway, env: KubeletEnv, home: Path, *args: str) -> int:
    return gw.sbatch("-p", env.partition, *args, cwd=home, user="tester")


def _pods(kube: KubeClient, ns: str, job: int) -> list[Obj]:
    items, _ = kube.list(PODS, ns, label_selector=f"caldera.io/job-id={job}")
    return items


def _phase(pod: Obj) -> str:
    status = pod.get("status")
    return str(status.get("phase")) if isinstance(status, dict) else ""


def _field(pod: Obj, part: str, key: str) -> str:
    value = pod.get(part)
    assert isinstance(value, dict)
    return str(value.get(key, ""))


def _label(pod: Obj, key: str) -> str:
    meta = pod["metadata"]
    assert isinstance(meta, dict)
    return str(meta["labels"][f"caldera.io/{key}"])


def _live_attempts(kube: KubeClient, ns: str, job: int) -> set[str]:
    """The attempts of a job that have a pod not ended and not being deleted."""
    return {
        _label(p, "attempt")
        for p in _pods(kube, ns, job)
        if _phase(p) in ("Pending", "Running") and not _field(p, "metadata", "deletionTimestamp")
    }


def _acct(gw: Gateway, job: int, fields: str, *extra: str) -> list[str]:
    text = gw.ok(["sacct", "-j", str(job), "-X", "-P", "-n", "-o", fields, *extra])
    return text.strip().splitlines()


def _node_state(gw: Gateway, name: str) -> str:
    show = gw.ok(["scontrol", "show", "node", name])
    match = re.search(r"\bState=(\S+)", show)
    assert match is not None, show
    return match.group(1)


@pytest.fixture
def node_restored(kubelet_env: KubeletEnv) -> Iterator[None]:
    """Whatever a test takes down or cordons is back (Ready, schedulable) afterwards."""
    yield
    nodes_up()
    core = client.CoreV1Api(kubelet_env.k8s.api_client())
    for node in kubelet_env.nodes:
        core.patch_node(node.name, {"spec": {"unschedulable": None}})


def test_a_node_that_goes_notready_fails_its_job_and_requeues_a_requeue_job_elsewhere_once(
    gw: Gateway,
    kubelet_env: KubeletEnv,
    kube: KubeClient,
    core: client.CoreV1Api,
    ns: str,
    out: Path,
    home: Path,
    node_restored: None,
) -> None:
    """Two 1-rank jobs on kubelet-node-01 (node 02 cordoned while they start), then node 01
    fails: the --no-requeue job ends NODE_FAIL (Reason NodeDown), the --requeue job runs
    again on node 02, as a whole and once: no two attempts of it are ever live together."""
    first, second = kubelet_env.nodes
    core.patch_node(second.name, {"spec": {"unschedulable": True}})
    wait_until("node 02 drained", lambda: "DRAIN" in _node_state(gw, second.name), 30)
    mount = f"--container-mounts={out}:/out"
    stays = _sbatch(
        gw,
        kubelet_env,
        home,
        "--no-requeue",
        mount,
        "--wrap",
        "touch /out/stays; while :; do sleep 1; done",
    )
    again = _sbatch(
        gw,
        kubelet_env,
        home,
        "--requeue",
        mount,
        "--wrap",
        "hostname >>/out/runs; while [ ! -e /out/go ]; do sleep 0.2; done",
    )
    wait_until(
        "both scripts running", lambda: (out / "stays").exists() and (out / "runs").exists(), 90
    )
    for job in (stays, again):
        assert [_field(p, "spec", "nodeName") for p in _pods(kube, ns, job)] == [first.name]
    core.patch_node(second.name, {"spec": {"unschedulable": None}})
    wait_until("node 02 back", lambda: "DRAIN" not in _node_state(gw, second.name), 30)

    node_down(kubelet_env, first)
    deadline = time.monotonic() + 180
    while len((out / "runs").read_text().splitlines()) < 2:
        assert len(_live_attempts(kube, ns, again)) <= 1  # never two live attempts
        assert time.monotonic() < deadline, "the --requeue job did not run again"
        time.sleep(0.5)
    gw.wait(stays, timeout=30)
    assert _acct(gw, stays, "State,ExitCode,NodeList") == [f"NODE_FAIL|0:0|{first.name}"]
    show = gw.ok(["scontrol", "show", "job", str(stays)])
    assert re.search(r"\bJobState=NODE_FAIL Reason=NodeDown\b", show), show
    assert "DOWN" in _node_state(gw, first.name)

    runs = (out / "runs").read_text().splitlines()
    assert runs == [f"caldera-{again}-0", f"caldera-{again}-r1-0"]  # attempt 0, then 1

    def where() -> list[str]:
        return [
            _field(p, "spec", "nodeName") for p in _pods(kube, ns, again) if _phase(p) == "Running"
        ]

    wait_until("the second run Running on node 02", lambda: where() == [second.name], 30)
    assert _live_attempts(kube, ns, again) == {"1"}
    (out / "go").touch()
    gw.wait(again, timeout=60)
    show = gw.ok(["scontrol", "show", "job", str(again)])
    assert re.search(r"\bJobState=COMPLETED\b", show), show
    assert re.search(r"\bRestarts=1\b", show), show
    # both runs recorded: the one the node failure ended, and the one that completed
    assert _acct(gw, again, "State,NodeList", "-D") == [
        f"NODE_FAIL|{first.name}",
        f"COMPLETED|{second.name}",
    ]
    assert (out / "runs").read_text().splitlines() == runs  # the first run did not go on
    assert_nothing_left(kube, ns)


def _container(pod: Obj) -> str:
    status = pod["status"]
    assert isinstance(status, dict)
    return str(status["containerStatuses"][0]["containerID"]).removeprefix("containerd://")


def _node(env: KubeletEnv, name: str) -> KubeletNode:
    return next(n for n in env.nodes if n.name == name)


def test_a_failing_rank_ends_or_requeues_the_whole_gang(
    gw: Gateway, kubelet_env: KubeletEnv, kube: KubeClient, ns: str, out: Path, home: Path
) -> None:
    """2-rank gangs: rank 1's container killed (exits 137 by itself, as after a crash) ends
    a --no-requeue job FAILED with that rank's status; rank 1's pod deleted by someone
    requeues a --requeue job as a whole, which then runs again and completes. No pod of the
    ended attempts remains."""
    mount = f"--container-mounts={out}:/out"
    failing = _sbatch(
        gw,
        kubelet_env,
        home,
        "-N",
        "2",
        "--no-requeue",
        mount,
        "--wrap",
        "touch /out/failing; while :; do sleep 1; done",
    )
    again = _sbatch(
        gw,
        kubelet_env,
        home,
        "-N",
        "2",
        "--requeue",
        mount,
        "--wrap",
        "hostname >>/out/runs; while [ ! -e /out/go ]; do sleep 0.2; done",
    )
    wait_until(
        "both scripts running", lambda: (out / "failing").exists() and (out / "runs").exists(), 90
    )

    def rank_one(job: int) -> Obj:
        pods = [p for p in _pods(kube, ns, job) if _label(p, "rank") == "1"]
        assert len(pods) == 1
        return pods[0]

    wait_until(
        "rank 1 of both running",
        lambda: all(_phase(rank_one(j)) == "Running" for j in (failing, again)),
    )
    victim = rank_one(failing)
    node = _node(kubelet_env, _field(victim, "spec", "nodeName"))
    subprocess.run(
        [
            "ctr",
            "-a",
            str(node.containerd),
            "-n",
            "k8s.io",
            "tasks",
            "kill",
            "-s",
            "SIGKILL",
            _container(victim),
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )
    kube.delete(PODS, ns, _field(rank_one(again), "metadata", "name"))

    gw.wait(failing, timeout=60)
    assert _acct(gw, failing, "State,ExitCode") == ["FAILED|0:9"]  # SIGKILL, as Slurm shows it
    show = gw.ok(["scontrol", "show", "job", str(failing)])
    assert re.search(r"\bJobState=FAILED Reason=NonZeroExitCode\b", show), show
    wait_until("no pod of the failed gang", lambda: not _pods(kube, ns, failing), 30)

    wait_until(
        "the gang's second run", lambda: len((out / "runs").read_text().splitlines()) == 2, 90
    )
    assert (out / "runs").read_text().splitlines() == [
        f"caldera-{again}-0",
        f"caldera-{again}-r1-0",
    ]
    assert _live_attempts(kube, ns, again) == {"1"}  # the first attempt's pods all gone
    (out / "go").touch()
    gw.wait(again, timeout=60)
    assert _acct(gw, again, "State", "-D") == ["NODE_FAIL", "COMPLETED"]
    assert re.search(r"\bRestarts=1\b", gw.ok(["scontrol", "show", "job", str(again)]))
    assert_nothing_left(kube, ns)


def test_an_image_that_does_not_exist_or_a_pod_the_api_server_rejects_fails_the_launch(
    gw: Gateway,
    kubelet_env: KubeletEnv,
    kube: KubeClient,
    core: client.CoreV1Api,
    ns: str,
    home: Path,
) -> None:
    """FAILED, Reason JobLaunchFailure (sacct), ExitCode 1:0, and scontrol's Reason the
    kubelet's (or the API server's) message; nothing left in the cluster."""
    script = home / "nope.sh"
    script.write_text("#!/bin/sh\n#CALDERA --image=caldera.local/nope:1\necho never\n")
    os.chmod(script, 0o755)
    missing = _sbatch(gw, kubelet_env, home, "-N", "2", "--requeue", str(script))
    gw.wait(missing, timeout=90)  # its pods were made before the LimitRange below
    # a LimitRange makes the API server's admission refuse pods over 64Mi
    limit = client.V1LimitRange(
        metadata=client.V1ObjectMeta(name="small"),
        spec=client.V1LimitRangeSpec(
            limits=[client.V1LimitRangeItem(type="Container", max={"memory": "64Mi"})]
        ),
    )
    core.create_namespaced_limit_range(ns, limit)
    try:
        refused = _sbatch(gw, kubelet_env, home, "--mem=128M", "--wrap", "echo never")
        gw.wait(refused, timeout=60)
    finally:
        core.delete_namespaced_limit_range("small", ns)
    for job, says in (
        (missing, 'failed to pull and unpack image "caldera.local/nope:1"'),
        (refused, "maximum memory usage per Container is 64Mi"),
    ):
        assert _acct(gw, job, "State,ExitCode,Reason") == ["FAILED|1:0|JobLaunchFailure"]
        show = gw.ok(["scontrol", "show", "job", str(job)])
        reason = re.search(r"\bJobState=FAILED Reason=(\S+)", show)
        assert reason is not None, show
        assert says.replace(" ", "_") in reason.group(1), show
        assert re.search(r"\bExitCode=1:0\b", show), show
        assert re.search(r"\bRestarts=0\b", show), show  # not requeued: it would fail again
    assert_nothing_left(kube, ns)
