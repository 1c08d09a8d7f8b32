"""Preemption on a Kubernetes cluster that Volcano places (`volcano = true`), through the real
gateway, API server and Volcano v1.10 (KWOK nodes, testenv/k8s).

Caldera chooses the victims and ends them, Volcano only places (docs/preemption.md,
"Kubernetes under Volcano"): two `low` jobs hold the eight 8-GPU nodes (6 + 2), a `high` job
(Preempt=low) needing two nodes waits in Volcano's queue; the gateway preempts the younger,
smaller job as a whole (its pods deleted with its GraceTime; KWOK keeps them for that grace,
as a kubelet would), and Volcano binds the preemptor only once they are gone. CANCEL: the
victim is PREEMPTED 0:15; REQUEUE: it runs again after the preemptor, its second run's pods
created only once the first run's are gone. A privileged job (WillEvict) marks its victim
first, whose pods run untouched through the notice.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest

from k8s_bridge.kube import KubeClient
from tests.e2e.test_gateway_preempt import _events
from tests.integration.test_k8s_bridge_helpers import (
    admin_client,
    assert_nothing_left,
    new_namespace,
    wait_until,
)
from tests.support.gateway_env import Gateway
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
GRACE = 40  # the victims' GraceTime, job seconds: pods deleted with a 2 s grace
GRACE_S = round(GRACE * SCALE)
NOTICE = 60  # vip's GraceTime (Flags=Privileged): a 3 s WillEvict notice


@pytest.fixture(scope="module")
def ns(k8s_env_volcano: K8sEnv) -> Iterator[str]:
    yield from new_namespace(k8s_env_volcano, "gwvp")


@pytest.fixture(scope="module")
def kube(k8s_env_volcano: K8sEnv) -> KubeClient:
    return admin_client(k8s_env_volcano)


@pytest.fixture(scope="module")
def gw(k8s_env_volcano: K8sEnv, ns: str) -> Iterator[Gateway]:
    with preempt_gateway(k8s_env_volcano, ns, True, SCALE, "caldera-e2e-k8s-vp-") as g:
        for qos, mode in (("low", "cancel"), ("lowrq", "requeue")):
            add_qos(g, qos, preemptmode=mode, gracetime=GRACE)
        add_qos(g, "high", preempt="low,lowrq", priority=100)
        add_qos(g, "vip", flags="Privileged", preempt="low", gracetime=NOTICE)
        yield g


def _fill(gw: Gateway, kube: KubeClient, ns: str, qos: str) -> tuple[int, int]:
    """A 6-node and a 2-node job of `qos`, running, their pods kept through their grace."""
    big = node_job(gw, qos, 6)
    small = node_job(gw, qos, 2)
    running_graceful(gw, kube, ns, [big, small])
    return big, small


def _scenario(gw: Gateway, kube: KubeClient, ns: str, qos: str) -> tuple[int, int, int]:
    """(the 6-node job, the 2-node victim, the preemptor), the preemptor running."""
    big, small = _fill(gw, kube, ns, qos)
    high = node_job(gw, "high", 2)
    wait_until("the preemptor running", lambda: reason_of(gw, high)[0] == "RUNNING", 30)
    return big, small, high


def _check(gw: Gateway, pods: PodHistory, big: int, victim: int, high: int) -> None:
    """The victim's pods were deleted with its GraceTime and were gone before Volcano bound
    the preemptor's on their nodes; the other job was never touched."""
    deleted = pods.first_deletion(victim)
    assert deleted is not None
    assert pods.graces(victim) == {GRACE_S}
    gone = pods.gone_at(victim)
    assert gone - deleted.at >= GRACE_S - 1  # deletionTimestamp has whole seconds
    assert pods.first_bound(high) > gone
    assert pods.nodes(high) == pods.nodes(victim)
    assert pods.first_deletion(big) is None
    kinds = [k for k, _, _ in _events(gw, victim)]
    assert kinds.index("preempt") < kinds.index("preempt-signal") < kinds.index("preempt-end")
    high_kinds = [k for k, _, _ in _events(gw, high)]
    assert high_kinds.index("preempting") < high_kinds.index("preempt-start")


def test_cancel_mode_preempts_the_smaller_job_and_volcano_binds_the_preemptor_after_it(
    gw: Gateway, kube: KubeClient, ns: str
) -> None:
    with watching(kube, ns) as pods:
        big, small, high = _scenario(gw, kube, ns, "low")
        assert gw.wait(small, ("PREEMPTED",), timeout=10)["state"] == "PREEMPTED"
        end_running(kube, ns, f"caldera-{high}-0")
        assert gw.wait(high)["state"] == "COMPLETED"
    _check(gw, pods, big, small, high)
    acct = gw.ok(["sacct", "-j", f"{small},{high}", "-X", "-P", "-n", "-o", "JobID,State"])
    assert acct.split() == [f"{small}|PREEMPTED", f"{high}|COMPLETED"]
    assert "ExitCode=0:15" in gw.ok(["scontrol", "show", "job", str(small)])  # SIGTERM's
    assert reason_of(gw, big) == ["RUNNING", "None"]
    gw.ok(["scancel", str(big)])
    assert_nothing_left(kube, ns)


def test_requeue_mode_runs_the_victim_again_after_the_preemptor_never_twice(
    gw: Gateway, kube: KubeClient, ns: str
) -> None:
    with watching(kube, ns) as pods:
        big, small, high = _scenario(gw, kube, ns, "lowrq")
        wait_until("the victim requeued", lambda: reason_of(gw, small) == ["PENDING", "BeginTime"])
        end_running(kube, ns, f"caldera-{high}-0")
        wait_until("the victim's second run", lambda: reason_of(gw, small)[0] == "RUNNING", 30)
        end_running(kube, ns, f"caldera-{small}-r1-0")
        assert gw.wait(small)["state"] == "COMPLETED"
    _check(gw, pods, big, small, high)
    assert pods.first_added(small, 1) > pods.gone_at(small, 0)  # never two runs at once
    assert pods.first_bound(small, 1) > pods.gone_at(high, 0)
    assert re.search(r"\bRestarts=1\b", gw.ok(["scontrol", "show", "job", str(small)]))
    gw.ok(["scancel", str(big)])
    assert_nothing_left(kube, ns)


def test_a_privileged_job_in_volcanos_queue_marks_its_victim_will_evict_first(
    gw: Gateway, kube: KubeClient, ns: str
) -> None:
    with watching(kube, ns) as pods:
        big, small = _fill(gw, kube, ns, "low")
        vip = node_job(gw, "vip", 2)
        wait_until("the victim marked", lambda: reason_of(gw, small) == ["RUNNING", "WillEvict"])
        marked_at = time.time()
        assert "Reason=WillEvict" in gw.ok(["scontrol", "show", "job", str(small)])
        assert reason_of(gw, big) == ["RUNNING", "None"]
        assert reason_of(gw, vip) == ["PENDING", "Resources"]
        wait_until("the vip running", lambda: reason_of(gw, vip)[0] == "RUNNING", 30)
        assert gw.wait(small, ("PREEMPTED",), timeout=10)["state"] == "PREEMPTED"
        end_running(kube, ns, f"caldera-{vip}-0")
        assert gw.wait(vip)["state"] == "COMPLETED"
    deleted = pods.first_deletion(small)
    assert deleted is not None
    assert deleted.at - marked_at >= NOTICE * SCALE - 0.5  # its pods ran through the notice
    _check(gw, pods, big, small, vip)
    mark = next(d for k, _, d in _events(gw, small) if k == "will-evict")
    assert (mark["by"], mark["notice_s"]) == (vip, NOTICE)
    gw.ok(["scancel", str(big)])
    assert_nothing_left(kube, ns)
