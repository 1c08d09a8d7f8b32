"""Translation of jobs into Kubernetes objects: golden manifests and the rules behind them.

Regenerate the golden files after an intended change with
`CALDERA_UPDATE_GOLDEN=1 pytest tests/unit/test_k8s_render.py` and review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from gateway.compat.arrays import parse_array
from gateway.model.backend import Launch
from gateway.model.job import Job, RankPlacement
from gateway.model.jobspec import JobSpec
from gateway.model.state import JobState
from gateway.model.values import GresItem
from k8s_bridge import launch
from k8s_bridge.names import GangNames
from k8s_bridge.options import GangMode, K8sOptions, SharedDir, Toleration
from k8s_bridge.render import GangManifests, TranslationError, render_gang
from k8s_bridge.request import GangRequest, rank_shares, rdma_per_rank

GOLDEN = Path(__file__).parent / "golden" / "k8s"
ROOT_UID = "11111111-2222-3333-4444-555555555555"
HOPPER = "feature.caldera.io/hopper"
SCRIPT = "#!/bin/bash\n#SBATCH -N 2\nsrun hostname\n"


def spec(**fields: Any) -> JobSpec:
    base: dict[str, Any] = {"name": "train", "workdir": "/home/alice/run"}
    base.update(fields)
    return JobSpec(**base)


def request(job_spec: JobSpec, **fields: Any) -> GangRequest:
    base: dict[str, Any] = {
        "job_id": 4242,
        "spec": job_spec,
        "user": "alice",
        "uid": 1000,
        "gid": 1000,
        "group": "users",
        "script": SCRIPT,
        "environment": {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "4"},
        "partition": "k8s",
        "cluster": "gpu-east",
        "account": "physics",
        "submit_host": "login1",
    }
    base.update(fields)
    return GangRequest(**base)


CASES: dict[str, tuple[GangRequest, K8sOptions, GangMode]] = {
    "single_rank_caldera": (
        request(spec(ntasks=1), time_limit=30),
        K8sOptions(namespace="hpc"),
        GangMode.CALDERA,
    ),
    "mpi_gpu_ib_caldera": (
        request(
            spec(
                nodes_min=2,
                ntasks_per_node=4,
                cpus_per_task=2,
                mem_per_node_mb=65536,
                gres=(GresItem("gpu", None, 4),),
                constraint="ib&hopper",
                switches=1,
                container_image="nvcr.io/nvidia/pytorch:24.05-py3",
                script_args=("--epochs", "3"),
            ),
            time_limit=120,
            environment={"PATH": "/usr/bin", "BASH_FUNC_module%%": "() { :; }"},
        ),
        K8sOptions(namespace="hpc", tolerations=(Toleration("kwok.x-k8s.io/node"),)),
        GangMode.CALDERA,
    ),
    "array_task_partition_volcano": (
        request(
            spec(nodes_min=3, gres=(GresItem("gpu", None, 1),), array=parse_array("0-9", 100)),
            partition="a100",
            array_job_id=4240,
            array_task_id=2,
            attempt=1,
        ),
        K8sOptions(namespace="hpc", volcano_queue="research"),
        GangMode.VOLCANO,
    ),
    "volcano_job": (
        request(spec(nodes_min=2, ntasks=3, gres=(GresItem("ib", None, 2),))),
        K8sOptions(namespace="hpc"),
        GangMode.VOLCANO_JOB,
    ),
    "gpu_memory_share": (
        request(spec(ntasks=1, gpu_memory_mb=20480)),
        K8sOptions(namespace="hpc", gpu_share=True),
        GangMode.VOLCANO,
    ),
    "gpu_memory_whole_gpus": (
        request(spec(ntasks=1, gres=(GresItem("gpu", None, 2),), gpu_memory_mb=40960)),
        K8sOptions(namespace="hpc"),
        GangMode.CALDERA,
    ),
    "kube_scheduler_comparison": (
        request(spec(nodes_min=2)),
        K8sOptions(namespace="hpc", pod_annotations={"kwok.caldera.io/complete-after": "2s"}),
        GangMode.KUBE_SCHEDULER,
    ),
}


def rendered(case: str) -> GangManifests:
    req, opts, mode = CASES[case]
    return render_gang(req, opts, mode).owned_by(ROOT_UID)


@pytest.mark.parametrize("case", sorted(CASES))
def test_manifests_match_the_golden_files(case: str) -> None:
    objects = rendered(case).objects()
    objects[0]["data"]["token"] = "<per-process token>"  # launch.job_token: a random key
    text = json.dumps(objects, indent=2, sort_keys=True) + "\n"
    path = GOLDEN / f"{case}.json"
    if os.environ.get("CALDERA_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"missing golden file {path} (CALDERA_UPDATE_GOLDEN=1 writes it)"
    assert json.loads(path.read_text()) == json.loads(text)


def test_translation_is_deterministic_so_retries_are_idempotent() -> None:
    req, opts, mode = CASES["mpi_gpu_ib_caldera"]
    assert render_gang(req, opts, mode) == render_gang(req, opts, mode)
    names = [o["metadata"]["name"] for o in rendered("mpi_gpu_ib_caldera").objects()]
    assert names == [
        "caldera-4242",
        "caldera-4242-env",
        "caldera-4242",
        "caldera-4242",
        "caldera-4242-0",
        "caldera-4242-1",
    ]


def test_every_object_links_back_to_the_job_and_is_owned_by_the_root() -> None:
    gang = rendered("mpi_gpu_ib_caldera")
    for obj in gang.objects():
        labels = obj["metadata"]["labels"]
        assert labels["caldera.io/job-id"] == "4242"
        assert labels["caldera.io/cluster"] == "gpu-east"
        assert labels["app.kubernetes.io/managed-by"] == "caldera"
    assert "ownerReferences" not in gang.root["metadata"]
    for obj in gang.children():
        (ref,) = obj["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["name"], ref["uid"]) == ("ConfigMap", "caldera-4242", ROOT_UID)


def test_podgroup_asks_for_every_rank_at_once() -> None:
    gang = rendered("array_task_partition_volcano")
    assert gang.podgroup is not None
    assert gang.podgroup["spec"]["minMember"] == 3
    assert gang.podgroup["spec"]["queue"] == "research"
    for pod in gang.pods:
        assert pod["spec"]["schedulerName"] == "volcano"
        assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "caldera-4242-r1"


def test_rank_zero_runs_the_script_and_the_others_wait() -> None:
    gang = rendered("mpi_gpu_ib_caldera")
    first, second = (p["spec"]["containers"][0] for p in gang.pods)
    assert first["command"] == [*launch.BATCH_INIT, "/caldera/job/script", "--epochs", "3"]
    assert second["command"][0] == "/bin/sh"
    assert gang.root["data"]["script"] == SCRIPT


def test_slurm_variables_per_rank() -> None:
    gang = rendered("mpi_gpu_ib_caldera")
    envs = [{e["name"]: e["value"] for e in p["spec"]["containers"][0]["env"]} for p in gang.pods]
    assert [(e["SLURM_NODEID"], e["SLURM_PROCID"], e["SLURM_LOCALID"]) for e in envs] == [
        ("0", "0", "0"),
        ("1", "4", "0"),
    ]
    assert envs[1]["SLURMD_NODENAME"] == "caldera-4242-1"
    assert gang.env["data"]["SLURM_JOB_NODELIST"] == "caldera-4242-[0-1]"
    assert gang.env["data"]["SLURM_TASKS_PER_NODE"] == "4(x2)"
    assert gang.env["data"]["SLURM_NTASKS_PER_NODE"] == "4"
    assert gang.root["data"]["hostfile"] == (
        "caldera-4242-0.caldera-4242 slots=4\ncaldera-4242-1.caldera-4242 slots=4\n"
    )


def test_environment_names_a_configmap_cannot_hold_are_dropped_and_recorded() -> None:
    env = rendered("mpi_gpu_ib_caldera").env
    assert "BASH_FUNC_module%%" not in env["data"]
    assert env["metadata"]["annotations"]["caldera.io/dropped-env"] == "BASH_FUNC_module%%"


def test_resources_shm_and_time_limit() -> None:
    pod = rendered("mpi_gpu_ib_caldera").pods[0]["spec"]
    limits = pod["containers"][0]["resources"]["limits"]
    assert limits == {"cpu": "8", "memory": "65536Mi", "nvidia.com/gpu": "4", "rdma/hca": "4"}
    assert pod["containers"][0]["resources"]["requests"] == limits
    (shm,) = [v for v in pod["volumes"] if v["name"] == "shm"]
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "32768Mi"}
    assert "activeDeadlineSeconds" not in pod  # rank 0's init enforces it: it can be raised
    assert pod["containers"][0]["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
    # -C ib&hopper: ib is the RDMA resource, hopper a node feature label
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [
        {
            "matchExpressions": [
                {"key": "feature.caldera.io/hopper", "operator": "In", "values": ["true"]}
            ]
        }
    ]


def test_gpu_memory_as_volcano_share_or_as_a_node_constraint() -> None:
    shared = rendered("gpu_memory_share").pods[0]["spec"]["containers"][0]["resources"]["limits"]
    assert shared["volcano.sh/gpu-memory"] == "20480"
    assert "nvidia.com/gpu" not in shared
    whole = rendered("gpu_memory_whole_gpus").pods[0]["spec"]
    assert whole["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    terms = whole["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"] == [
        {"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": ["40959"]}
    ]


def test_volcano_job_has_one_task_per_rank_and_ends_with_rank_zero() -> None:
    gang = rendered("volcano_job")
    assert gang.pods == ()
    assert gang.podgroup is None
    assert gang.volcano_job is not None
    vspec = gang.volcano_job["spec"]
    assert vspec["minAvailable"] == 2
    assert [t["name"] for t in vspec["tasks"]] == ["rank0", "rank1"]
    assert vspec["tasks"][0]["policies"] == [{"event": "TaskCompleted", "action": "CompleteJob"}]


def test_the_gateway_placement_sizes_the_pods() -> None:
    job_spec = spec(nodes_min=2, mem_per_cpu_mb=1000, ntasks=2)
    placement = (RankPlacement("n1", 1, 6, 6000), RankPlacement("n2", 1, 6, 6000))
    req = request(job_spec, placement=placement)
    assert [(s.cpus, s.memory_mb) for s in rank_shares(req)] == [(6, 6000), (6, 6000)]
    assert [(s.cpus, s.memory_mb) for s in rank_shares(request(job_spec))] == [
        (1, 1000),
        (1, 1000),
    ]


def test_rdma_is_asked_by_gres_or_by_an_ib_constraint() -> None:
    assert rdma_per_rank(spec(gres=(GresItem("ib", None, 2),)), 8) == 2
    assert rdma_per_rank(spec(constraint="infiniband"), 8) == 8
    assert rdma_per_rank(spec(constraint="infiniband"), 0) == 1
    assert rdma_per_rank(spec(constraint="a100"), 8) == 0


def test_host_mounts_need_the_site_to_allow_them() -> None:
    req = request(spec(container_mounts=("/scratch:/scratch:ro",)))
    with pytest.raises(TranslationError, match="allow_host_mounts"):
        render_gang(req, K8sOptions(), GangMode.CALDERA)
    gang = render_gang(req, K8sOptions(allow_host_mounts=True), GangMode.CALDERA)
    pod = gang.pods[0]["spec"]
    assert {"name": "mount-0", "hostPath": {"path": "/scratch"}} in pod["volumes"]
    assert {"name": "mount-0", "mountPath": "/scratch", "readOnly": True} in (
        pod["containers"][0]["volumeMounts"]
    )


def test_requests_from_a_launch_use_the_restart_count_as_attempt() -> None:
    job = Job(
        job_id=7,
        spec=spec(ntasks=1, time_limit=10),
        user="bob",
        uid=1001,
        gid=1001,
        group="bob",
        submit_time=0.0,
        state=JobState.RUNNING,
        restart_count=2,
        time_limit=10,
        partition="k8s",
    )
    launch = Launch(
        job=job,
        script="#!/bin/sh\n",
        environment={"A": "1"},
        placement=(RankPlacement("kwok-node-01", 1, 1, 0),),
        partition="k8s",
        cluster="east",
        env_extra={"NCCL_IB_HCA": "mlx5_0"},
    )
    req = GangRequest.from_launch(launch)
    assert req.attempt == 2
    assert dict(req.environment) == {"A": "1", "NCCL_IB_HCA": "mlx5_0"}
    assert req.deadline_s() == 600
    assert req.deadline_s(0.25) == 150
    assert GangNames("caldera", 7, 2).pod(0) == "caldera-7-r2-0"


def test_the_shared_environment_is_slurms_batch_environment_of_the_pods() -> None:
    env = rendered("array_task_partition_volcano").env["data"]
    assert env["SLURM_JOB_NODELIST"] == "caldera-4242-r1-[0-2]"
    assert env["SLURM_ARRAY_TASK_ID"] == "2"
    assert env["SLURM_RESTART_COUNT"] == "1"
    assert env["ENVIRONMENT"] == "BATCH"
    assert env["SLURM_JOB_PARTITION"] == "a100"
    for key in ("SLURM_PROCID", "SLURM_NODEID", "HOSTNAME", "CUDA_VISIBLE_DEVICES"):
        assert key not in env


SHARED = (SharedDir("/home"), SharedDir("/scratch", "/export/scratch"))


def _rank0(manifests: GangManifests) -> dict[str, Any]:
    container = manifests.pods[0]["spec"]["containers"][0]
    assert isinstance(container, dict)
    return container


def test_files_land_in_the_shared_submit_directory_as_slurmstepd_opens_them() -> None:
    opts = K8sOptions(filesystem=SHARED)
    job = spec(stderr="/scratch/alice/%x-%j.err", open_mode="append", nodes_min=2)
    req = request(job, environment={"SLURM_UMASK": "0077"})
    manifests = render_gang(req, opts, GangMode.CALDERA)
    for pod in manifests.pods:  # every rank has the directories and starts in the workdir
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert volumes["shared-0"]["hostPath"]["path"] == "/home"
        assert volumes["shared-1"]["hostPath"]["path"] == "/export/scratch"
        container = pod["spec"]["containers"][0]
        assert container["workingDir"] == "/home/alice/run"
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert (mounts["shared-0"], mounts["shared-1"]) == ("/home", "/scratch")
    init, command = _rank0(manifests)["command"][:4], _rank0(manifests)["command"][4:]
    assert tuple(init) == launch.BATCH_INIT
    assert command[:2] == ["/bin/sh", "-c"]
    assert command[3] == "/caldera/job/script"
    line = command[2]
    assert line.startswith("umask 0077; cd /home/alice/run && exec")
    assert ">>/home/alice/run/slurm-4242.out 2>>/scratch/alice/train-4242.err" in line


def test_without_a_filesystem_map_the_output_stays_in_the_pod_log() -> None:
    manifests = render_gang(request(spec()), K8sOptions(), GangMode.CALDERA)
    assert _rank0(manifests)["command"] == [*launch.BATCH_INIT, "/caldera/job/script"]
    assert "workingDir" not in _rank0(manifests)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"workdir": "/tmp/x"}, "working directory /tmp/x is not shared with cluster gpu-east"),
        ({"stdout": "/var/log/out"}, "-o /var/log/out is not in a directory shared"),
    ],
)
def test_files_outside_the_map_are_refused(fields: dict[str, str], message: str) -> None:
    with pytest.raises(TranslationError, match=message):
        render_gang(request(spec(**fields)), K8sOptions(filesystem=SHARED), GangMode.CALDERA)


@pytest.mark.parametrize("mode", list(GangMode))
def test_ranks_the_gateway_put_on_nodes_of_their_own_stay_apart_where_another_schedules(
    mode: GangMode,
) -> None:
    job_spec = spec(nodes_min=2)
    apart = (RankPlacement("n1", 1, 1, 0), RankPlacement("n2", 1, 1, 0))
    shared = (RankPlacement("n1", 1, 1, 0), RankPlacement("n1", 1, 1, 0))
    for placement, expected in ((apart, mode is not GangMode.CALDERA), (shared, False)):
        gang = render_gang(request(job_spec, placement=placement), K8sOptions(), mode)
        pods = gang.pods or tuple(t["template"] for t in (gang.volcano_job or {})["spec"]["tasks"])
        for pod in pods:
            anti = pod["spec"].get("affinity", {}).get("podAntiAffinity")
            assert (anti is not None) is expected, (mode, placement)
            if anti is not None:
                (term,) = anti["requiredDuringSchedulingIgnoredDuringExecution"]
                assert term["topologyKey"] == "kubernetes.io/hostname"
                assert term["labelSelector"]["matchLabels"]["caldera.io/job-id"] == "4242"


@pytest.mark.parametrize("mode", [GangMode.CALDERA, GangMode.VOLCANO, GangMode.VOLCANO_JOB])
def test_a_gang_finds_its_ranks_through_its_headless_service(mode: GangMode) -> None:
    gang = render_gang(request(spec(nodes_min=3)), K8sOptions(namespace="hpc"), mode)
    assert gang.service is not None
    assert gang.service in gang.children()
    service = gang.service["metadata"]["name"]
    specs = [p["spec"] for p in gang.pods] or [
        t["template"]["spec"] for t in (gang.volcano_job or {})["spec"]["tasks"]
    ]
    assert len(specs) == 3
    hosts = [line.split()[0] for line in gang.root["data"]["hostfile"].splitlines()]
    assert hosts == [f"{s['hostname']}.{service}" for s in specs]
    for pod_spec in specs:
        assert pod_spec["subdomain"] == service
        assert pod_spec["dnsPolicy"] == "ClusterFirst"  # the Service's names are cluster DNS


@pytest.mark.parametrize("mode", [GangMode.CALDERA, GangMode.VOLCANO, GangMode.KUBE_SCHEDULER])
def test_one_rank_creates_no_service_and_leaves_cluster_dns_alone(mode: GangMode) -> None:
    gang = render_gang(request(spec(ntasks=1)), K8sOptions(namespace="hpc"), mode)
    assert gang.service is None
    kinds = [o["kind"] for o in gang.owned_by(ROOT_UID).objects()]
    assert "Service" not in kinds
    assert kinds.count("Pod") == 1
    (pod,) = gang.pods
    assert "subdomain" not in pod["spec"]
    assert pod["spec"]["dnsPolicy"] == "Default"  # the node's resolver: no rank to look up
    (line,) = gang.root["data"]["hostfile"].splitlines()
    assert line.split()[0] == pod["spec"]["hostname"]  # in the pod's own /etc/hosts
    assert "CALDERA_SERVICE" not in gang.env["data"]


def test_the_site_can_pin_the_dns_policy() -> None:
    opts = K8sOptions(namespace="hpc", dns_policy="ClusterFirst")
    one = render_gang(request(spec(ntasks=1)), opts, GangMode.CALDERA)
    two = render_gang(request(spec(nodes_min=2)), opts, GangMode.CALDERA)
    assert {p["spec"]["dnsPolicy"] for p in (*one.pods, *two.pods)} == {"ClusterFirst"}
