"""A gateway on the real kubelet nodes, as the kubelet e2e tests each start one: a namespace
of its own, a directory tree whose `users/` is the cluster's filesystem map (a hostPath at the
same path on the nodes: the kubelets run on this machine) with the submitting user's home
below it, and the caldera.toml of one Kubernetes cluster. Helpers for the tests' fixtures
(`yield from`), so each module keeps its own fixture scope."""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

from kubernetes import client

from tests.integration.test_k8s_bridge_helpers import wait_until
from tests.support.kubelet_env import KubeletEnv

__all__ = ["cluster_config", "job_namespace", "shared_tree", "user_home", "user_tree"]


def job_namespace(env: KubeletEnv, prefix: str) -> Iterator[str]:
    """A fresh namespace (with its default service account), deleted afterwards."""
    core = client.CoreV1Api(env.k8s.api_client())
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    wait_until(
        "the namespace's default service account",
        lambda: bool(core.list_namespaced_service_account(name).items),
    )
    yield name
    core.delete_namespace(name)


def user_tree(prefix: str) -> Iterator[Path]:
    """A directory the submitting user can traverse (the shims and scripts below it)."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def user_home(base: Path, user: str = "tester") -> Path:
    """`base/users/<user>`, the user's own: below the cluster's filesystem map."""
    path = base / "users" / user
    path.mkdir(parents=True)
    entry = pwd.getpwnam(user)
    os.chown(path, entry.pw_uid, entry.pw_gid)
    os.chmod(base / "users", 0o755)
    return path


def shared_tree(prefix: str) -> Iterator[Path]:
    """`user_tree` with the user's home and `out/` (1777), which every job's pods may write
    into (a module's jobs each take a subdirectory)."""
    for path in user_tree(prefix):
        user_home(path)
        out = path / "out"
        out.mkdir()
        os.chmod(out, 0o1777)
        yield path


def cluster_config(
    env: KubeletEnv,
    ns: str,
    base: Path,
    *,
    mode: str = "caldera",
    image: str | None = None,
    kill_wait_s: float = 2,
    top: str = "",
    cluster: str = "",
) -> str:
    """caldera.toml: one Kubernetes cluster `real` (`mode`: caldera, volcano, volcano-job)
    whose filesystem map is `base/users`; `top` and `cluster` add lines to the top level and
    to the cluster's table."""
    return (
        "agents = false\n"
        f"{top}"
        "[kubernetes]\n"
        "[[kubernetes.cluster]]\n"
        'name = "real"\n'
        f'kubeconfig = "{env.k8s.admin_kubeconfig}"\n'
        f"volcano = {'false' if mode == 'caldera' else 'true'}\n"
        f'mode = "{mode}"\n'
        f'namespace = "{ns}"\n'
        f'default_image = "{image or env.job_image}"\n'
        f"kill_wait_s = {kill_wait_s}\n"
        f"{cluster}"
        "[[kubernetes.cluster.filesystem]]\n"
        f'prefix = "{base / "users"}"\n'
    )
