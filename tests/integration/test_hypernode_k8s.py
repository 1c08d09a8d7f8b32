"""Volcano HyperNode objects written by Caldera, accepted by the REAL kube-apiserver of
testenv/k8s.

testenv/k8s runs Volcano v1.10.0 (the only volcano.sh/volcano version the Go module proxy
serves), whose CRDs have no `topology.volcano.sh` group: HyperNodes came with Volcano 1.12.
So this test registers the HyperNode CRD generated from Volcano's module source, the newest
served (`volcano.sh/apis v1.13.0`, `pkg/apis/topology/v1alpha1`), with controller-gen
(`sigs.k8s.io/controller-tools v0.16.5`) and Volcano's own CRD options - as Volcano's
Makefile makes its CRDs. The generated file is cached under $CALDERA_TESTENV_CACHE
(`volcano-apis-v1.13.0/`); the first build takes ~2 minutes.

The API server then validates every object against that CRD's schema (structural schema
plus its CEL rules) with strict field validation, so an unknown or misspelt field fails.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gateway.topology.hypernode import GROUP, PLURAL, VERSION, to_hypernodes, validate_hypernode
from gateway.topology.ibnetdiscover import read_ibnetdiscover, topology_from_fabric
from gateway.topology.k8s_labels import topology_from_labels
from gateway.topology.slurm_conf import read_topology_conf
from tests.support.k8s_env import K8sEnv, k8s_env
from tests.support.shared_data import MICRO_TOPOLOGY

pytestmark = pytest.mark.k8s
__all__ = ["k8s_env"]

ROOT = Path(__file__).resolve().parents[2]
MICRO = MICRO_TOPOLOGY
FABRIC = ROOT / "tests" / "data" / "ibnetdiscover" / "fabric.txt"
APIS_VERSION = "v1.13.0"
CONTROLLER_TOOLS = "v0.16.5"
GO = os.environ.get("GO", "/usr/local/go/bin/go")
CRD_NAME = f"{PLURAL}.{GROUP}"


def hypernode_crd() -> Path:
    """The HyperNode CRD generated from volcano.sh/apis (cached)."""
    cache = Path(os.environ.get("CALDERA_TESTENV_CACHE", "/var/cache/caldera-testenv"))
    out_dir = cache / f"volcano-apis-{APIS_VERSION}" / "crds"
    crd = out_dir / f"{GROUP}_{PLURAL}.yaml"
    if crd.exists():
        return crd
    out_dir.mkdir(parents=True, exist_ok=True)
    with (out_dir.parent / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if crd.exists():
            return crd
        env = dict(os.environ, GOFLAGS="-mod=mod", GOTOOLCHAIN="local")
        with tempfile.TemporaryDirectory(prefix="hypernode-crd-") as tmp:
            work = Path(tmp)
            (work / "go.mod").write_text("module caldera.test/hypernodecrd\n\ngo 1.24.0\n")
            (work / "tools.go").write_text(
                "//go:build tools\n\npackage tools\n\nimport (\n"
                '\t_ "sigs.k8s.io/controller-tools/cmd/controller-gen"\n'
                '\t_ "volcano.sh/apis/pkg/apis/topology/v1alpha1"\n)\n'
            )
            steps = [
                [
                    GO,
                    "get",
                    f"sigs.k8s.io/controller-tools/cmd/controller-gen@{CONTROLLER_TOOLS}",
                    f"volcano.sh/apis@{APIS_VERSION}",
                ],
                [
                    GO,
                    "build",
                    "-o",
                    "controller-gen",
                    "sigs.k8s.io/controller-tools/cmd/controller-gen",
                ],
                [
                    "./controller-gen",
                    "crd:crdVersions=v1,generateEmbeddedObjectMeta=true",
                    "paths=volcano.sh/apis/pkg/apis/topology/v1alpha1",
                    f"output:crd:artifacts:config={work / 'out'}",
                ],
            ]
            for argv in steps:
                proc = subprocess.run(
                    argv,
                    cwd=work,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=1200,
                    check=False,
                )
                assert proc.returncode == 0, f"{argv[0]} failed:\n{proc.stdout}{proc.stderr}"
            generated = work / "out" / f"{GROUP}_{PLURAL}.yaml"
            tmp_crd = crd.with_suffix(".tmp")
            tmp_crd.write_text(generated.read_text())
            tmp_crd.replace(crd)
    return crd


def _served(api: client.ApiClient) -> bool:
    groups = client.ApisApi(api).get_api_versions().groups
    return any(g.name == GROUP for g in groups)


@pytest.fixture(scope="module")
def hypernode_api(k8s_env: K8sEnv) -> Iterator[client.CustomObjectsApi]:
    api = k8s_env.api_client()
    ext = client.ApiextensionsV1Api(api)
    created = False
    if not _served(api):  # Volcano 1.10 has no HyperNode CRD
        body = yaml.safe_load(hypernode_crd().read_text())
        try:
            ext.create_custom_resource_definition(body)
            created = True
        except ApiException as exc:
            if exc.status != 409:
                raise
        deadline = time.monotonic() + 60
        while True:
            conds = ext.read_custom_resource_definition(CRD_NAME).status.conditions or []
            if any(c.type == "Established" and c.status == "True" for c in conds):
                break
            assert time.monotonic() < deadline, "HyperNode CRD never became Established"
            time.sleep(0.2)
        deadline = time.monotonic() + 30
        while not _served(api):  # discovery lags behind Established a little
            assert time.monotonic() < deadline
            time.sleep(0.2)
    yield client.CustomObjectsApi(api)
    if created:
        ext.delete_custom_resource_definition(CRD_NAME)


def _apply(
    api: client.CustomObjectsApi, objs: list[dict[str, Any]], run: str
) -> list[dict[str, Any]]:
    out = []
    for obj in objs:
        obj = {
            **obj,
            "metadata": {**obj["metadata"], "name": f"{run}-{obj['metadata']['name']}"[:253]},
        }
        obj["metadata"]["labels"] = {**obj["metadata"]["labels"], "caldera.io/test-run": run}
        for m in obj["spec"]["members"]:
            if m["type"] == "HyperNode":
                m["selector"]["exactMatch"]["name"] = f"{run}-{m['selector']['exactMatch']['name']}"
        assert validate_hypernode(obj) == []
        out.append(
            api.create_cluster_custom_object(GROUP, VERSION, PLURAL, obj, field_validation="Strict")
        )
    return out


@pytest.fixture
def run_id(hypernode_api: client.CustomObjectsApi) -> Iterator[str]:
    run = f"t{uuid.uuid4().hex[:6]}"
    yield run
    found = hypernode_api.list_cluster_custom_object(
        GROUP, VERSION, PLURAL, label_selector=f"caldera.io/test-run={run}"
    )
    for item in found["items"]:
        hypernode_api.delete_cluster_custom_object(GROUP, VERSION, PLURAL, item["metadata"]["name"])


def test_volcano_of_testenv_does_not_serve_hypernodes_but_the_generated_crd_does(
    k8s_env: K8sEnv, hypernode_api: client.CustomObjectsApi
) -> None:
    crd = yaml.safe_load(hypernode_crd().read_text())
    assert crd["spec"]["group"] == GROUP
    assert crd["spec"]["scope"] == "Cluster"
    assert [v["name"] for v in crd["spec"]["versions"]] == [VERSION]
    assert k8s_env.volcano_version.startswith("v1.10")
    assert _served(k8s_env.api_client())


def test_hypernodes_from_the_kwok_nodes_labels_are_accepted(
    k8s_env: K8sEnv, hypernode_api: client.CustomObjectsApi, run_id: str
) -> None:
    nodes = client.CoreV1Api(k8s_env.api_client()).list_node(label_selector="type=kwok").items
    labels = {n.metadata.name: dict(n.metadata.labels or {}) for n in nodes}
    topo = topology_from_labels(labels)
    assert set(topo.nodes()) == set(labels)
    objs = to_hypernodes(topo)
    created = _apply(hypernode_api, objs, run_id)
    assert len(created) == len(objs)
    back = hypernode_api.list_cluster_custom_object(
        GROUP, VERSION, PLURAL, label_selector=f"caldera.io/test-run={run_id}"
    )["items"]
    tier1 = [o for o in back if o["spec"]["tier"] == 1]
    members = sorted(
        m["selector"]["exactMatch"]["name"] for o in tier1 for m in o["spec"]["members"]
    )
    assert members == sorted(labels)
    assert {o["spec"]["tier"] for o in back} == {1, 2}


@pytest.mark.parametrize("source", ["slurm-sim-micro", "ibnetdiscover"])
def test_hypernodes_from_topology_conf_and_fabric_are_accepted(
    hypernode_api: client.CustomObjectsApi, run_id: str, source: str
) -> None:
    topo = (
        read_topology_conf(MICRO)
        if source == "slurm-sim-micro"
        else topology_from_fabric(read_ibnetdiscover(FABRIC))
    )
    created = _apply(hypernode_api, to_hypernodes(topo), run_id)
    assert {o["metadata"]["annotations"]["topology.caldera.io/switch"] for o in created} <= {
        s.name for s in topo.switches
    }


def test_the_api_server_enforces_the_crd_schema(
    hypernode_api: client.CustomObjectsApi, run_id: str
) -> None:
    bad = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "HyperNode",
        "metadata": {"name": f"{run_id}-bad", "labels": {"caldera.io/test-run": run_id}},
        "spec": {
            "tier": 1,
            "members": [
                {
                    "type": "Node",
                    "selector": {"exactMatch": {"name": "a"}, "regexMatch": {"pattern": "b"}},
                }
            ],
        },
    }
    assert validate_hypernode(bad)
    with pytest.raises(ApiException) as info:
        hypernode_api.create_cluster_custom_object(GROUP, VERSION, PLURAL, bad)
    assert info.value.status == 422
    typo = {**bad, "spec": {"tier": 1, "memberz": []}}
    with pytest.raises(ApiException) as info:
        hypernode_api.create_cluster_custom_object(
            GROUP, VERSION, PLURAL, typo, field_validation="Strict"
        )
    assert info.value.status in (400, 422)
