"""The real kubelet nodes of testenv/kubelet: registered next to the KWOK nodes, their port
10250 closed to anyone the API server does not vouch for, and a pod network that reaches
from a pod on one node to a pod on the other."""

from __future__ import annotations

import ipaddress
import json
import ssl
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.support.kubelet_env import KubeletEnv

pytestmark = pytest.mark.kubelet


def _kubelet_get(
    env: KubeletEnv,
    ip: str,
    path: str,
    token: str | None = None,
    cert: tuple[Path, Path] | None = None,
) -> int:
    """GET https://<node>:10250<path> (the kubelet's self-signed certificate is not
    checked), with a bearer token or a client certificate; the HTTP status."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if cert is not None:
        ctx.load_cert_chain(*cert)
    req = urllib.request.Request(f"https://{ip}:{env.kubelet_port}{path}")
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            body = resp.read()
            if path == "/pods":
                assert json.loads(body)["kind"] == "PodList"
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_kubelet_nodes_are_ready_next_to_the_kwok_nodes(kubelet_env: KubeletEnv) -> None:
    core = client.CoreV1Api(kubelet_env.k8s.api_client())
    listed: dict[str, Any] = core.api_client.sanitize_for_serialization(core.list_node())
    nodes = {n["metadata"]["name"]: n for n in listed["items"]}
    kwok = sorted(n for n in nodes if n.startswith("kwok-node-"))
    assert len(kwok) == kubelet_env.k8s.nodes
    assert len(kubelet_env.nodes) >= 2
    for node in kubelet_env.nodes:
        obj = nodes[node.name]
        ready = {c["type"]: c["status"] for c in obj["status"]["conditions"]}
        assert ready["Ready"] == "True"
        info = obj["status"]["nodeInfo"]
        assert info["kubeletVersion"] == kubelet_env.k8s.kubernetes_version
        assert info["containerRuntimeVersion"].startswith("containerd://")
        assert {"type": "InternalIP", "address": node.ip} in obj["status"]["addresses"]
        assert obj["metadata"]["labels"]["caldera.io/partition"] == kubelet_env.partition
        assert "kwok.x-k8s.io/node" not in obj["metadata"].get("annotations", {})
        allocatable = obj["status"]["allocatable"]
        assert allocatable["nvidia.com/gpu"] == str(kubelet_env.gpus_per_node)
        assert allocatable["rdma/hca"] == str(kubelet_env.hcas_per_node)


@pytest.mark.parametrize(
    "path", ["/pods", "/runningpods/", "/configz", "/metrics", "/logs/", "/stats/summary"]
)
def test_an_unauthenticated_request_to_port_10250_is_refused(
    kubelet_env: KubeletEnv, path: str
) -> None:
    for node in kubelet_env.nodes:
        assert _kubelet_get(kubelet_env, node.ip, path) == 401
        assert _kubelet_get(kubelet_env, node.ip, path, token="not-a-token") == 401


def test_the_kubelet_asks_the_api_server_who_may_do_what(kubelet_env: KubeletEnv) -> None:
    """Webhook authentication and authorisation: a real user without nodes/proxy is
    forbidden, a cluster admin is let in."""
    for node in kubelet_env.nodes:
        assert _kubelet_get(kubelet_env, node.ip, "/pods", kubelet_env.k8s.token("alice")) == 403
        assert _kubelet_get(kubelet_env, node.ip, "/pods", kubelet_env.k8s.admin_token) == 200


def test_exec_without_credentials_is_refused(kubelet_env: KubeletEnv) -> None:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    node = kubelet_env.nodes[0]
    req = urllib.request.Request(
        f"https://{node.ip}:{kubelet_env.kubelet_port}/run/default/x/y?cmd=id", method="POST"
    )
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(req, context=ctx, timeout=10)
    assert exc.value.code == 401


def test_a_client_certificate_from_another_ca_is_refused(
    kubelet_env: KubeletEnv, tmp_path: Path
) -> None:
    """Only the API server's certificate (signed by the CA the kubelets trust) gets in: a
    self-signed one with the same subject is an anonymous request, refused."""
    key, crt = tmp_path / "k.pem", tmp_path / "c.pem"
    subject = "/CN=kube-apiserver-kubelet-client"
    openssl = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
    subprocess.run(
        [*openssl, "-subj", subject, "-keyout", str(key), "-out", str(crt)],
        check=True,
        capture_output=True,
    )
    real = kubelet_env.k8s.base_dir / "pki"
    ip = kubelet_env.nodes[0].ip
    assert _kubelet_get(kubelet_env, ip, "/pods", cert=(crt, key)) == 401
    real_cert = (real / "kubelet-client.crt", real / "kubelet-client.key")
    assert _kubelet_get(kubelet_env, ip, "/pods", cert=real_cert) == 200


@pytest.fixture
def namespace(kubelet_env: KubeletEnv) -> Iterator[str]:
    core = client.CoreV1Api(kubelet_env.k8s.api_client())
    name = f"net-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    deadline = time.monotonic() + 30
    while not core.list_namespaced_service_account(name).items:
        assert time.monotonic() < deadline, "no default service account"
        time.sleep(0.2)
    yield name
    core.delete_namespace(name)


def _pod(name: str, node: str, image: str, script: str) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(
            node_name=node,
            restart_policy="Never",
            automount_service_account_token=False,
            termination_grace_period_seconds=1,
            containers=[
                client.V1Container(
                    name="c",
                    image=image,
                    image_pull_policy="IfNotPresent",
                    command=["/bin/sh", "-c", script],
                )
            ],
        ),
    )


def _wait_pod(core: client.CoreV1Api, ns: str, name: str, phases: set[str]) -> dict[str, Any]:
    """The pod (as the API server's JSON, camelCase) once its phase is one of `phases`."""
    deadline = time.monotonic() + 60
    while True:
        pod: dict[str, Any] = core.api_client.sanitize_for_serialization(
            core.read_namespaced_pod(name, ns)
        )
        if pod["status"].get("phase") in phases:
            return pod
        assert time.monotonic() < deadline, f"pod {name}: {pod['status']}"
        time.sleep(0.3)


def test_a_pod_reaches_a_pod_on_the_other_node(kubelet_env: KubeletEnv, namespace: str) -> None:
    core = client.CoreV1Api(kubelet_env.k8s.api_client())
    a, b = kubelet_env.nodes[0], kubelet_env.nodes[1]
    image = kubelet_env.job_image
    server = (
        "mkdir /tmp/www && echo pong-$(hostname) >/tmp/www/index.html && "
        "exec httpd -f -p 8080 -h /tmp/www"
    )
    core.create_namespaced_pod(namespace, _pod("server", b.name, image, server))
    ip = _wait_pod(core, namespace, "server", {"Running"})["status"]["podIP"]
    assert ipaddress.ip_address(ip) in ipaddress.ip_network(b.pod_cidr)
    client_script = (
        f"ping -c 1 -W 5 {ip} >/dev/null || exit 2; "
        f"printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 5 {ip} 8080 | grep -qx pong-server"
    )
    core.create_namespaced_pod(namespace, _pod("client", a.name, image, client_script))
    done = _wait_pod(core, namespace, "client", {"Succeeded", "Failed"})["status"]
    assert ipaddress.ip_address(done["podIP"]) in ipaddress.ip_network(a.pod_cidr)
    exit_code = done["containerStatuses"][0]["state"]["terminated"]["exitCode"]
    assert (done["phase"], exit_code) == ("Succeeded", 0)


def test_pod_logs_and_exec_go_through_the_api_server(
    kubelet_env: KubeletEnv, namespace: str
) -> None:
    """The API server reaches the kubelet with its client certificate (kubectl logs/exec)."""
    core = client.CoreV1Api(kubelet_env.k8s.api_client())
    node = kubelet_env.nodes[-1]
    script = "echo hello-from-$(hostname); exec sleep 3600"
    core.create_namespaced_pod(namespace, _pod("talker", node.name, kubelet_env.job_image, script))
    _wait_pod(core, namespace, "talker", {"Running"})
    deadline = time.monotonic() + 20
    while "hello-from-talker" not in (log := core.read_namespaced_pod_log("talker", namespace)):
        assert time.monotonic() < deadline, log
        time.sleep(0.3)
    kubectl = [str(kubelet_env.k8s.bin_dir / "kubectl")]
    kubectl += ["--kubeconfig", str(kubelet_env.k8s.admin_kubeconfig), "-n", namespace]
    out = subprocess.run(
        [*kubectl, "exec", "talker", "--", "cat", "/etc/hostname"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert out == "talker\n"
