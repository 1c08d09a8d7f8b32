"""What the preemption e2e modules on Kubernetes share (tests/e2e/test_gateway_k8s_will_evict.py
under Caldera's binder, tests/e2e/test_gateway_k8s_volcano_preempt.py under Volcano): a
gateway over one KWOK cluster with preempt/qos, QOSes added through sacctmgr, jobs of whole
8-GPU KWOK nodes, and squeue's state and reason of a job."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from k8s_bridge.kube import KubeClient
from tests.integration.test_k8s_bridge_helpers import wait_until
from tests.support.gateway_env import Gateway, running_gateway
from tests.support.k8s_env import K8sEnv
from tests.support.pod_watch import graceful

__all__ = ["add_qos", "node_job", "preempt_gateway", "reason_of", "running_graceful"]


@contextmanager
def preempt_gateway(
    env: K8sEnv, ns: str, volcano: bool, scale: float, prefix: str
) -> Iterator[Gateway]:
    """A gateway over the KWOK cluster `env` in namespace `ns`: preempt/qos, REQUEUE unless
    a QOS says otherwise, job time scaled by `scale`, no node agents."""
    config = (
        f"agents = false\ntime_scale = {scale}\nkill_wait_s = 1\n"
        'preempt_type = "preempt/qos"\npreempt_mode = "REQUEUE"\n'
        "[kubernetes]\n[[kubernetes.cluster]]\n"
        f'name = "kwok"\nkubeconfig = "{env.admin_kubeconfig}"\n'
        f'volcano = {str(volcano).lower()}\nnamespace = "{ns}"\n'
    )
    with running_gateway(config, prefix) as gw:
        yield gw


def add_qos(gw: Gateway, name: str, **fields: object) -> None:
    """`sacctmgr -i add qos NAME key=value...`."""
    gw.ok(["sacctmgr", "-i", "add", "qos", name, *(f"{k}={v}" for k, v in fields.items())])


def node_job(gw: Gateway, qos: str, nodes: int, *extra: str) -> int:
    """A job of whole KWOK nodes (8 GPUs each) whose script runs an srun step."""
    return gw.sbatch(
        "-p", "k8s", "-N", str(nodes), "--gres=gpu:8", f"--qos={qos}", *extra,
        "--wrap", "srun ./solver",
    )  # fmt: skip


def reason_of(gw: Gateway, job: int) -> list[str]:
    """squeue's `%T %r` of the job, split: ["RUNNING", "WillEvict"]."""
    return gw.ok(["squeue", "-h", "-j", str(job), "-o", "%T %r"]).split()


def running_graceful(gw: Gateway, kube: KubeClient, ns: str, jobs: list[int]) -> None:
    """Wait until each job runs, then have KWOK keep its pods through their deletion's grace
    (as a kubelet would for a process trapping SIGTERM)."""
    for job in jobs:

        def running(job: int = job) -> bool:
            return reason_of(gw, job) == ["RUNNING", "None"]

        wait_until(f"job {job} running", running)
        graceful(kube, ns, job)
