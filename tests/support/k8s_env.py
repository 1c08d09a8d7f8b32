"""The real Kubernetes test environment (testenv/k8s) for tests.

`ensure_up()` builds the upstream binaries if they are not cached and starts etcd,
kube-apiserver, kube-scheduler, kube-controller-manager and KWOK (and Volcano on request) on
loopback through ``testenv/k8s/up.sh``; `down()` stops them. Tests use the session-scoped
fixtures `k8s_env` and `k8s_env_volcano`, which stop the environment at the end of the session
only if they started it (set CALDERA_K8S_KEEP=1 to keep it running).

Environment: CALDERA_K8S_BASE (state, default /tmp/caldera-k8s), CALDERA_TESTENV_CACHE
(binaries), CALDERA_K8S_NODES (node count for the fixtures, default 8).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest
from kubernetes import client

__all__ = [
    "K8sEnv",
    "K8sEnvError",
    "User",
    "down",
    "ensure_up",
    "k8s_env",
    "k8s_env_volcano",
    "read_env",
]

User = Literal["admin", "alice", "bob"]

TESTENV_DIR = Path(__file__).resolve().parents[2] / "testenv" / "k8s"
# A cold build of every component takes many minutes on 2 cores; a warm start a few seconds.
UP_TIMEOUT_S = 3600.0
DOWN_TIMEOUT_S = 120.0


class K8sEnvError(RuntimeError):
    """The test environment could not be built, started, stopped or read."""


def base_dir() -> Path:
    return Path(os.environ.get("CALDERA_K8S_BASE", "/tmp/caldera-k8s"))


@dataclass(frozen=True)
class K8sEnv:
    """A running environment, as described by up.sh's env.json."""

    server: str
    ca_file: Path
    tokens: dict[str, str]
    kubeconfigs: dict[str, Path]
    nodes: int
    volcano: bool
    bin_dir: Path
    base_dir: Path
    kubernetes_version: str
    volcano_version: str
    kwok_version: str

    @property
    def admin_token(self) -> str:
        return self.tokens["admin"]

    @property
    def admin_kubeconfig(self) -> Path:
        return self.kubeconfigs["admin"]

    def token(self, user: User) -> str:
        return self.tokens[user]

    def kubeconfig(self, user: User) -> Path:
        return self.kubeconfigs[user]

    def api_client(self, user: User = "admin") -> client.ApiClient:
        """A `kubernetes` client authenticated as `user` (bearer token, TLS verified)."""
        configuration = client.Configuration(
            host=self.server,
            api_key={"authorization": self.token(user)},
            api_key_prefix={"authorization": "Bearer"},
            ssl_ca_cert=str(self.ca_file),
        )
        return client.ApiClient(configuration)

    @classmethod
    def from_json(cls, text: str) -> K8sEnv:
        raw = json.loads(text)
        try:
            return cls(
                server=str(raw["server"]),
                ca_file=Path(raw["ca_file"]),
                tokens={str(k): str(v) for k, v in raw["tokens"].items()},
                kubeconfigs={str(k): Path(v) for k, v in raw["kubeconfigs"].items()},
                nodes=int(raw["nodes"]),
                volcano=bool(raw["volcano"]),
                bin_dir=Path(raw["bin_dir"]),
                base_dir=Path(raw["base_dir"]),
                kubernetes_version=str(raw["kubernetes_version"]),
                volcano_version=str(raw["volcano_version"]),
                kwok_version=str(raw["kwok_version"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise K8sEnvError(f"malformed env.json: {exc!r}") from exc


def read_env() -> K8sEnv | None:
    """The environment that up.sh last described, or None if it is not up."""
    path = base_dir() / "env.json"
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    return K8sEnv.from_json(text)


def _run(argv: list[str], timeout: float) -> None:
    try:
        proc = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise K8sEnvError(f"{argv[0]} did not finish within {timeout:.0f}s") from exc
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
        raise K8sEnvError(f"{' '.join(argv)} exited {proc.returncode}:\n{tail}")


def ensure_up(volcano: bool = False, nodes: int = 8) -> K8sEnv:
    """Build if not cached, start whatever is not running, and describe the environment.

    Idempotent and cheap when everything runs already. Volcano, once started, keeps running
    until `down()`; the node set is made to match `nodes`.
    """
    argv = [str(TESTENV_DIR / "up.sh"), "--nodes", str(nodes)]
    if volcano:
        argv.append("--volcano")
    _run(argv, UP_TIMEOUT_S)
    env = read_env()
    if env is None:
        raise K8sEnvError(f"up.sh succeeded but wrote no {base_dir() / 'env.json'}")
    if volcano and not env.volcano:
        raise K8sEnvError("up.sh --volcano succeeded but Volcano is not running")
    return env


def down() -> None:
    """Stop every component and delete the environment's state (idempotent)."""
    _run([str(TESTENV_DIR / "down.sh")], DOWN_TIMEOUT_S)


def _session_env(volcano: bool) -> Iterator[K8sEnv]:
    was_up = read_env() is not None
    env = ensure_up(volcano=volcano, nodes=int(os.environ.get("CALDERA_K8S_NODES", "8")))
    yield env
    if not was_up and os.environ.get("CALDERA_K8S_KEEP") != "1":
        down()


@pytest.fixture(scope="session")
def k8s_env() -> Iterator[K8sEnv]:
    """The environment without Volcano (started for the session if not running)."""
    yield from _session_env(volcano=False)


@pytest.fixture(scope="session")
def k8s_env_volcano() -> Iterator[K8sEnv]:
    """The environment with Volcano's CRDs, vc-scheduler and vc-controller-manager."""
    yield from _session_env(volcano=True)
