"""The batch job environment against what a real Slurm 22.05 cluster set (golden files).

Each golden file in golden/job_env/ is the environment a real batch job saw on the project's
Slurm test cluster (tests/integration/test_local_backend_slurm_env.py records and re-checks
them), reduced to the names Slurm sets, with job-dependent values as `{placeholders}`. Its
header says where the job ran: `# node NAME cpus=N tasks=N gpus=I,J` per node.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gateway.compat.job_env import (
    TaskIds,
    apply_export,
    batch_environment,
    compress_counts,
    compress_hostlist,
    split_export,
    task_environment,
)
from gateway.compat.optypes import ParseContext
from gateway.compat.sbatch import parse_sbatch
from gateway.control.site_topology import node_addresses
from gateway.model.backend import Launch, RankPlacement
from gateway.model.job import Job
from gateway.model.jobspec import JobSpec
from gateway.model.values import ArraySpec, IndexRange
from gateway.topology.slurm_conf import parse_topology_conf

GOLDEN = Path(__file__).parent / "golden" / "job_env"

# Names compared with Slurm: everything Slurm's daemons set, plus the test's own variables.
_COMPARED_PLAIN = frozenset(
    {
        "ENVIRONMENT",
        "HOSTNAME",
        "TMPDIR",
        "CUDA_VISIBLE_DEVICES",
        "GPU_DEVICE_ORDINAL",
        "ROCR_VISIBLE_DEVICES",
        "ZE_AFFINITY_MASK",
        "A",
        "B",
        "C",
        "FOO",
    }
)
# Connection details of a real controller and the task's pid: never compared.
_NOT_COMPARED = frozenset({"SLURM_WORKING_CLUSTER", "SLURM_TASK_PID"})
# What the cluster's configuration gives every job (slurm.conf, topology.conf).
CLUSTER_NAME = "caldera"
DEF_MEM_PER_CPU = 100
# testenv/slurm's topology.conf, the cluster's the golden files were recorded on
TOPOLOGY = parse_topology_conf(
    "SwitchName=leaf1 Nodes=node[01-02]\nSwitchName=leaf2 Nodes=node[03-04]\n"
    "SwitchName=leaf3 Nodes=big[001-032]\nSwitchName=leaf4 Nodes=big[033-064]\n"
    "SwitchName=leaf5 Nodes=big[065-100]\nSwitchName=spine1 Switches=leaf[1-2]\n"
    "SwitchName=spine2 Switches=leaf[3-5]\nSwitchName=core Switches=spine[1-2]\n"
)
# The submitting environment every shape uses (plus PATH/HOME/SLURM_CONF).
SUBMIT_VARS = {"A": "aval", "FOO": "bar"}


@dataclass(frozen=True)
class Shape:
    """One sbatch request recorded from real Slurm."""

    name: str
    argv: tuple[str, ...]
    user: str = "root"
    array_task: int | None = None
    placeholders: tuple[str, ...] = field(default=("job_id",))


SHAPES: tuple[Shape, ...] = (
    Shape("plain", ()),
    Shape("array", ("--array=3-7:2",), array_task=3, placeholders=("job_id", "array_job_id")),
    Shape("nodes2_per_node2", ("-N2", "--ntasks-per-node=2")),
    Shape("nodes2_ntasks3", ("-N2", "-n3")),
    Shape("cpus2_mem", ("-c", "2", "--mem=300M")),
    Shape("gres_gpu2", ("-p", "gpu", "--gres=gpu:2")),
    Shape("gpus3_mem_per_gpu", ("-p", "gpu", "--gpus=3", "--mem-per-gpu=100")),
    Shape("gpus_per_node", ("-p", "gpu", "-N2", "--gpus-per-node=1", "--mem-per-cpu=200")),
    Shape("gpus_per_task", ("-p", "gpu", "-n2", "--gpus-per-task=1", "--cpus-per-gpu=1")),
    Shape("export_none", ("--export=NONE",)),
    Shape("export_none_list", ("--export=NONE,A,B=1",)),
    Shape("export_all_list", ("--export=ALL,C=2",)),
    Shape(
        "open_mode_dependency",
        ("--open-mode=append", "--dependency=singleton", "--signal=B:USR1@30", "-t", "5"),
    ),
    Shape("user_tester", ("-n2", "-c1"), user="tester"),
)


def compared(env: dict[str, str]) -> dict[str, str]:
    """The part of an environment the golden files hold."""
    return {
        k: v
        for k, v in env.items()
        if (k.startswith("SLURM") or k in _COMPARED_PLAIN) and k not in _NOT_COMPARED
    }


@dataclass(frozen=True)
class NodeLine:
    node: str
    cpus: int
    tasks: int
    gpus: tuple[int, ...]


def read_golden(path: Path) -> tuple[list[NodeLine], dict[str, str]]:
    nodes: list[NodeLine] = []
    env: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line.startswith("# node "):
            m = re.fullmatch(r"# node (\S+) cpus=(\d+) tasks=(\d+) gpus=(\S*)", line)
            assert m, line
            gpus = tuple(int(g) for g in m.group(4).split(",") if g)
            nodes.append(NodeLine(m.group(1), int(m.group(2)), int(m.group(3)), gpus))
        elif line and not line.startswith("#"):
            key, value = line.split("=", 1)
            env[key] = value
    return nodes, env


def parse_spec(shape: Shape, workdir: str) -> JobSpec:
    uid = 0 if shape.user == "root" else 1001
    ctx = ParseContext(cwd=workdir, uid=uid, user=shape.user)
    return parse_sbatch(
        ["sbatch", "-J", shape.name, *shape.argv, "job.sh"], "#!/bin/bash\n", {}, ctx
    ).spec


def launch_for(
    shape: Shape,
    nodes: list[NodeLine],
    env: dict[str, str],
    *,
    job_id: int,
    array_job_id: int = 0,
    workdir: str = "/tmp/caldera-slurm/jobs",
) -> Launch:
    spec = parse_spec(shape, workdir)
    uid = 0 if shape.user == "root" else 1001
    job = Job(
        job_id=job_id,
        spec=spec,
        user=shape.user,
        uid=uid,
        group=shape.user,
        gid=uid,
        submit_time=0.0,
        submit_host=env.get("SLURM_SUBMIT_HOST", "vm"),
        partition=spec.partitions[0] if spec.partitions else "debug",
        account=env.get("SLURM_JOB_ACCOUNT", ""),
        qos="normal",
        array_job_id=array_job_id,
        array_task_id=shape.array_task,
    )
    placement = [RankPlacement(n.node, n.tasks, n.cpus, 0, n.gpus) for n in nodes]
    return Launch(
        job=job,
        script="#!/bin/bash\n",
        environment={},
        placement=placement,
        partition=job.partition,
        cluster=CLUSTER_NAME,
    )


def expected_environment(
    shape: Shape,
    nodes: list[NodeLine],
    *,
    job_id: int,
    array_job_id: int,
    submit_dir: str,
    submit_host: str,
    slurm_conf: str,
) -> dict[str, str]:
    """What batch_environment gives for the shape (SLURM_CONF as the cluster sets it)."""
    launch = launch_for(
        shape,
        nodes,
        {
            "SLURM_SUBMIT_HOST": submit_host,
            "SLURM_JOB_ACCOUNT": "root" if shape.user == "root" else "caldera",
        },
        job_id=job_id,
        array_job_id=array_job_id,
    )
    submit_env = {"PATH": "/usr/bin:/bin", "HOME": "/root", "SLURM_CONF": slurm_conf, **SUBMIT_VARS}
    env = batch_environment(
        launch,
        submit_env,
        node_name=nodes[0].node,
        node_id=0,
        cluster_name=CLUSTER_NAME,
        login_env={"HOME": "/root", "PATH": "/usr/bin:/bin", "SHELL": "/bin/bash"},
        submit_dir=submit_dir,
        topology=node_addresses(TOPOLOGY, [nodes[0].node])[nodes[0].node],
        def_mem_per_cpu_mb=DEF_MEM_PER_CPU,
        slurm_conf=slurm_conf,
    )
    return compared(env)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.name)
def test_batch_environment_matches_what_slurm_set(shape: Shape) -> None:
    path = GOLDEN / f"{shape.name}.env"
    nodes, golden = read_golden(path)
    values = {
        "job_id": "4242",
        "array_job_id": "4240",
        "submit_dir": "/data/sub",
        "submit_host": "login1",
        "slurm_conf": "/etc/slurm/slurm.conf",
    }
    want = {k: v.format(**values) for k, v in golden.items()}
    got = expected_environment(
        shape,
        nodes,
        job_id=4242,
        array_job_id=4240,
        submit_dir="/data/sub",
        submit_host="login1",
        slurm_conf="/etc/slurm/slurm.conf",
    )
    assert got == want


def test_every_shape_has_a_golden_file() -> None:
    names = {p.stem for p in GOLDEN.glob("*.env")}
    assert names == {s.name for s in SHAPES}


# --- pieces ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("counts", "text"),
    [
        ([1], "1"),
        ([2, 2], "2(x2)"),
        ([2, 2, 2, 1], "2(x3),1"),
        ([1, 2, 2], "1,2(x2)"),
        ([3, 1, 3], "3,1,3"),
    ],
)
def test_counts_compress_as_slurm_prints_them(counts: list[int], text: str) -> None:
    assert compress_counts(counts) == text


@pytest.mark.parametrize(
    ("names", "text"),
    [
        (["node01"], "node01"),
        (["node03", "node04"], "node[03-04]"),
        (["n1", "n2", "n3", "n5"], "n[1-3,5]"),
        (["a01", "b1", "a02"], "a[01-02],b1"),
        (["login", "node9", "node10"], "login,node9,node10"),
    ],
)
def test_hostlists_compress_as_slurm_prints_them(names: list[str], text: str) -> None:
    assert compress_hostlist(names) == text


SUBMIT = {"A": "1", "B": "2", "SLURM_X": "x", "SLURMD_Y": "y", "PATH": "/bin"}


@pytest.mark.parametrize(
    ("rules", "want"),
    [
        (None, SUBMIT),
        ("ALL", SUBMIT),
        ("all", SUBMIT),
        ("NONE", {"SLURM_X": "x", "SLURMD_Y": "y"}),
        ("NONE,A,C=3", {"A": "1", "C": "3", "SLURM_X": "x"}),
        ("ALL,C=2", {**SUBMIT, "C": "2"}),
        ("A,MISSING", {"A": "1", "SLURM_X": "x"}),
        ("A='x,y'", {"A": "'x,y'", "SLURM_X": "x"}),
    ],
)
def test_export_rules_select_the_submitted_environment(
    rules: str | None, want: dict[str, str]
) -> None:
    got = apply_export(rules, SUBMIT)
    assert got == want
    assert apply_export(rules, got) == got  # idempotent


def test_export_tokens_split_on_commas_outside_quotes() -> None:
    assert split_export('NONE,A="1,2",B') == ["NONE", 'A="1,2"', "B"]


def _simple_launch(**spec_fields: object) -> Launch:
    spec = JobSpec(name="j", workdir="/w", **spec_fields)  # type: ignore[arg-type]
    job = Job(
        job_id=7,
        spec=spec,
        user="u",
        uid=5,
        group="g",
        gid=6,
        submit_time=0.0,
        account="acct",
        restart_count=2,
        array_job_id=5,
        array_task_id=4,
    )
    return Launch(
        job=job,
        script="",
        environment={},
        placement=[RankPlacement("n1", 2, 4, 100, (1, 3))],
        partition="p",
        env_extra={"NCCL_IB_HCA": "mlx5_0"},
    )


def test_restarts_gpus_extras_and_arrays_reach_the_environment() -> None:
    launch = _simple_launch(array=ArraySpec((IndexRange(0, 8, 2),), throttle=2), ntasks=2)
    env = batch_environment(launch, {"CUDA_VISIBLE_DEVICES": "9"}, node_name="n1")
    assert env["SLURM_RESTART_COUNT"] == "2"
    assert env["CUDA_VISIBLE_DEVICES"] == env["SLURM_JOB_GPUS"] == "1,3"
    assert env["SLURM_GPUS_ON_NODE"] == "2"
    assert env["NCCL_IB_HCA"] == "mlx5_0"
    assert (
        env["SLURM_ARRAY_TASK_COUNT"],
        env["SLURM_ARRAY_TASK_MIN"],
        env["SLURM_ARRAY_TASK_MAX"],
        env["SLURM_ARRAY_TASK_STEP"],
    ) == ("5", "0", "8", "2")
    assert env["SLURM_TOPOLOGY_ADDR"] == "n1"
    assert env["SLURM_TOPOLOGY_ADDR_PATTERN"] == "node"
    assert env["SLURM_TASKS_PER_NODE"] == "2"
    assert "SLURM_MEM_PER_CPU" not in env
    assert "SLURM_MEM_PER_NODE" not in env


def test_srun_tasks_get_their_ranks_and_the_step_layout() -> None:
    base = {"SLURM_JOB_ID": "7", "SLURM_NTASKS": "4"}
    env = task_environment(
        base,
        step_id=3,
        ntasks=2,
        nodes=["n1"],
        tasks_on_nodes=[2],
        task=TaskIds(1, 1, 0),
        cpus_per_task=2,
        label=True,
        mpi="pmix",
    )
    assert env["SLURM_STEP_ID"] == env["SLURM_STEPID"] == "3"
    assert (env["SLURM_PROCID"], env["SLURM_LOCALID"], env["SLURM_NODEID"]) == ("1", "1", "0")
    assert env["SLURM_NTASKS"] == env["SLURM_STEP_NUM_TASKS"] == "2"
    assert env["SLURM_STEP_TASKS_PER_NODE"] == "2"
    assert env["SLURM_GTIDS"] == "0,1"
    assert env["SLURM_CPUS_PER_TASK"] == "2"
    assert env["SLURM_LABELIO"] == "1"
    assert env["SLURM_MPI_TYPE"] == "pmix"
    assert env["SLURM_JOB_ID"] == "7"


def test_overcommit_is_said_to_the_job_and_read_back_by_its_srun() -> None:
    """sbatch -O: SLURM_OVERCOMMIT=1 in the batch environment (env_array_for_batch_job),
    which srun reads as its own -O (its env_vars table), as on the test cluster."""
    from containers.srun_options import srun_env_options

    launch = _simple_launch(ntasks=5, overcommit=True)
    env = batch_environment(launch, {}, node_name="n1")
    assert env["SLURM_OVERCOMMIT"] == "1"
    assert "overcommit" in srun_env_options(env)
    plain = batch_environment(_simple_launch(ntasks=5), {}, node_name="n1")
    assert "SLURM_OVERCOMMIT" not in plain
