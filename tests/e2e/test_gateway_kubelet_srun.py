"""srun and mpirun from a batch script reach every rank of a gang on the real kubelet nodes.

A 2-node job (2 tasks per node) in the MPI image (python3 + Open MPI,
testenv/kubelet/build_mpi_image.py): rank 0 runs the script; `srun` there is the launcher's
(k8s_bridge/pod_launcher.py), which reaches rank 1's agent on the other node with the job's
token; Open MPI's mpirun sees SLURM_JOB_ID and starts its orted on rank 1 through that srun
(plm slurm), as under Slurm; `srun --multi-prog` runs each rank's program; `srun -o`
writes each task's file; sacct lists every srun as a step. One job per gang mode covers
everything (Caldera's binder, Volcano with a PodGroup, a Volcano Job), to keep the kubelet
suite short.
"""

from __future__ import annotations

import os
import pwd
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from k8s_bridge.kube import KubeClient
from tests.integration.test_k8s_bridge_helpers import admin_client, assert_nothing_left, wait_until
from tests.support.gateway_env import Gateway, discard_gateway, start_gateway
from tests.support.kubelet_env import KubeletEnv
from tests.support.kubelet_gateway import cluster_config, job_namespace, user_home, user_tree

pytestmark = pytest.mark.kubelet

SCRIPT = """#!/bin/sh
echo "== srun hostname"
srun hostname
echo "== srun -n 4"
srun -n 4 sh -c 'echo TASK $SLURM_PROCID $SLURM_LOCALID $SLURM_NODEID $SLURM_STEP_ID $(hostname)'
echo "== srun -N 2 env"
srun -N 2 env | grep -E '^SLURM_(PROCID|NODEID|STEP_NUM_TASKS)=' | sort
echo "== exit codes"
srun sh -c 'echo rank $SLURM_PROCID; exit $((SLURM_PROCID + 1))'
echo "SRUN_RC=$?"
echo "== mpirun"
mpirun --map-by node -n 2 sh -c 'echo MPI $OMPI_COMM_WORLD_RANK $(hostname)'
echo "MPI_RC=$?"
echo "== token"
stat -L -c '%a %u %g' /caldera/job/token
echo "== multi-prog"
cat > mp.conf <<'END'
0,2 echo first %t %o
* sh -c 'echo rest $SLURM_PROCID $(hostname)'
END
srun --multi-prog mp.conf
echo "== srun -o"
srun -o task-%t.out sh -c 'echo to-file $SLURM_PROCID $(hostname)'
cat task-0.out task-1.out task-2.out task-3.out
echo "== umask"
(umask 027; srun -N 2 -n 2 sh -c 'echo $SLURM_UMASK; f=made-$SLURM_PROCID; : >$f; stat -c %a $f')
"""


@pytest.fixture
def ns(kubelet_env: KubeletEnv) -> Iterator[str]:
    yield from job_namespace(kubelet_env, "gw-srun")


@pytest.fixture
def base() -> Iterator[Path]:
    yield from user_tree("caldera-e2e-srun-")


@pytest.fixture
def home(base: Path) -> Path:
    """The submitting user's own directory, below the cluster's filesystem map."""
    return user_home(base)


@pytest.fixture
def mode() -> str:
    return "caldera"


@pytest.fixture
def gw(kubelet_env: KubeletEnv, ns: str, base: Path, mode: str) -> Iterator[Gateway]:
    # KillWait 5 s, the real test cluster's: a cancelled step's srun records its end
    # (sacct) once its tasks' TERM traps are over, before the kubelet's SIGKILL
    config = cluster_config(
        kubelet_env, ns, base, mode=mode, image=kubelet_env.mpi_image, kill_wait_s=5
    )
    gw = start_gateway(base / "gw", config)
    try:
        yield gw
    finally:
        discard_gateway(gw)


def _section(text: str, title: str) -> list[str]:
    part = text.split(f"== {title}\n", 1)[1]
    return part.split("\n== ", 1)[0].splitlines()


# Caldera's binder, Volcano's scheduler with a PodGroup, and one Volcano Job per gang
@pytest.mark.parametrize("mode", ["caldera", "volcano", "volcano-job"])
def test_srun_and_mpirun_reach_every_rank_across_both_nodes(
    gw: Gateway, kubelet_env: KubeletEnv, ns: str, home: Path, mode: str
) -> None:
    kube: KubeClient = admin_client(kubelet_env.k8s)
    (home / "job.sh").write_text(SCRIPT)
    job = gw.sbatch(
        "-p",
        kubelet_env.partition,
        "-N",
        "2",
        "--ntasks-per-node=2",
        "job.sh",
        cwd=home,
        user="tester",
    )
    gw.wait(job, timeout=180)
    output = (home / f"slurm-{job}.out").read_text()
    pod0, pod1 = f"caldera-{job}-0", f"caldera-{job}-1"
    acct = gw.ok(["sacct", "-j", str(job), "-X", "-P", "-n", "-o", "State,ExitCode,NodeList"])
    assert acct.strip() == "COMPLETED|0:0|kubelet-node-[01-02]", output  # a pod per node
    rows = gw.ok(["sacct", "-j", str(job), "-P", "-n", "-o", "JobID,State,ExitCode,NodeList"])
    first = gw.job(job)["nodes"][0]  # type: ignore[index]  # rank 0's node (Volcano chooses)
    assert rows.split()[1] == f"{job}.batch|COMPLETED|0:0|{first}", rows
    # each srun a step, as rank 0's srun recorded it in its termination message: hostname,
    # -n 4, -N 2 env, the failing one (each node's last task: 2 and 4), mpirun's orted
    # (rank 1's node only), --multi-prog, -o, the umask one
    steps = {r.split("|")[0]: r.split("|", 1)[1] for r in rows.split()[2:]}
    assert list(steps) == [f"{job}.{n}" for n in range(8)], rows
    assert steps[f"{job}.0"] == "COMPLETED|0:0|kubelet-node-[01-02]", rows
    assert steps[f"{job}.3"] == "FAILED|4:0|kubelet-node-[01-02]", rows
    assert steps[f"{job}.4"].endswith("|" + gw.job(job)["nodes"][1]), rows  # type: ignore[index]

    # srun hostname: SLURM_NTASKS=4, two tasks in each pod
    assert sorted(_section(output, "srun hostname")) == [pod0, pod0, pod1, pod1], output
    # srun -n 4: each task's own ids (block layout), step 1 (the first srun was step 0)
    tasks = sorted(line for line in _section(output, "srun -n 4") if line.startswith("TASK"))
    assert tasks == [
        f"TASK 0 0 0 1 {pod0}",
        f"TASK 1 1 0 1 {pod0}",
        f"TASK 2 0 1 1 {pod1}",
        f"TASK 3 1 1 1 {pod1}",
    ], output
    # srun -N 2 (the job's 4 tasks on 2 nodes) env piped through grep in the script
    env_lines = _section(output, "srun -N 2 env")
    assert sorted(set(env_lines)) == sorted(
        {f"SLURM_PROCID={r}" for r in range(4)}
        | {"SLURM_NODEID=0", "SLURM_NODEID=1", "SLURM_STEP_NUM_TASKS=4"}
    ), output
    # exit codes: srun's is the highest task's, and srun names the failed tasks per node
    codes = _section(output, "exit codes")
    assert sorted(line for line in codes if line.startswith("rank")) == [
        f"rank {r}" for r in range(4)
    ]
    assert "SRUN_RC=4" in codes, output
    assert f"srun: error: {pod1}: tasks 2-3: Exited with exit code 3" not in codes
    assert f"srun: error: {pod1}: task 3: Exited with exit code 4" in codes, output
    assert f"srun: error: {pod0}: task 0: Exited with exit code 1" in codes, output
    # mpirun: one rank per pod, the remote one started by orted through the launcher's srun
    mpi = _section(output, "mpirun")
    assert sorted(line for line in mpi if line.startswith("MPI ")) == [
        f"MPI 0 {pod0}",
        f"MPI 1 {pod1}",
    ], output
    assert "MPI_RC=0" in mpi, output
    assert not re.search(r"authentication failed|launch failed", output), output
    # the job's token: 0400 + fsGroup, i.e. readable by the job's group only
    gid = pwd.getpwnam("tester").pw_gid
    assert _section(output, "token") == [f"440 0 {gid}"], output
    # --multi-prog: each rank's program from the file, the remote ranks through their agent
    assert sorted(_section(output, "multi-prog")) == [
        "first 0 0",
        "first 2 1",
        f"rest 1 {pod0}",
        f"rest 3 {pod1}",
    ], output
    # srun -o: each task's output in its file, written from rank 0's pod (remote ranks too)
    assert _section(output, "srun -o") == [
        f"to-file 0 {pod0}",
        f"to-file 1 {pod0}",
        f"to-file 2 {pod1}",
        f"to-file 3 {pod1}",
    ], output
    # srun's umask goes to every task as SLURM_UMASK, and a remote rank's agent applies it
    # (the test cluster's tasks show 0027 after `umask 027`; files they make are 640)
    assert sorted(_section(output, "umask")) == ["0027", "0027", "640", "640"], output
    assert_nothing_left(kube, ns)


SHARED = """#!/bin/sh
srun -n1 sh -c 'echo first $SLURMD_NODENAME; while [ ! -e go ]; do sleep 0.2; done' &
sleep 1
srun -n1 sh -c 'echo second $SLURMD_NODENAME'
(sleep 3; touch go) &
srun -n2 true
echo "rc=$?"
wait
"""


def test_steps_share_the_gang_s_cpus_as_slurm_steps_share_a_job_s(
    gw: Gateway, kubelet_env: KubeletEnv, ns: str, home: Path
) -> None:
    """Steps in the pods take the job's CPUs as slurmctld gives them (containers/
    step_alloc.py, the same book as the local runner's, kept by rank 0's sruns): a
    one-task step takes the whole of one node, the next one-task step the other node at
    once, and a step that needs both waits for the first to end, with srun's lines."""
    kube: KubeClient = admin_client(kubelet_env.k8s)
    (home / "job.sh").write_text(SHARED)
    job = gw.sbatch("-p", kubelet_env.partition, "-N", "2", "job.sh", cwd=home, user="tester")
    gw.wait(job, timeout=180)
    out = (home / f"slurm-{job}.out").read_text()
    pods = [f"caldera-{job}-0", f"caldera-{job}-1"]
    warn = "srun: Warning: can't run 1 processes on 2 nodes, setting nnodes to 1"
    assert out.splitlines() == [
        warn,
        f"first {pods[0]}",
        warn,
        f"second {pods[1]}",
        f"srun: Job {job} step creation temporarily disabled, retrying (Requested nodes are busy)",
        f"srun: Step created for job {job}",
        "rc=0",
    ], out
    rows = gw.ok(["sacct", "-j", str(job), "-P", "-n", "-o", "JobID,Start,End,AllocCPUS"])
    steps = {r.split("|")[0]: r.split("|")[1:] for r in rows.split() if "." in r.split("|")[0]}
    zero, one, two = (steps[f"{job}.{n}"] for n in range(3))
    assert one[0] < zero[1] <= two[0], rows  # the second ran beside the first, the third after
    assert [zero[2], one[2], two[2]] == ["1", "1", "2"], rows
    assert_nothing_left(kube, ns)


GPU_STEPS = """#!/bin/sh
srun -n1 --exact --gres=gpu:1 sh -c 'echo "a $CUDA_VISIBLE_DEVICES"; sleep 4' &
sleep 1
srun -n1 --exact --gres=gpu:1 sh -c 'echo "b $CUDA_VISIBLE_DEVICES"'
srun -n1 --exact sh -c 'echo "c $CUDA_VISIBLE_DEVICES $SLURM_STEP_GPUS"'
wait
"""


def test_steps_hold_the_pod_s_gpus_as_slurm_steps_hold_a_job_s(
    gw: Gateway, kubelet_env: KubeletEnv, ns: str, home: Path
) -> None:
    """A job holding its node's GPUs (the device plugin's, numbered 0..k-1 in the pod): a
    one-GPU step sees GPU 0, the next one at once GPU 1, and a step with no GPU option
    takes the job's own request (every GPU), so it waits for the first to end, as
    slurmctld's `_copy_job_tres_to_step` and `_step_alloc` do (tests/differential/
    test_step_resources_vs_slurm.py compares the same rules with the real cluster)."""
    gpus = kubelet_env.gpus_per_node
    assert gpus == 2, "the scenario is written for two GPUs per node"
    kube: KubeClient = admin_client(kubelet_env.k8s)
    (home / "gpus.sh").write_text(GPU_STEPS)
    job = gw.sbatch(
        "-p", kubelet_env.partition, "-N1", "-n2", f"--gres=gpu:{gpus}", "gpus.sh",
        cwd=home, user="tester",
    )  # fmt: skip
    gw.wait(job, timeout=180)
    out = (home / f"slurm-{job}.out").read_text()
    assert out.splitlines() == [
        "a 0",
        "b 1",
        f"srun: Job {job} step creation temporarily disabled, retrying (Requested nodes are busy)",
        f"srun: Step created for job {job}",
        "c 0,1 0,1",
    ], out
    rows = gw.ok(["sacct", "-j", str(job), "-P", "-n", "-o", "JobID,AllocTRES"]).split()
    tres = {r.split("|")[0].split(".")[-1]: r.split("|")[1] for r in rows}
    gpus_of = {k: re.findall(r"gres/gpu=(\d+)", v) for k, v in tres.items()}
    assert [gpus_of[n] for n in "012"] == [["1"], ["1"], ["2"]], rows  # the steps' own
    assert_nothing_left(kube, ns)


TERM_SCRIPT = """#!/bin/sh
srun -N 2 --ntasks-per-node=1 sh -c 'trap "sleep 1; echo TERM $SLURM_PROCID $(hostname) \
>term.$SLURM_PROCID; exit 0" TERM; touch ready.$SLURM_PROCID; while :; do sleep 0.1; done'
echo after-srun
"""


def _two_tasks_ready(gw: Gateway, kubelet_env: KubeletEnv, home: Path) -> int:
    """job.sh submitted on 2 nodes, once its step's tasks made `ready.0` and `ready.1`."""
    job = gw.sbatch("-p", kubelet_env.partition, "-N", "2", "job.sh", cwd=home, user="tester")
    try:
        wait_until("both tasks", lambda: all((home / f"ready.{r}").exists() for r in (0, 1)), 180)
    except AssertionError:
        out = home / f"slurm-{job}.out"
        print(gw.job(job), out.read_text() if out.exists() else "no output", os.listdir(home))
        raise
    return job


def test_scancel_sends_sigterm_to_the_script_and_every_task_on_both_nodes(
    gw: Gateway, kubelet_env: KubeletEnv, ns: str, home: Path
) -> None:
    """scancel as Slurm's: SIGTERM to every process of the job (slurmstepd signals the
    step's whole cgroup), SIGKILL after KillWait. The kubelet signals a pod's PID 1 only;
    the launcher's init (rank 0) and agent (rank 1) pass it on, and wait for the tasks: the
    script, which sets no trap, ends there, and each task's trap (1 s long) runs to its end
    on both nodes. Before, the script ignored the SIGTERM as PID 1 and every task was
    SIGKILLed at the end of the grace without seeing it."""
    kube: KubeClient = admin_client(kubelet_env.k8s)
    (home / "job.sh").write_text(TERM_SCRIPT)
    job = _two_tasks_ready(gw, kubelet_env, home)
    gw.ok(["scancel", str(job)])
    gw.wait(job, timeout=60)
    assert gw.job(job)["state"] == "CANCELLED"
    pods = [f"caldera-{job}-0", f"caldera-{job}-1"]
    wait_until("each task's trap ran", lambda: all((home / f"term.{r}").exists() for r in (0, 1)))
    for rank in (0, 1):
        assert (home / f"term.{rank}").read_text() == f"TERM {rank} {pods[rank]}\n"
    said = (home / f"slurm-{job}.out").read_text()
    assert "after-srun" not in said  # the script ended
    node = pods[0]  # slurmstepd's lines, in the job's own output (the launcher's init)
    for what in (f"JOB {job}", f"STEP {job}.0"):
        line = rf"^slurmstepd-{node}: error: \*\*\* {what} ON {node} CANCELLED AT \S+ \*\*\*$"
        assert re.search(line, said, re.M), said
    # the step rank 0's srun recorded as the SIGTERM ended it reaches sacct after the
    # job's own end (it was missing: the gang was forgotten once its pods were deleting);
    # the test cluster, the same script cancelled: `J.0|COMPLETED|0:0` (its tasks trap TERM)
    acct = ["sacct", "-n", "-P", "-j", str(job), "-o", "JobID,State,ExitCode"]
    wait_until("step 0 in sacct", lambda: f"{job}.0|" in gw.run(acct).stdout, 60)
    assert gw.run(acct).stdout.splitlines() == [
        f"{job}|CANCELLED by 0|0:0",
        f"{job}.batch|CANCELLED|0:15",
        f"{job}.0|COMPLETED|0:0",
    ]
    assert_nothing_left(kube, ns)


@pytest.fixture
def scaled_gw(kubelet_env: KubeletEnv, ns: str, base: Path) -> Iterator[Gateway]:
    """Time limits at a quarter (-t 2 is 30 s; slurmctld's 30 s checks every 7.5 s)."""
    config = cluster_config(
        kubelet_env, ns, base, image=kubelet_env.mpi_image, cluster="time_scale = 0.25\n"
    )
    gw = start_gateway(base / "gw", config)
    try:
        yield gw
    finally:
        discard_gateway(gw)


STEPS_WARNED = """#!/bin/sh
trap 'echo batch-USR1' USR1
srun -N 2 --ntasks-per-node=1 sh -c 'trap "echo USR1 $SLURM_PROCID $(hostname) \
>usr1.$SLURM_PROCID; exit 0" USR1; while :; do sleep 0.1; done'
echo after-srun $?
"""
BATCH_WARNED = """#!/bin/sh
srun sh -c 'trap "echo step-USR1 >step-usr1" USR1; while :; do sleep 0.1; done' &
trap 'echo batch-USR1; exit 0' USR1
while :; do sleep 0.1; done
"""


def test_the_time_limit_is_said_in_the_output_as_slurmstepd_says_it(
    scaled_gw: Gateway, kubelet_env: KubeletEnv, home: Path
) -> None:
    """-t 1 (15 s here): the launcher's init stops the job at its limit and writes
    `*** JOB ... CANCELLED AT ... DUE TO TIME LIMIT ***` into the job's output after what
    the script wrote, as slurmstepd does; the job is TIMEOUT."""
    job = scaled_gw.sbatch(
        "-p", kubelet_env.partition, "-t", "1", "--wrap", "echo started; sleep 100",
        cwd=home, user="tester",
    )  # fmt: skip
    scaled_gw.wait(job, timeout=90)
    said = (home / f"slurm-{job}.out").read_text().splitlines()
    assert scaled_gw.job(job)["state"] == "TIMEOUT", said
    node = f"caldera-{job}-0"
    assert said[0] == "started"
    assert re.fullmatch(
        rf"slurmstepd-{node}: error: \*\*\* JOB {job} ON {node} CANCELLED AT \S+ "
        r"DUE TO TIME LIMIT \*\*\*",
        said[1],
    ), said


def test_signal_warns_the_steps_on_both_nodes_or_with_b_the_batch_shell_alone(
    scaled_gw: Gateway, kubelet_env: KubeletEnv, ns: str, home: Path
) -> None:
    """`--signal=USR1@40` and `--signal=B:USR1@40` with -t 3 (45 s here, a lead of 10 s: the
    warning goes at the first periodic check, every 7.5 s, at most 17.5 s before the end, as
    slurmctld sends it, so 27.5-35 s after rank 0 starts, once the step's tasks have set
    their traps; with -t 2 a CI run under load once gave the warning before rank 1's pod
    had started the step, whose tasks then died of it untrapped, as they would on Slurm):
    without B: every task of the running srun step gets USR1, on both nodes, and the batch
    shell does not; with B: the batch shell alone. Each job ends by itself (COMPLETED), so
    the warning came before the time limit. Before, Kubernetes jobs never got it."""
    gw = scaled_gw
    kube: KubeClient = admin_client(kubelet_env.k8s)
    (home / "steps.sh").write_text(STEPS_WARNED)
    (home / "batch.sh").write_text(BATCH_WARNED)
    part = ["-p", kubelet_env.partition, "-t", "3"]
    steps = gw.sbatch(*part, "-N", "2", "--signal=USR1@40", "steps.sh", cwd=home, user="tester")
    batch = gw.sbatch(*part, "--signal=B:USR1@40", "batch.sh", cwd=home, user="tester")
    for job in (steps, batch):
        gw.wait(job, timeout=180)
        out = home / f"slurm-{job}.out"
        assert gw.job(job)["state"] == "COMPLETED", (job, out.read_text())
    pods = [f"caldera-{steps}-0", f"caldera-{steps}-1"]
    said = (home / f"slurm-{steps}.out").read_text()
    for rank in (0, 1):
        assert (home / f"usr1.{rank}").exists(), (rank, said)
        assert (home / f"usr1.{rank}").read_text() == f"USR1 {rank} {pods[rank]}\n"
    # each task's shell may say its `sleep` was killed by the signal (as under Slurm, which
    # signals each task's process group); the batch shell got nothing and srun exited 0
    lines = said.splitlines()
    assert lines[-1] == "after-srun 0"
    assert set(lines[:-1]) <= {"User defined signal 1"}, lines
    assert (home / f"slurm-{batch}.out").read_text() == "batch-USR1\n"
    assert not (home / "step-usr1").exists()
    assert_nothing_left(kube, ns)


SIGNALLED = r"""#!/bin/sh
trap 'echo batch-USR1 >>batch.log' USR1
srun -N 2 --ntasks-per-node=1 sh -c 'trap "echo USR1 $SLURM_PROCID $(hostname) \
>>usr1.$SLURM_PROCID" USR1; trap "exit 0" USR2; touch ready.$SLURM_PROCID
while :; do sleep 0.1; done'
echo after-srun $?
"""


# a Volcano Job names its pods itself: rank 0 is found by its labels
@pytest.mark.parametrize("mode", ["caldera", "volcano-job"])
def test_scancel_signals_reach_the_steps_the_batch_shell_or_one_step_through_exec(
    gw: Gateway, kubelet_env: KubeletEnv, ns: str, home: Path
) -> None:
    """`scancel -s USR1 ID` reaches the tasks of the running step on both nodes and not the
    batch shell; `-b` the batch shell alone (its trap runs once srun returns, as a shell
    runs traps); `ID.0` that step's tasks; `scancel ID.0` (a step's cancel) is refused with
    Slurm's message. The signals go through the API server's exec into rank 0's container
    (the kubelet authenticates it). Before, every one of them was refused on Kubernetes."""
    kube: KubeClient = admin_client(kubelet_env.k8s)
    (home / "job.sh").write_text(SIGNALLED)
    job = _two_tasks_ready(gw, kubelet_env, home)
    pods = [f"caldera-{job}-0", f"caldera-{job}-1"]  # the host names, in either mode

    def usr1(count: int) -> bool:
        files = [home / f"usr1.{r}" for r in (0, 1)]
        return all(f.exists() and len(f.read_text().splitlines()) == count for f in files)

    gw.ok(["scancel", "-s", "USR1", str(job)], user="tester")
    wait_until("USR1 in both tasks", lambda: usr1(1), 30)
    for rank in (0, 1):
        assert (home / f"usr1.{rank}").read_text() == f"USR1 {rank} {pods[rank]}\n"
    gw.ok(["scancel", "-s", "USR1", f"{job}.0"], user="tester")
    wait_until("USR1 again in both tasks", lambda: usr1(2), 30)
    refused = gw.run(["scancel", f"{job}.0"], user="tester")
    assert refused.returncode != 0
    assert "Requested operation not supported on this system" in refused.stderr
    gw.ok(["scancel", "--batch", "-s", "USR1", str(job)], user="tester")
    assert not (home / "batch.log").exists()  # not before srun returns
    gw.ok(["scancel", "-s", "USR2", f"{job}.0"], user="tester")  # the tasks end: exit 0
    gw.wait(job, timeout=60)
    output = (home / f"slurm-{job}.out").read_text()
    assert gw.job(job)["state"] == "COMPLETED", output
    assert output.splitlines()[-1] == "after-srun 0"
    assert (home / "batch.log").read_text() == "batch-USR1\n"  # once, from -b alone
    assert usr1(2)
    assert_nothing_left(kube, ns)
