"""What the backend does for srun/mpirun across ranks (k8s_bridge/launch.py), on the KWOK
API server: the namespace's launcher ConfigMap is created before the first gang and brought
back to this gateway's code when it differs, and each gang's root gets its ranks' pod IPs
(`hosts`) once every rank has one. The launcher itself runs in tests/unit/test_pod_launcher.py
and on real nodes in tests/e2e/test_gateway_kubelet_srun.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gateway.model.backend import EventKind
from k8s_bridge.backend import KubernetesBackend
from k8s_bridge.kube import CONFIGMAPS, PODS, KubeClient
from k8s_bridge.launch import SOURCES
from tests.integration.test_k8s_bridge_helpers import (
    Events,
    end_rank,
    kube,
    make_launch,
    new_backend,
    new_namespace,
    wait_until,
)
from tests.support.k8s_env import K8sEnv

pytestmark = pytest.mark.k8s
__all__ = ["kube"]


@pytest.fixture
def ns(k8s_env: K8sEnv) -> Iterator[str]:
    yield from new_namespace(k8s_env, "launch")


def _root_hosts(kube: KubeClient, ns: str, root: str) -> str:
    obj = kube.get(CONFIGMAPS, ns, root)
    return str(((obj or {}).get("data") or {}).get("hosts", ""))


def test_the_ranks_addresses_reach_the_root_and_the_launcher_is_kept_current(
    k8s_env: K8sEnv, kube: KubeClient, ns: str
) -> None:
    kube.create(
        CONFIGMAPS,
        ns,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "caldera-launcher", "namespace": ns},
            "data": {"launcher": "stale", "launch-plan": "stale"},
        },
    )
    backend: KubernetesBackend = new_backend(k8s_env, ns)
    try:
        events = Events(backend)
        backend.submit(make_launch(301, nodes=2))
        events.wait(301, EventKind.STARTED)
        launcher = kube.get(CONFIGMAPS, ns, "caldera-launcher")
        assert launcher is not None
        assert launcher["data"] == SOURCES  # the stale copy was replaced
        wait_until(
            "every rank's IP",
            lambda: all(
                p.get("status", {}).get("podIP")
                for p in kube.list(PODS, ns, label_selector="caldera.io/job-id=301")[0]
            ),
        )
        items, _ = kube.list(PODS, ns, label_selector="caldera.io/job-id=301")
        ips = {p["metadata"]["name"]: p["status"]["podIP"] for p in items}
        wait_until("the hosts file", lambda: bool(_root_hosts(kube, ns, "caldera-301")))
        assert _root_hosts(kube, ns, "caldera-301").splitlines() == [
            f"{ips[f'caldera-301-{r}']} caldera-301-{r} caldera-301-{r}.caldera-301"
            for r in range(2)
        ]
        end_rank(kube, ns, "caldera-301-0")
        events.wait(301, EventKind.FINISHED)
        # a one-rank job reaches no other rank: nothing to write
        backend.submit(make_launch(302))
        events.wait(302, EventKind.STARTED)
        assert _root_hosts(kube, ns, "caldera-302") == ""
        end_rank(kube, ns, "caldera-302-0")
        events.wait(302, EventKind.FINISHED)
        events.settle()
    finally:
        backend.close()
    assert kube.get(CONFIGMAPS, ns, "caldera-launcher") is not None  # the namespace's, kept
