"""Delayed job-level preemption (WillEvict) on a Kubernetes cluster placed by Caldera's binder,
through the real gateway and API server (KWOK nodes, testenv/k8s).

Four `low` jobs hold the eight 8-GPU nodes (4 + 2 + 1 + 1). A `vip` job (Flags=Privileged,
Preempt=low) needing two nodes marks the fewest whole jobs whose room suffices, the 2-node
one (Slurm's greedy pick would take the two 1-node jobs): it shows WillEvict and its pods run
untouched through the notice; then they are deleted with the victim's GraceTime and the vip's
gang is bound on exactly those nodes, only once they are gone (KWOK keeps a pod annotated
`graceful` until its deletion's grace is over, as a kubelet with a process trapping SIGTERM).
Cancelling the vip withdraws the marks. A REQUEUE victim's next run is created only once every
pod of its first is gone. A gateway killed while a victim is inside its GraceTime neither
preempts it again nor restarts its grace.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator

import pytest

from k8s_bridge.kube import KubeClient
from tests.e2e.test_gateway_preempt import _events
from tests.e2e.test_gateway_restart import _gateway_pid
from tests.integration.test_k8s_bridge_helpers import (
    admin_client,
    assert_nothing_left,
    new_namespace,
    wait_until,
)
from tests.support.gateway_env import Gateway, restart
from tests.support.k8s_env import K8sEnv
from tests.support.k8s_preempt import (
    add_qos,
    node_job,
    preempt_gateway,
    reason_of,
    running_graceful,
)
from tests.support.pod_watch import PodHistory, end_running, watching

pytestmark = pytest.mark.k8s

SCALE = 0.05
NOTICE = 60  # vip's GraceTime, job seconds: a 3 s notice
GRACE = 40  # the victims' GraceTime: pods deleted with a 2 s grace
GRACE_S = round(GRACE * SCALE)
LONG = 120  # a 6 s grace, for the gateway restart inside it


@pytest.fixture(scope="module")
def ns(k8s_env: K8sEnv) -> Iterator[str]:
    yield from new_namespace(k8s_env, "gwwe")


@pytest.fixture(scope="module")
def kube(k8s_env: K8sEnv) -> KubeClient:
    return admin_client(k8s_env)


@pytest.fixture(scope="module")
def gw(k8s_env: K8sEnv, ns: str) -> Iterator[Gateway]:
    with preempt_gateway(k8s_env, ns, False, SCALE, "caldera-e2e-k8s-we-") as g:
        for qos, mode in (("low", "cancel"), ("lowrq", "requeue")):
            add_qos(g, qos, preemptmode=mode, gracetime=GRACE)
        add_qos(g, "lowlong", preemptmode="cancel", gracetime=LONG)
        add_qos(g, "high", preempt="lowlong", priority=100)
        add_qos(g, "vip", flags="Privileged", preempt="low,lowrq", gracetime=NOTICE)
        yield g


def _fill(gw: Gateway, kube: KubeClient, ns: str, qos: str = "low") -> list[int]:
    """4 + 2 + 1 + 1 nodes of `low` jobs, running, their pods kept through their grace."""
    jobs = [node_job(gw, qos, n) for n in (4, 2, 1, 1)]
    running_graceful(gw, kube, ns, jobs)
    return jobs


def _kinds(gw: Gateway, job: int) -> list[str]:
    return [k for k, _, _ in _events(gw, job)]


def test_the_fewest_victims_run_out_their_notice_then_the_vip_is_bound_where_they_were(
    gw: Gateway, kube: KubeClient, ns: str
) -> None:
    with watching(kube, ns) as pods:
        big, two, one, last = _fill(gw, kube, ns)
        vip = node_job(gw, "vip", 2)
        wait_until("the 2-node job marked", lambda: reason_of(gw, two) == ["RUNNING", "WillEvict"])
        marked_at = time.time()
        assert "Reason=WillEvict" in gw.ok(["scontrol", "show", "job", str(two)])
        for other in (big, one, last):
            assert reason_of(gw, other) == ["RUNNING", "None"]
        assert reason_of(gw, vip) == ["PENDING", "Resources"]

        wait_until("the vip running", lambda: reason_of(gw, vip)[0] == "RUNNING", 30)
        assert gw.wait(two, ("PREEMPTED",), timeout=10)["state"] == "PREEMPTED"
        end_running(kube, ns, f"caldera-{vip}-0")
        assert gw.wait(vip)["state"] == "COMPLETED"
    _check_preempted(gw, pods, two, vip, marked_at)
    for other in (big, one, last):  # never touched
        assert pods.first_deletion(other) is None
        assert "will-evict" not in _kinds(gw, other)
    assert gw.ok(["sacct", "-j", str(two), "-X", "-P", "-n", "-o", "State"]).strip() == "PREEMPTED"
    assert "ExitCode=0:15" in gw.ok(["scontrol", "show", "job", str(two)])  # SIGTERM's
    gw.ok(["scancel", str(big), str(one), str(last)])
    assert_nothing_left(kube, ns)


def _check_preempted(gw: Gateway, pods: PodHistory, victim: int, vip: int, marked: float) -> None:
    """The victim's pods ran through the notice, were deleted with its GraceTime and gone
    before the vip's pods were bound on the same nodes."""
    deleted = pods.first_deletion(victim)
    assert deleted is not None
    assert deleted.at - marked >= NOTICE * SCALE - 0.5  # nothing happened during the notice
    assert pods.graces(victim) == {GRACE_S}
    gone = pods.gone_at(victim)
    # KWOK kept them for the grace (deletionTimestamp has whole seconds: up to 1 s less)
    assert gone - deleted.at >= GRACE_S - 1
    assert pods.first_bound(vip) > gone  # never bound next to the victim's pods
    assert pods.nodes(vip) == pods.nodes(victim)
    kinds = _kinds(gw, victim)
    assert kinds.index("will-evict") < kinds.index("preempt") < kinds.index("preempt-end")
    assert "will-evict-withdrawn" not in kinds
    vip_kinds = _kinds(gw, vip)
    assert vip_kinds.index("will-evict-marked") < vip_kinds.index("preempting")
    assert vip_kinds.index("preempting") < vip_kinds.index("preempt-start")


def test_cancelling_the_vip_withdraws_the_mark_and_nothing_is_deleted(
    gw: Gateway, kube: KubeClient, ns: str
) -> None:
    with watching(kube, ns) as pods:
        jobs = _fill(gw, kube, ns)
        two = jobs[1]
        vip = node_job(gw, "vip", 2)
        wait_until("the 2-node job marked", lambda: reason_of(gw, two) == ["RUNNING", "WillEvict"])
        gw.ok(["scancel", str(vip)])
        wait_until("the mark withdrawn", lambda: reason_of(gw, two) == ["RUNNING", "None"])
        time.sleep(NOTICE * SCALE + 1)  # past the notice: still nothing deleted
        assert all(pods.first_deletion(j) is None for j in jobs)
    assert all(reason_of(gw, j) == ["RUNNING", "None"] for j in jobs)
    withdrawn = [d for k, _, d in _events(gw, two) if k == "will-evict-withdrawn"]
    assert [(d["by"], d["why"]) for d in withdrawn] == [(vip, "ended")]
    assert "preempt" not in _kinds(gw, two)
    gw.ok(["scancel", *map(str, jobs)])
    assert_nothing_left(kube, ns)


def test_a_requeued_victim_runs_again_only_once_its_first_pods_are_gone(
    gw: Gateway, kube: KubeClient, ns: str
) -> None:
    with watching(kube, ns) as pods:
        big, two, one, last = _fill(gw, kube, ns, qos="lowrq")
        vip = node_job(gw, "vip", 2)
        wait_until("the 2-node job marked", lambda: reason_of(gw, two) == ["RUNNING", "WillEvict"])
        marked_at = time.time()
        wait_until("the vip running", lambda: reason_of(gw, vip)[0] == "RUNNING", 30)
        assert reason_of(gw, two) == ["PENDING", "BeginTime"]
        end_running(kube, ns, f"caldera-{vip}-0")  # its nodes free again: the victim's next run
        wait_until("the victim's second run", lambda: reason_of(gw, two)[0] == "RUNNING", 30)
        end_running(kube, ns, f"caldera-{two}-r1-0")
        assert gw.wait(two)["state"] == "COMPLETED"
    _check_preempted(gw, pods, two, vip, marked_at)
    assert pods.first_added(two, 1) > pods.gone_at(two, 0)  # never two runs at once
    assert pods.first_bound(two, 1) > pods.gone_at(vip, 0)
    assert re.search(r"\bRestarts=1\b", gw.ok(["scontrol", "show", "job", str(two)]))
    gw.ok(["scancel", str(big), str(one), str(last)])
    assert_nothing_left(kube, ns)


def test_a_gateway_restart_inside_the_grace_keeps_the_grace_running(
    gw: Gateway, kube: KubeClient, ns: str
) -> None:
    with watching(kube, ns) as pods:
        big = node_job(gw, "lowlong", 6)
        small = node_job(gw, "lowlong", 2)
        running_graceful(gw, kube, ns, [big, small])
        high = node_job(gw, "high", 2)
        wait_until("the victim's pods deleted", lambda: pods.first_deletion(small) is not None)
        time.sleep(1.0)  # 1 s of the 6 s grace
        os.kill(_gateway_pid(gw), signal.SIGKILL)
        wait_until("the gateway gone", lambda: not _alive(gw), 10)
        restart(gw)
        restarted = time.time()
        wait_until("the preemptor running", lambda: reason_of(gw, high)[0] == "RUNNING", 30)
        end_running(kube, ns, f"caldera-{high}-0")
        assert gw.wait(high)["state"] == "COMPLETED"
    assert gw.wait(small, ("PREEMPTED",), timeout=10)["state"] == "PREEMPTED"
    events = _events(gw, small)
    preempts = [t for k, t, _ in events if k == "preempt"]
    assert len(preempts) == 1  # not chosen again, not signalled again
    end = next(t for k, t, _ in events if k == "preempt-end")
    # the first grace, not a new one (or at once when the restart took longer than it)
    assert end - max(preempts[0] + LONG * SCALE, restarted) < 1.0
    assert "preempt-start" in [k for k, _, _ in _events(gw, high)]
    assert pods.graces(small) == {round(LONG * SCALE)}
    assert pods.first_bound(high) > pods.gone_at(small)
    assert pods.first_deletion(big) is None
    gw.ok(["scancel", str(big)])
    assert_nothing_left(kube, ns)


def _alive(gw: Gateway) -> bool:
    try:
        os.kill(_gateway_pid(gw), 0)
    except ProcessLookupError:
        return False
    return True
