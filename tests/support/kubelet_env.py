"""Real kubelet nodes for tests (testenv/kubelet), in a control plane of their own.

The kubelet nodes join a testenv/k8s control plane (with Volcano) that is separate from the
one the KWOK tests use (its own state directory and loopback ports), so the KWOK tests keep
seeing exactly their 8 simulated nodes and these tests see 2 KWOK nodes plus the real ones.
`ensure_up()` starts that control plane (testenv/k8s/up.sh) and the kubelets
(testenv/kubelet/up.sh); `down()` stops both. The session fixture `kubelet_env` stops them at
the end of the session only if it started them (CALDERA_K8S_KEEP=1 keeps them).

Environment: CALDERA_KUBELET_K8S_BASE, CALDERA_KUBELET_K8S_API_PORT, ..._ETCD_PORT,
..._SCHED_PORT, ..._KCM_PORT, ..._VC_SCHED_PORT, ..._VC_CM_PORT (the control plane's state and
ports, defaults below), and testenv/kubelet's own CALDERA_KUBELET_BASE, _PREFIX, _NET, _NODES.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.k8s_env import K8sEnv, K8sEnvError

__all__ = [
    "KubeletEnv",
    "KubeletNode",
    "down",
    "ensure_up",
    "kubelet_env",
    "node_down",
    "nodes_up",
    "read_env",
]

TESTENV = Path(__file__).resolve().parents[2] / "testenv"
# the control plane of the kubelet tests; CALDERA_KUBELET_<suffix> overrides CALDERA_<suffix>
_K8S_DEFAULTS = {
    "CALDERA_K8S_BASE": "/tmp/caldera-k8s-kubelet",
    "CALDERA_K8S_API_PORT": "17443",
    "CALDERA_K8S_ETCD_PORT": "13379",
    "CALDERA_K8S_SCHED_PORT": "17459",
    "CALDERA_K8S_KCM_PORT": "17457",
    "CALDERA_K8S_VC_SCHED_PORT": "17251",
    "CALDERA_K8S_VC_CM_PORT": "17252",
}
KWOK_NODES = 2
UP_TIMEOUT_S = 3600.0  # a cold build of the binaries takes many minutes
DOWN_TIMEOUT_S = 180.0


def script_env() -> dict[str, str]:
    """The environment for testenv's scripts: this control plane's state and ports."""
    env = dict(os.environ)
    for key, default in _K8S_DEFAULTS.items():
        env[key] = os.environ.get("CALDERA_KUBELET_" + key.removeprefix("CALDERA_"), default)
    return env


def _kubelet_base() -> Path:
    return Path(os.environ.get("CALDERA_KUBELET_BASE", "/tmp/caldera-kubelet"))


@dataclass(frozen=True)
class KubeletNode:
    """One real node: its name, address (port 10250 there) and network namespace."""

    name: str
    ip: str
    netns: str
    pod_cidr: str
    containerd: Path
    cgroup_root: str  # the kubelet's cgroupRoot: its pods' cgroups are below it


@dataclass(frozen=True)
class KubeletEnv:
    """The control plane (KWOK nodes included) and the real nodes next to the KWOK ones."""

    k8s: K8sEnv
    nodes: tuple[KubeletNode, ...]
    partition: str  # the nodes carry caldera.io/partition=<partition>
    job_image: str
    mpi_image: str  # python3 + Open MPI (testenv/kubelet/build_mpi_image.py): srun/mpirun
    kubelet_port: int
    gpus_per_node: int  # fake nvidia.com/gpu of each node (testenv/kubelet/fake_device_plugin.py)
    hcas_per_node: int  # fake rdma/hca of each node
    base_dir: Path


def read_env() -> KubeletEnv | None:
    """The running environment as the two up.sh scripts described it, or None."""
    k8s_json = Path(script_env()["CALDERA_K8S_BASE"]) / "env.json"
    kubelet_json = _kubelet_base() / "env.json"
    try:
        k8s = K8sEnv.from_json(k8s_json.read_text())
        raw = json.loads(kubelet_json.read_text())
    except FileNotFoundError:
        return None
    try:
        nodes = tuple(
            KubeletNode(
                name=str(n["name"]),
                ip=str(n["ip"]),
                netns=str(n["netns"]),
                pod_cidr=str(n["pod_cidr"]),
                containerd=Path(n["containerd"]),
                cgroup_root=str(n["cgroup_root"]),
            )
            for n in raw["nodes"]
        )
        return KubeletEnv(
            k8s=k8s,
            nodes=nodes,
            partition=str(raw["partition"]),
            job_image=str(raw["job_image"]),
            mpi_image=str(raw.get("mpi_image", "caldera.local/mpi:latest")),
            kubelet_port=int(raw["kubelet_port"]),
            gpus_per_node=int(raw["gpus_per_node"]),
            hcas_per_node=int(raw["hcas_per_node"]),
            base_dir=Path(raw["base_dir"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise K8sEnvError(f"malformed {kubelet_json}: {exc!r}") from exc


def _run(argv: list[str], timeout: float) -> None:
    try:
        proc = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env=script_env(),
        )
    except subprocess.TimeoutExpired as exc:
        raise K8sEnvError(f"{argv[0]} did not finish within {timeout:.0f}s") from exc
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
        raise K8sEnvError(f"{' '.join(argv)} exited {proc.returncode}:\n{tail}")


def ensure_up() -> KubeletEnv:
    """Start (or check) the control plane and the kubelet nodes; idempotent."""
    _run([str(TESTENV / "k8s" / "up.sh"), "--nodes", str(KWOK_NODES), "--volcano"], UP_TIMEOUT_S)
    _run([str(TESTENV / "kubelet" / "up.sh")], UP_TIMEOUT_S)
    env = read_env()
    if env is None:
        raise K8sEnvError("the up.sh scripts succeeded but wrote no env.json")
    return env


def node_down(env: KubeletEnv, node: KubeletNode) -> None:
    """The node fails: its kubelet is killed (the node controller marks it NotReady after
    its grace period) and so is every container it ran (the machine is gone, its jobs with
    it). `nodes_up()` brings it back."""
    pid_file = env.base_dir / node.name / "kubelet.pid"
    pid = int(pid_file.read_text())
    if Path(f"/proc/{pid}/comm").read_text().strip() != "kubelet":
        raise K8sEnvError(f"{pid_file} does not name a running kubelet")
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists() and _state(pid) != "Z":
        if time.monotonic() > deadline:
            raise K8sEnvError(f"the kubelet of {node.name} (pid {pid}) did not exit")
        time.sleep(0.1)
    ctr = ["ctr", "-a", str(node.containerd), "-n", "k8s.io", "tasks"]
    tasks = subprocess.run(
        [*ctr, "ls", "-q"], capture_output=True, text=True, check=True, timeout=30
    ).stdout.split()
    for task in tasks:  # one may exit meanwhile: not an error
        subprocess.run([*ctr, "kill", "-s", "SIGKILL", task], capture_output=True, timeout=30)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return "X"


def nodes_up() -> None:
    """Restart whatever of the kubelet nodes is down and wait until they are Ready again."""
    _run([str(TESTENV / "kubelet" / "up.sh")], UP_TIMEOUT_S)


def down() -> None:
    """Stop the kubelet nodes, then their control plane (idempotent)."""
    try:
        _run([str(TESTENV / "kubelet" / "down.sh")], DOWN_TIMEOUT_S)
    finally:
        _run([str(TESTENV / "k8s" / "down.sh")], DOWN_TIMEOUT_S)


@pytest.fixture(scope="session")
def kubelet_env() -> Iterator[KubeletEnv]:
    """Real kubelet nodes next to 2 KWOK nodes, Volcano running (started for the session if
    not running)."""
    was_up = read_env() is not None
    env = ensure_up()
    yield env
    if not was_up and os.environ.get("CALDERA_K8S_KEEP") != "1":
        down()
