"""Caldera jobs on real kubelet nodes (testenv/kubelet): `sbatch -p kubelet -N 2` through a
real gateway, Caldera's binder (or Volcano, in the Volcano modes) places the gang, containerd
runs the pods, and the batch script really runs on rank 0 with the SLURM_* environment; its
exit code is what sacct and scontrol report.

Jobs are submitted from the user's directory below the cluster's filesystem map (a hostPath
at the same path on the nodes: the kubelets run on this machine), so the working directory
and the -o/-e files are the user's own, as on a Slurm node. Some scripts also write into a
host directory mounted with --container-mounts (the cluster allows host mounts here). Time
limits are scaled (time_scale 0.25: -t 1 is 15 s) and KillWait is 2 s to keep it short.
"""

from __future__ import annotations

import ipaddress
import os
import pwd
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from k8s_bridge.kube import PODS, KubeClient
from tests.integration.test_k8s_bridge_helpers import admin_client, assert_nothing_left, wait_until
from tests.support.gateway_env import Gateway, discard_gateway, start_gateway
from tests.support.kubelet_env import KubeletEnv
from tests.support.kubelet_gateway import cluster_config, job_namespace, user_home, user_tree

pytestmark = pytest.mark.kubelet


@pytest.fixture
def ns(kubelet_env: KubeletEnv) -> Iterator[str]:
    yield from job_namespace(kubelet_env, "gw-kl")


@pytest.fixture
def kube(kubelet_env: KubeletEnv) -> KubeClient:
    return admin_client(kubelet_env.k8s)


@pytest.fixture
def base() -> Iterator[Path]:
    yield from user_tree("caldera-e2e-kubelet-")


@pytest.fixture
def mode() -> str:
    """Who places the gang (k8s_bridge GangMode): Caldera's binder unless a test says."""
    return "caldera"


@pytest.fixture
def home(base: Path) -> Path:
    """The submitting user's own directory, below the cluster's filesystem map."""
    return user_home(base)


@pytest.fixture
def gw(kubelet_env: KubeletEnv, ns: str, base: Path, mode: str) -> Iterator[Gateway]:
    config = cluster_config(
        kubelet_env,
        ns,
        base,
        mode=mode,
        cluster="allow_host_mounts = true\ntime_scale = 0.25\n",
    )
    gw = start_gateway(base / "gw", config)
    try:
        yield gw
    finally:
        discard_gateway(gw)


@pytest.fixture
def out(base: Path) -> Path:
    """A directory the job's pods write into (hostPath: the nodes share this filesystem)."""
    path = base / "out"
    path.mkdir()
    os.chmod(path, 0o1777)
    return path


def _running_pods(kube: KubeClient, ns: str, job: int) -> list[dict[str, object]]:
    items, _ = kube.list(PODS, ns, label_selector=f"caldera.io/job-id={job}")
    return [p for p in items if (p.get("status") or {}).get("phase") == "Running"]


def _env_lines(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


# Caldera's binder, Volcano's scheduler with a PodGroup, and one Volcano Job per gang
@pytest.mark.parametrize("mode", ["caldera", "volcano", "volcano-job"])
def test_the_batch_script_runs_on_rank_zero_of_a_real_node_and_its_exit_code_is_reported(
    gw: Gateway,
    kubelet_env: KubeletEnv,
    kube: KubeClient,
    ns: str,
    out: Path,
    mode: str,
    home: Path,
) -> None:
    script = out / "job.sh"
    script.write_text(
        "#!/bin/sh\n"
        "{ echo UID=$(id -u); echo HOST=$(hostname); env | grep '^SLURM'; } >/out/env.txt\n"
        "cat /proc/self/cgroup >/out/cgroup.txt\n"
        "exit 3\n"
    )
    part = kubelet_env.partition
    job = gw.sbatch(
        "-p",
        part,
        "-N",
        "2",
        "--no-requeue",
        f"--container-mounts={out}:/out",
        str(script),
        user="tester",
        cwd=home,
    )
    gw.wait(job, timeout=120)
    acct = gw.ok(
        ["sacct", "-j", str(job), "-X", "-P", "-n", "-o", "Partition,State,ExitCode,NodeList"]
    )
    assert acct.strip() == f"{part}|FAILED|3:0|kubelet-node-[01-02]"
    show = gw.ok(["scontrol", "show", "job", str(job)])
    assert re.search(r"\bJobState=FAILED Reason=NonZeroExitCode\b", show)
    assert re.search(r"\bExitCode=3:0\b", show)
    batch_host = re.search(r"\bBatchHost=(\S+)", show)
    assert batch_host is not None

    seen = _env_lines((out / "env.txt").read_text())
    assert seen["UID"] == str(pwd.getpwnam("tester").pw_uid)  # the submitter's, as in Slurm
    assert seen["HOST"] == f"caldera-{job}-0"
    assert seen["SLURM_JOB_ID"] == str(job)
    assert seen["SLURM_JOB_NUM_NODES"] == seen["SLURM_NNODES"] == "2"
    assert seen["SLURM_NODEID"] == seen["SLURM_PROCID"] == seen["SLURM_LOCALID"] == "0"
    assert seen["SLURM_JOB_PARTITION"] == part
    assert seen["SLURM_JOB_NODELIST"] == f"caldera-{job}-[0-1]"
    assert seen["SLURMD_NODENAME"] == f"caldera-{job}-0"
    # the script's processes are in a pod cgroup under one kubelet's cgroupRoot
    cgroup = (out / "cgroup.txt").read_text()
    ran_on = [
        n.name
        for n in kubelet_env.nodes
        if re.search(
            rf":memory:{re.escape(n.cgroup_root)}/kubepods/[a-z/]*pod[0-9a-f-]+/[0-9a-f]{{64}}$",
            cgroup,
            re.M,
        )
    ]
    assert len(ran_on) == 1, cgroup
    # rank 0 ran where scontrol says: Caldera's binder bound it where the gateway placed it;
    # in the Volcano modes Volcano chose, and STARTED reported the pods' own nodes
    assert ran_on == [batch_host.group(1)]
    assert_nothing_left(kube, ns)


def test_a_two_node_gang_runs_one_real_pod_per_node_and_completes(
    gw: Gateway, kubelet_env: KubeletEnv, kube: KubeClient, ns: str, out: Path, home: Path
) -> None:
    job = gw.sbatch(
        "-p",
        kubelet_env.partition,
        "-N",
        "2",
        f"--container-mounts={out}:/out",
        "--wrap",
        "while [ ! -e /out/go ]; do sleep 0.2; done; echo done >/out/rank0",
        cwd=home,
    )
    wait_until("both ranks running", lambda: len(_running_pods(kube, ns, job)) == 2, 90)
    cidrs = {n.name: ipaddress.ip_network(n.pod_cidr) for n in kubelet_env.nodes}
    placed = {}
    for pod in _running_pods(kube, ns, job):
        spec, status = pod["spec"], pod["status"]
        assert isinstance(spec, dict)
        assert isinstance(status, dict)
        placed[str(spec["nodeName"])] = str(status["podIP"])
    assert sorted(placed) == ["kubelet-node-01", "kubelet-node-02"]
    for node_name, ip in placed.items():  # addresses from each node's own CNI range
        assert ipaddress.ip_address(ip) in cidrs[node_name]
    wait_until("the job RUNNING", lambda: gw.job(job)["state"] == "RUNNING", 30)
    (out / "go").touch()
    gw.wait(job, timeout=60)
    acct = gw.ok(["sacct", "-j", str(job), "-X", "-P", "-n", "-o", "State,ExitCode"])
    assert acct.strip() == "COMPLETED|0:0"
    assert (out / "rank0").read_text() == "done\n"
    assert_nothing_left(kube, ns)


def test_gpus_and_hcas_from_the_device_plugin_reach_the_batch_script(
    gw: Gateway, kubelet_env: KubeletEnv, kube: KubeClient, ns: str, out: Path, home: Path
) -> None:
    """--gres=gpu:N is admitted by the kubelet only because the fake device plugin advertises
    nvidia.com/gpu; the container gets the fake character devices and CUDA_VISIBLE_DEVICES."""
    gpus = kubelet_env.gpus_per_node
    job = gw.sbatch(
        "-p",
        kubelet_env.partition,
        "-N",
        "2",
        f"--gres=gpu:{gpus}",
        "-C",
        "ib",
        f"--container-mounts={out}:/out",
        "--wrap",
        "{ env | grep -E '^(CUDA|NVIDIA)_VISIBLE_DEVICES=|^SLURM_GPUS_ON_NODE='; "
        "ls -ln /dev/nvidia* /dev/infiniband/; } >/out/gpus.txt 2>&1",
        cwd=home,
    )
    gw.wait(job, timeout=60)
    acct = gw.ok(["sacct", "-j", str(job), "-X", "-P", "-n", "-o", "State,ExitCode"])
    assert acct.strip() == "COMPLETED|0:0"
    text = (out / "gpus.txt").read_text()
    seen = _env_lines(text)
    assert seen["SLURM_GPUS_ON_NODE"] == str(gpus)
    assert seen["CUDA_VISIBLE_DEVICES"] == ",".join(str(i) for i in range(gpus))
    assert len(seen["NVIDIA_VISIBLE_DEVICES"].split(",")) == gpus
    # character devices: GPUs major 195 (as /dev/nvidiaN), HCAs major 231 (uverbsN)
    assert len(re.findall(r"^c[rw-]{9} .* 195, +\d+ .*/dev/nvidia\d$", text, re.M)) == gpus
    assert len(re.findall(r"^c[rw-]{9} .* 231, +\d+ .*uverbs\d$", text, re.M)) == gpus
    assert_nothing_left(kube, ns)


def _containerd_tasks(kubelet_env: KubeletEnv) -> list[str]:
    """Running containers (tasks) of every node's containerd, pause containers included."""
    tasks: list[str] = []
    for node in kubelet_env.nodes:
        r = subprocess.run(
            ["ctr", "-a", str(node.containerd), "-n", "k8s.io", "tasks", "ls", "-q"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        tasks += r.stdout.split()
    return tasks


def test_scancel_stops_the_real_containers(
    gw: Gateway, kubelet_env: KubeletEnv, kube: KubeClient, ns: str, out: Path, home: Path
) -> None:
    before = set(_containerd_tasks(kubelet_env))
    job = gw.sbatch(
        "-p",
        kubelet_env.partition,
        "-N",
        "2",
        f"--container-mounts={out}:/out",
        "--wrap",
        "trap 'echo TERM >/out/signal; exit 143' TERM; touch /out/started; "
        "while :; do sleep 0.2; done",
        cwd=home,
    )
    wait_until("the script started", (out / "started").exists, 90)
    # two ranks, each a pause container and the job's container
    wait_until("4 new containers", lambda: len(set(_containerd_tasks(kubelet_env)) - before) == 4)
    gw.ok(["scancel", str(job)])
    gw.wait(job, timeout=60)
    assert gw.job(job)["state"] == "CANCELLED"
    wait_until("the containers gone", lambda: not set(_containerd_tasks(kubelet_env)) - before, 60)
    assert (out / "signal").read_text() == "TERM\n"  # stopped with SIGTERM first, as Slurm does
    assert_nothing_left(kube, ns)


def _owner_and_mode(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return st.st_uid, st.st_gid, st.st_mode & 0o777


def test_the_working_directory_and_output_files_are_the_users_own(
    gw: Gateway, kubelet_env: KubeletEnv, kube: KubeClient, ns: str, home: Path
) -> None:
    """No -o: slurm-<id>.out in the submit directory; -e with patterns; both created by the
    submitter's uid with the umask sbatch ran with (027), as slurmstepd creates them."""
    job = gw.sbatch(
        "-p",
        kubelet_env.partition,
        "-N",
        "2",
        "-J",
        "files",
        "-e",
        "err-%j-%x.txt",
        "--wrap",
        "pwd; id -u; echo to-stderr >&2; echo made >made-by-job",
        cwd=home,
        user="tester",
        env={"SLURM_UMASK": "0027"},
    )
    gw.wait(job, timeout=60)
    acct = gw.ok(["sacct", "-j", str(job), "-X", "-P", "-n", "-o", "State,ExitCode"])
    assert acct.strip() == "COMPLETED|0:0"
    tester = pwd.getpwnam("tester")
    out, err, made = home / f"slurm-{job}.out", home / f"err-{job}-files.txt", home / "made-by-job"
    assert out.read_text().splitlines() == [str(home), str(tester.pw_uid)]
    assert err.read_text() == "to-stderr\n"
    for path in (out, err, made):
        assert _owner_and_mode(path) == (tester.pw_uid, tester.pw_gid, 0o640), path
    show = gw.ok(["scontrol", "show", "job", str(job)])
    assert f"StdOut={out}" in show
    assert f"WorkDir={home}" in show
    assert_nothing_left(kube, ns)


def test_a_job_over_its_time_limit_gets_term_then_kill_after_killwait_and_times_out(
    gw: Gateway, kubelet_env: KubeletEnv, kube: KubeClient, ns: str, home: Path
) -> None:
    """-t 1 (15 s here): SIGTERM, which the script ignores, SIGKILL KillWait (2 s) later;
    State TIMEOUT, Reason TimeLimit. This image has no python3, so no init enforces the
    limit: the gateway's backstop has the kubelet end the pods KillWait + 5 s after it
    (gang.over_limit; with the init, at the limit: test_gateway_kubelet_limit.py). The
    kernel's uptime is the clock both the script and the test read."""
    job = gw.sbatch(
        "-p",
        kubelet_env.partition,
        "-t",
        "1",
        "--wrap",
        "up() { cut -d' ' -f1 /proc/uptime; }; trap 'echo TERM $(up) >>log' TERM; "
        "while :; do echo alive $(up) >>log; sleep 0.2; done",
        cwd=home,
        user="tester",
    )
    gw.wait(job, timeout=60)
    show = gw.ok(["scontrol", "show", "job", str(job)])
    assert re.search(r"\bJobState=TIMEOUT Reason=TimeLimit\b", show), show
    acct = gw.ok(["sacct", "-j", str(job), "-X", "-P", "-n", "-o", "State"])
    assert acct.strip() == "TIMEOUT"
    lines = [line.split() for line in (home / "log").read_text().splitlines()]
    term = [float(t) for what, t in lines if what == "TERM"]
    alive = [float(t) for what, t in lines if what == "alive"]
    assert len(term) == 1, lines[-5:]
    assert 13 <= term[0] - alive[0] <= 32  # the limit (15 s) + 7 s from the script's start
    assert 1.5 <= alive[-1] - term[0] <= 6  # still alive for KillWait, then killed
    assert_nothing_left(kube, ns)


def test_a_job_over_its_memory_is_oom_killed_by_the_cgroup_and_reported_out_of_memory(
    gw: Gateway, kubelet_env: KubeletEnv, kube: KubeClient, ns: str, home: Path
) -> None:
    job = gw.sbatch(
        "-p",
        kubelet_env.partition,
        "--mem=48M",
        "--wrap",
        "echo before; x=$(head -c 400000000 /dev/zero | tr '\\0' a); echo after ${#x}",
        cwd=home,
        user="tester",
    )
    gw.wait(job, timeout=60)
    show = gw.ok(["scontrol", "show", "job", str(job)])
    assert re.search(r"\bJobState=OUT_OF_MEMORY Reason=OutOfMemory\b", show), show
    assert re.search(r"\bExitCode=0:125\b", show), show  # Slurm's SIG_OOM
    acct = gw.ok(["sacct", "-j", str(job), "-X", "-P", "-n", "-o", "State"])
    assert acct.strip() == "OUT_OF_MEMORY"
    assert (home / f"slurm-{job}.out").read_text() == "before\n"
    assert_nothing_left(kube, ns)
