"""Time limits of Caldera jobs on real kubelet nodes (testenv/kubelet), in an image with
python3 (rank 0 runs the launcher's init, k8s_bridge/pod_init.py, which enforces the limit):
SIGTERM at the limit, SIGKILL after KillWait, TIMEOUT, and `scontrol update TimeLimit=` of
a job whose pods run (the tests in test_gateway_kubelet.py run an image without python3,
where the gateway's backstop asks the kubelet to end the pods). Time limits at a quarter
(-t 1 is 15 s), KillWait 2 s."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from k8s_bridge.kube import KubeClient
from tests.integration.test_k8s_bridge_helpers import admin_client, assert_nothing_left, wait_until
from tests.support.gateway_env import Gateway, discard_gateway, start_gateway
from tests.support.kubelet_env import KubeletEnv
from tests.support.kubelet_gateway import cluster_config, job_namespace, user_home, user_tree

pytestmark = pytest.mark.kubelet


@pytest.fixture
def ns(kubelet_env: KubeletEnv) -> Iterator[str]:
    yield from job_namespace(kubelet_env, "gw-limit")


@pytest.fixture
def kube(kubelet_env: KubeletEnv) -> KubeClient:
    return admin_client(kubelet_env.k8s)


@pytest.fixture
def base() -> Iterator[Path]:
    yield from user_tree("caldera-e2e-limit-")


@pytest.fixture
def home(base: Path) -> Path:
    return user_home(base)


@pytest.fixture
def gw(kubelet_env: KubeletEnv, ns: str, base: Path) -> Iterator[Gateway]:
    config = cluster_config(
        kubelet_env, ns, base, image=kubelet_env.mpi_image, cluster="time_scale = 0.25\n"
    )
    gw = start_gateway(base / "gw", config)
    try:
        yield gw
    finally:
        discard_gateway(gw)


def test_scontrol_update_timelimit_reaches_running_pods_raised_and_lowered(
    gw: Gateway, kubelet_env: KubeletEnv, kube: KubeClient, ns: str, home: Path
) -> None:
    """`scontrol update TimeLimit=` of a job on Kubernetes: raised (-t 1 -> 2: 15 -> 30 s
    here) right after submission, so it usually reaches the pods as they start, and
    lowered (-t 4 -> 1: 60 -> 15 s) once the job runs, counted from its start as Slurm
    counts it. Each job gets SIGTERM at its new limit, SIGKILL KillWait later, TIMEOUT."""
    script = (
        "up() { cut -d' ' -f1 /proc/uptime; }; trap 'echo TERM $(up) >>{log}'  TERM; "
        "while :; do echo alive $(up) >>{log}; sleep 0.2; done"
    )
    part = kubelet_env.partition
    raised = gw.sbatch("-p", part, "-t", "1", "--wrap", script.replace("{log}", "raised"),
                       cwd=home, user="tester")  # fmt: skip
    gw.ok(["scontrol", "update", f"JobId={raised}", "TimeLimit=2"])
    lowered = gw.sbatch("-p", part, "-t", "4", "--wrap", script.replace("{log}", "lowered"),
                        cwd=home, user="tester")  # fmt: skip
    wait_until("the second job running", (home / "lowered").exists, timeout=60)
    gw.ok(["scontrol", "update", f"JobId={lowered}", "TimeLimit=1"], user="tester")
    for job, name, minutes in ((raised, "raised", 2), (lowered, "lowered", 1)):
        gw.wait(job, timeout=90)
        show = gw.ok(["scontrol", "show", "job", str(job)])
        assert re.search(r"\bJobState=TIMEOUT Reason=TimeLimit\b", show), show
        assert f"TimeLimit=00:0{minutes}:00" in show
        limit_s = minutes * 15  # time_scale 0.25
        lines = [line.split() for line in (home / name).read_text().splitlines()]
        term = [float(t) for what, t in lines if what == "TERM"]
        alive = [float(t) for what, t in lines if what == "alive"]
        assert len(term) == 1, (name, lines[-5:])
        assert limit_s - 2 <= term[0] - alive[0] <= limit_s + 10, name
        assert 1.5 <= alive[-1] - term[0] <= 6, name  # KillWait (2 s), then killed
        said = (home / f"slurm-{job}.out").read_text()  # the init's line, not the backstop's
        assert re.search(rf"\*\*\* JOB {job} ON \S+ CANCELLED AT \S+ DUE TO TIME LIMIT", said)
    assert_nothing_left(kube, ns)


BUSY = "Requested nodes are busy"
DONE = "Job/step already completing or completed"
WAITING = """#!/bin/sh
srun -N 2 --ntasks-per-node=1 sleep 300 &
sleep 2
touch "waiting-$SLURM_JOB_ID"
srun -n1 hostname
echo "srun2 rc=$?"
wait
"""


def test_an_srun_waiting_for_its_step_when_the_job_ends_is_refused_as_slurm_refuses_it(
    gw: Gateway, kubelet_env: KubeletEnv, kube: KubeClient, ns: str, home: Path
) -> None:
    """A 2-node job whose second srun waits for the CPUs the first step holds, ended by
    scancel (the kubelet's SIGTERM to rank 0's init) and another by its time limit (the
    init's own): the waiting srun is told the job ends before the signals, as slurmctld
    refuses it (pod_init.mark_ending), and the script goes on (`srun2 rc=1`), as on the
    cluster (tests/differential/test_job_end_with_steps_vs_slurm.py)."""
    (home / "waiting.sh").write_text(WAITING)
    part = kubelet_env.partition
    cancelled = gw.sbatch("-p", part, "-N", "2", "waiting.sh", cwd=home, user="tester")
    timed_out = gw.sbatch("-p", part, "-N", "2", "-t", "1", "waiting.sh", cwd=home, user="tester")
    wait_until("the second srun", (home / f"waiting-{cancelled}").exists, timeout=120)
    time.sleep(1)  # it waits (its first wait: 60-69 s, the cluster's srun's)
    gw.ok(["scancel", str(cancelled)], user="tester")
    for job, state, why in (
        (cancelled, "CANCELLED", ""),
        (timed_out, "TIMEOUT", " DUE TO TIME LIMIT"),
    ):
        gw.wait(job, timeout=120)  # (the job's record ends first: its pods are stopping)
        assert gw.job(job)["state"] == state
        out = home / f"slurm-{job}.out"
        wait_until("slurmstepd's line", lambda: "*** JOB" in out.read_text(), timeout=60)  # noqa: B023
        lines = out.read_text().splitlines()
        told = [
            f"srun: Job {job} step creation temporarily disabled, retrying ({BUSY})",
            f"srun: error: Unable to create step for job {job}: {DONE}",
            "srun2 rc=1",
        ]
        assert [line for line in lines if line in told] == told, lines
        node = f"caldera-{job}-0"
        ending = (
            rf"slurmstepd-{node}: error: \*\*\* JOB {job} ON {node} CANCELLED AT \S+{why} \*\*\*"
        )
        assert any(re.fullmatch(ending, line) for line in lines), lines
        # the refusal comes before the signals: before slurmstepd's line
        first_ending = next(i for i, line in enumerate(lines) if re.fullmatch(ending, line))
        assert lines.index(told[1]) < first_ending, lines
    assert_nothing_left(kube, ns)
