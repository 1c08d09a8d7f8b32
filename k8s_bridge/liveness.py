"""Whether a Kubernetes API server still answers, probed on a thread of its own.

The informers alone cannot tell: a server that hangs (stopped, overloaded past answering,
or cut off by a partition that keeps TCP connections open) leaves their watches open and
silent, so the backend would go on describing the cluster as reachable from its cache for
as long as a watch lasts (minutes). The router moves a cluster's unstarted jobs elsewhere
only when the description says unreachable (`[routing] outage_timeout`), so the backend
asks the server a cheap question (`GET /version`, readable by every authenticated client)
every `interval_s` with a short timeout, and counts it silent once no answer came for
`silent_after_s`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from gateway.model.cluster import ClusterState
from k8s_bridge.informer import Informer
from k8s_bridge.inventory import NodeInfo, cluster_state, parse_node
from k8s_bridge.kube import NODES, KubeClient, KubeError
from k8s_bridge.options import K8sOptions

__all__ = ["ApiLiveness", "describe_cluster"]

log = logging.getLogger("caldera.k8s")


class ApiLiveness:
    """The last time the API server answered, kept fresh by a daemon thread."""

    def __init__(
        self,
        client: KubeClient,
        name: str,
        interval_s: float,
        silent_after_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.name = name
        self.interval_s = interval_s
        self.silent_after_s = silent_after_s
        self.clock = clock
        self.last_answer = clock()  # a fresh backend is given the benefit of the doubt
        self._silent = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Probe from now on (idempotent)."""
        if self._thread is None and self.interval_s > 0:
            self._thread = threading.Thread(
                target=self._run, name=f"k8s-{self.name}-liveness", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def answering(self) -> bool:
        """False once the server has not answered for `silent_after_s`."""
        return self.interval_s <= 0 or self.clock() - self.last_answer <= self.silent_after_s

    def probe(self) -> bool:
        """Ask once; True when the server answered (whatever its status)."""
        timeout = max(self.interval_s, 1.0)
        try:
            self.client.request("GET", "/version", timeout=(timeout, timeout), what="liveness")
        except KubeError as exc:
            if not exc.unreachable:
                self._answered()  # a refusal is an answer
                return True
            if not self._silent and not self.answering():
                self._silent = True
                log.warning("kubernetes cluster %s: API server not answering: %s", self.name, exc)
            return False
        self._answered()
        return True

    def _answered(self) -> None:
        if self._silent:
            log.warning("kubernetes cluster %s: API server answers again", self.name)
            self._silent = False
        self.last_answer = self.clock()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.probe()


def describe_cluster(
    name: str, nodes: Informer[NodeInfo], liveness: ApiLiveness, opts: K8sOptions
) -> ClusterState:
    """The cluster from the node informer's cache (listed afresh while it is not synced);
    unreachable when the server does not answer, even with a cache that looks synced."""
    if not liveness.answering():
        return cluster_state(name, nodes.items().values(), opts, reachable=False)
    if nodes.synced:
        return cluster_state(name, nodes.items().values(), opts)
    try:
        objs, _ = liveness.client.list(NODES, None)
    except KubeError:
        return cluster_state(name, nodes.items().values(), opts, reachable=False)
    return cluster_state(name, (parse_node(o) for o in objs), opts)
