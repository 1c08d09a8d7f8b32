"""Preemption on real kubelet nodes (testenv/kubelet) through a real gateway: a job of QOS
`high` (Preempt=low) ends a running job of QOS `low` (PreemptMode=CANCEL, GraceTime) that
fills the kubelet partition. As on Slurm, the victim's processes get SIGTERM at once, keep
running for the GraceTime (not the pods' KillWait), are killed when it ends, and the victim
is PREEMPTED (sacct's job row 0:0, as slurmdbd keeps it); the preemptor then runs on the
freed nodes, and the two jobs' pods never run on one node at once. The grace is the
deletion's: the victim's pods are deleted with gracePeriodSeconds = GraceTime x time_scale
(k8s_bridge/graceful.py).
REQUEUE: the same grace, then the victim runs again after the preemptor, never two of its
runs at once. Both in Caldera's own gang mode and with one Volcano Job per run
(`volcano-job`), whose controller makes a deleted pod again unless told otherwise.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from k8s_bridge.kube import PODS, KubeClient
from tests.integration.test_k8s_bridge_helpers import admin_client, assert_nothing_left, wait_until
from tests.support.gateway_env import Gateway, start_gateway, stop_gateway
from tests.support.kubelet_env import KubeletEnv
from tests.support.kubelet_gateway import cluster_config, job_namespace, shared_tree

pytestmark = pytest.mark.kubelet

Obj = dict[str, object]

TIME_SCALE = 0.1
GRACE_TIME = 60  # job seconds: 6 wall seconds
GRACE_S = GRACE_TIME * TIME_SCALE
KILL_WAIT_S = 2  # the pods' own grace (what cancel gives): must not be what the victim gets


@pytest.fixture(scope="module")
def ns(kubelet_env: KubeletEnv) -> Iterator[str]:
    yield from job_namespace(kubelet_env, "gw-klp")


@pytest.fixture(scope="module")
def kube(kubelet_env: KubeletEnv) -> KubeClient:
    return admin_client(kubelet_env.k8s)


@pytest.fixture(scope="module")
def base() -> Iterator[Path]:
    yield from shared_tree("caldera-e2e-kubelet-preempt-")


@pytest.fixture(scope="module", params=["caldera", "volcano-job"])
def gw(
    request: pytest.FixtureRequest, kubelet_env: KubeletEnv, ns: str, base: Path
) -> Iterator[Gateway]:
    """Caldera's binder, or one Volcano Job per run (whose controller, left alone, would
    make a deleted pod again: the victim's pods must not come back)."""
    config = cluster_config(
        kubelet_env,
        ns,
        base,
        mode=request.param,
        kill_wait_s=KILL_WAIT_S,
        top=f'time_scale = {TIME_SCALE}\npreempt_type = "preempt/qos"\n',
        cluster="allow_host_mounts = true\n",
    )
    gw = start_gateway(base / f"gw-{request.param}", config)
    try:
        yield gw
    finally:
        stop_gateway(gw)


def _stamps(path: Path) -> list[float]:
    return [float(x) for x in path.read_text().split()] if path.exists() else []


def _running_nodes(pods: list[Obj], job: int) -> set[str]:
    """Nodes where a pod of `job` is Running (being deleted or not)."""
    out = set()
    for pod in pods:
        meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
        assert isinstance(meta, dict)
        assert isinstance(spec, dict)
        assert isinstance(status, dict)
        if meta["labels"].get("caldera.io/job-id") == str(job) and status.get("phase") == "Running":
            out.add(str(spec.get("nodeName")))
    return out


def _deletion_graces(pods: list[Obj], job: int) -> dict[str, int]:
    """The deletion grace of each of `job`'s pods being deleted, by pod name."""
    out = {}
    for pod in pods:
        meta = pod["metadata"]
        assert isinstance(meta, dict)
        grace = meta.get("deletionGracePeriodSeconds")
        if meta["labels"].get("caldera.io/job-id") == str(job) and grace is not None:
            out[str(meta["name"])] = int(grace)
    return out


def _acct(gw: Gateway, job: int) -> list[str]:
    text = gw.ok(["sacct", "-j", str(job), "-X", "-P", "-n", "-o", "State,ExitCode,NodeList"])
    return text.strip().splitlines()


def test_a_preempted_pod_gang_gets_its_grace_time_then_the_preemptor_runs_on_its_nodes(
    gw: Gateway, kubelet_env: KubeletEnv, kube: KubeClient, ns: str, base: Path
) -> None:
    out = base / "out" / uuid.uuid4().hex[:6]
    out.mkdir()
    os.chmod(out, 0o1777)
    home = base / "users" / "tester"
    gw.ok(["sacctmgr", "-i", "add", "qos", "low", "preemptmode=cancel", f"gracetime={GRACE_TIME}"])
    gw.ok(["sacctmgr", "-i", "add", "qos", "high", "preempt=low", "priority=100"])
    nodes = len(kubelet_env.nodes)
    gpus = f"--gres=gpu:{kubelet_env.gpus_per_node}"  # every GPU of every real node
    common = ("-p", kubelet_env.partition, "-N", str(nodes), gpus, f"--container-mounts={out}:/out")
    victim = gw.sbatch(
        *common, "--qos=low", "--wrap",
        "trap 'echo $EPOCHREALTIME >> /out/term' TERM; echo $EPOCHREALTIME > /out/started; "
        "while :; do echo $EPOCHREALTIME >> /out/alive; sleep 0.2; done",
        cwd=home, user="tester",
    )  # fmt: skip
    wait_until("the victim's script running", lambda: len(_stamps(out / "alive")) > 2, 120)

    high = gw.sbatch(
        *common, "--qos=high", "--wrap", "echo $EPOCHREALTIME > /out/high",
        cwd=home, user="tester",
    )  # fmt: skip
    overlaps: list[tuple[float, set[str]]] = []
    graces: dict[str, int] = {}  # the first grace seen: the kubelet's own final delete says 0
    deadline = time.monotonic() + 120
    while not (out / "high").exists():
        assert time.monotonic() < deadline, "the preemptor never ran"
        pods, _ = kube.list(PODS, ns)
        both = _running_nodes(pods, victim) & _running_nodes(pods, high)
        if both:
            overlaps.append((time.time(), both))
        graces = _deletion_graces(pods, victim) | graces
        time.sleep(0.2)
    assert gw.wait(high, timeout=60)["state"] == "COMPLETED"
    assert gw.wait(victim, ("PREEMPTED",), timeout=30)["state"] == "PREEMPTED"

    # SIGTERM reached the script, which ran on for the grace and was then killed
    term = _stamps(out / "term")
    alive = _stamps(out / "alive")
    assert len(term) == 1, term
    ran_on = max(alive) - term[0]
    print(f"victim ran {ran_on:.2f} s after SIGTERM (grace {GRACE_S} s, KillWait {KILL_WAIT_S} s)")
    assert GRACE_S - 1 <= ran_on <= GRACE_S + 3, ran_on
    assert ran_on > KILL_WAIT_S + 2  # the GraceTime, not the pods' KillWait
    assert set(graces.values()) == {round(GRACE_S)}, graces  # deleted with the grace as theirs
    began = _stamps(out / "high")[0]
    assert max(alive) < began  # the preemptor ran only once the victim was killed
    time.sleep(1)
    assert max(_stamps(out / "alive")) == max(alive)  # nothing of the victim is left running

    # as Slurm shows a job preempted in cancel mode (sacct's job row keeps 0:0, recorded in
    # tests/data/slurm_preempt_22.05.json); the preemptor ran on the freed nodes
    (v_state,) = _acct(gw, victim)
    (h_state,) = _acct(gw, high)
    v_nodes, h_nodes = v_state.split("|")[2], h_state.split("|")[2]
    assert v_state.split("|")[:2] == ["PREEMPTED", "0:0"], v_state
    assert h_state.split("|")[:2] == ["COMPLETED", "0:0"], h_state
    assert v_nodes == h_nodes, (v_nodes, h_nodes)
    assert overlaps == []  # never a victim pod and a preemptor pod running on one node
    assert_nothing_left(kube, ns)


def _running_attempts(pods: list[Obj], job: int) -> set[str]:
    out = set()
    for pod in pods:
        meta, status = pod["metadata"], pod.get("status") or {}
        assert isinstance(meta, dict)
        assert isinstance(status, dict)
        labels = meta["labels"]
        if labels.get("caldera.io/job-id") == str(job) and status.get("phase") == "Running":
            out.add(str(labels.get("caldera.io/attempt")))
    return out


def test_a_requeued_victim_runs_again_only_after_its_graced_run_was_killed(
    gw: Gateway, kubelet_env: KubeletEnv, kube: KubeClient, ns: str, base: Path
) -> None:
    """REQUEUE with GraceTime: SIGTERM, the grace, then the job is pending again; its next
    run starts only once every pod of the first has ended, after the preemptor ran, and
    never next to it or to the preemptor's pods."""
    out = base / "out" / uuid.uuid4().hex[:6]
    out.mkdir()
    os.chmod(out, 0o1777)
    home = base / "users" / "tester"
    gw.ok(
        ["sacctmgr", "-i", "add", "qos", "lowrq", "preemptmode=requeue", f"gracetime={GRACE_TIME}"]
    )
    gw.ok(["sacctmgr", "-i", "add", "qos", "highrq", "preempt=lowrq", "priority=100"])
    gpus = f"--gres=gpu:{kubelet_env.gpus_per_node}"
    common = (
        "-p", kubelet_env.partition, "-N", str(len(kubelet_env.nodes)), gpus,
        f"--container-mounts={out}:/out",
    )  # fmt: skip
    victim = gw.sbatch(
        *common, "--qos=lowrq", "--requeue", "--wrap",
        'echo "$(hostname) $EPOCHREALTIME" >> /out/runs; [ -e /out/term ] && exit 0; '
        "trap 'echo $EPOCHREALTIME >> /out/term' TERM; "
        "while :; do echo $EPOCHREALTIME >> /out/alive; sleep 0.2; done",
        cwd=home, user="tester",
    )  # fmt: skip
    wait_until("the victim's script running", lambda: len(_stamps(out / "alive")) > 2, 120)
    high = gw.sbatch(
        *common, "--qos=highrq", "--wrap", "echo $EPOCHREALTIME > /out/high",
        cwd=home, user="tester",
    )  # fmt: skip
    twice: list[set[str]] = []
    overlaps: list[set[str]] = []
    deadline = time.monotonic() + 150
    while len((out / "runs").read_text().splitlines()) < 2:
        assert time.monotonic() < deadline, "the victim never ran again"
        pods, _ = kube.list(PODS, ns)
        if len(attempts := _running_attempts(pods, victim)) > 1:
            twice.append(attempts)
        if both := _running_nodes(pods, victim) & _running_nodes(pods, high):
            overlaps.append(both)
        time.sleep(0.2)
    assert gw.wait(victim, timeout=60)["state"] == "COMPLETED"
    assert gw.wait(high, timeout=10)["state"] == "COMPLETED"

    runs = [line.split() for line in (out / "runs").read_text().splitlines()]
    assert [r[0] for r in runs] == [f"caldera-{victim}-0", f"caldera-{victim}-r1-0"]
    term, alive = _stamps(out / "term"), _stamps(out / "alive")
    ran_on = max(alive) - term[0]
    print(f"requeued victim ran {ran_on:.2f} s after SIGTERM (grace {GRACE_S} s)")
    assert GRACE_S - 1 <= ran_on <= GRACE_S + 3, ran_on
    began = _stamps(out / "high")[0]
    assert max(alive) < began < float(runs[1][1])  # killed, then the preemptor, then run 2
    assert twice == []
    assert overlaps == []
    show = gw.ok(["scontrol", "show", "job", str(victim)])
    assert "Restarts=1" in show, show
    assert_nothing_left(kube, ns)
