"""Jobs' and steps' TRES against real Slurm 22.05 on the test cluster (2026-11-26; tests/unit
data recorded by hand from `sacct -o ReqTRES,AllocTRES` and `scontrol show job`'s TRES=).

The cluster: node01 (2 CPUs, 2000 MiB), node03 (2 untyped GPUs), node04 (4 a100 GPUs),
DefMemPerCPU=100, the gpu partition's largest node 1000000 MiB, and
AccountingStorageTRES=gres/gpu,gres/gpu:a100,gres/gpu:v100,license/cscratch1,license/SCRATCH.
Each job's placement below is where slurmctld put it, as Caldera's scheduler records it.
"""

from __future__ import annotations

from gateway.compat.job_fields import SiteDefaults
from gateway.compat.job_fmt_values import JobValues
from gateway.compat.optypes import ParseContext
from gateway.compat.sacct_fmt_fields import _tres_display
from gateway.compat.sbatch import parse_sbatch
from gateway.compat.tres import TresNames
from gateway.control.slurm_conf import tres_names
from gateway.model.job import Job, RankPlacement
from gateway.model.state import JobState

CTX = ParseContext(cwd="/w", now=1_800_000_000.0, max_array_size=1001)
SITE = SiteDefaults(
    default_partition="debug",
    def_mem_per_cpu_mb=100,
    partition_mem={"real": 2000, "gpu": 1000000},
    tres_names=TresNames(
        tres_names("gres/gpu,gres/gpu:a100,gres/gpu:v100,license/cscratch1,license/SCRATCH")
    ),
)
NODE01 = RankPlacement("node01", 1, 1, 100)
NODE03 = RankPlacement("node03", 1, 2, 200, (0, 1))
NODE04 = RankPlacement("node04", 1, 2, 200, (0, 1, 2, 3), gpu_type="a100")


def _values(argv: str, *placed: RankPlacement, cpus: int = 0) -> JobValues:
    spec = parse_sbatch(["sbatch", *argv.split(), "--wrap", "true"], None, {}, CTX).spec
    job = Job(
        job_id=1,
        spec=spec,
        user="root",
        uid=0,
        group="root",
        gid=0,
        submit_time=0.0,
        state=JobState.COMPLETED,
        partition=spec.partitions[0],
        nodes=tuple(p.node for p in placed),
        placement=placed,
        num_cpus=cpus or sum(p.cpus for p in placed),
        start_time=1.0,
        end_time=2.0,
    )
    return JobValues(job, site=SITE)


def _sacct(v: JobValues, *steps: tuple[int, tuple[str, ...], bool]) -> list[str | None]:
    return [
        _tres_display(v.tres_req),
        _tres_display(v.tres_alloc),
        *(_tres_display(v.step_tres(c, nodes, batch)) for c, nodes, batch in steps),
    ]


def test_an_untyped_gpu_on_a_typed_node_is_allocated_with_its_type() -> None:
    v = _values(
        "-p gpu -w node04 -n1 --gres=gpu:1", RankPlacement("node04", 1, 1, 100, (0,), (), "a100")
    )
    assert v.tres_alloc == "cpu=1,mem=100M,node=1,billing=1,gres/gpu=1,gres/gpu:a100=1"
    assert _sacct(v, (1, ("node04",), True), (1, ("node04",), False)) == [
        "billing=1,cpu=1,gres/gpu=1,mem=100M,node=1",
        "billing=1,cpu=1,gres/gpu:a100=1,gres/gpu=1,mem=100M,node=1",
        "cpu=1,gres/gpu:a100=1,gres/gpu=1,mem=100M,node=1",
        "cpu=1,gres/gpu:a100=1,gres/gpu=1,mem=100M,node=1",
    ]
    typed = _values(
        "-p gpu -n1 --gres=gpu:a100:1", RankPlacement("node04", 1, 1, 100, (0,), (), "a100")
    )
    assert (
        _tres_display(typed.tres_req)
        == "billing=1,cpu=1,gres/gpu:a100=1,gres/gpu=1,mem=100M,node=1"
    )


def test_licences_the_site_accounts_are_in_the_jobs_tres() -> None:
    v = _values("-p real -w node01 -n1 -L cscratch1,SCRATCH:2,matlab", NODE01)
    # matlab is not in AccountingStorageTRES; the names are spelt as the site spells them
    # (the test cluster's slurmdbd registered `license/scratch` first and prints that)
    assert v.tres_alloc == "cpu=1,mem=100M,node=1,billing=1,license/cscratch1=1,license/SCRATCH=2"
    assert _sacct(v, (1, ("node01",), True)) == [
        "billing=1,cpu=1,license/SCRATCH=2,license/cscratch1=1,mem=100M,node=1",
        "billing=1,cpu=1,license/SCRATCH=2,license/cscratch1=1,mem=100M,node=1",
        "cpu=1,mem=100M,node=1",
    ]


def test_exclusive_takes_every_cpu_and_gpu_of_its_nodes() -> None:
    v = _values("-p gpu -w node04 -n1 --exclusive", NODE04)
    assert (v.req_cpus, v.num_cpus) == (1, 2)  # sacct's ReqCPUS and AllocCPUS
    assert v.tres_alloc == "cpu=2,mem=200M,node=1,billing=2,gres/gpu=4,gres/gpu:a100=4"
    assert _sacct(v, (2, ("node04",), True), (2, ("node04",), False)) == [
        "billing=1,cpu=1,mem=100M,node=1",
        "billing=2,cpu=2,gres/gpu:a100=4,gres/gpu=4,mem=200M,node=1",
        "cpu=2,gres/gpu:a100=4,gres/gpu=4,mem=200M,node=1",
        "cpu=2,mem=200M,node=1",  # the step asked for no GPU, the job neither
    ]
    two = _values("-p gpu -N2 --exclusive --gpus-per-node=1", NODE03, NODE04)
    assert two.tres_alloc == "cpu=4,mem=400M,node=2,billing=4,gres/gpu=6,gres/gpu:a100=4"
    assert _sacct(two, (2, ("node03",), True), (4, ("node03", "node04"), False)) == [
        "billing=2,cpu=2,gres/gpu=2,mem=200M,node=2",
        "billing=4,cpu=4,gres/gpu:a100=4,gres/gpu=6,mem=400M,node=2",
        "cpu=2,gres/gpu=2,mem=200M,node=1",
        "cpu=4,gres/gpu:a100=1,gres/gpu=2,mem=400M,node=2",
    ]
    per_cpu = _values("-p gpu -w node04 -n1 --exclusive --mem-per-cpu=300", NODE04)
    assert _sacct(per_cpu)[:2] == [
        "billing=1,cpu=1,mem=300M,node=1",
        "billing=2,cpu=2,gres/gpu:a100=4,gres/gpu=4,mem=600M,node=1",
    ]


def test_mem_0_takes_all_the_memory_of_its_nodes() -> None:
    v = _values("-p real -w node01 -n1 --mem=0", RankPlacement("node01", 1, 1, 2000))
    assert v.tres_alloc == "cpu=1,mem=2000M,node=1,billing=1"
    assert _sacct(v, (1, ("node01",), True)) == [
        "billing=1,cpu=1,mem=2000M,node=1",
        "billing=1,cpu=1,mem=2000M,node=1",
        "cpu=1,mem=2000M,node=1",
    ]
    # requested: the partition's largest node (a virtual node of 1000000 MiB) per node
    gpu = _values(
        "-p gpu -w node03 -n1 --mem=0 --gres=gpu:1", RankPlacement("node03", 1, 1, 2000, (0,))
    )
    assert _sacct(gpu)[:2] == [
        "billing=1,cpu=1,gres/gpu=1,mem=1000000M,node=1",
        "billing=1,cpu=1,gres/gpu=1,mem=2000M,node=1",
    ]


def test_a_site_without_accounting_storage_tres_accounts_gpus_only() -> None:
    bare = SiteDefaults(def_mem_per_cpu_mb=100)
    placed = RankPlacement("node04", 1, 1, 100, (0,), (), "a100")
    v = JobValues(_values("-p gpu -n1 --gres=gpu:1 -L matlab", placed).job, site=bare)
    assert v.tres_alloc == "cpu=1,mem=100M,node=1,billing=1,gres/gpu=1,gres/gpu:a100=1"
    # other GRES too (Caldera's own sites have always listed them), never with a GPU type
    net = _values(
        "-p gpu -n1 --gres=craynetwork:1", RankPlacement("node04", 1, 1, 100, (), (), "a100")
    )
    assert (
        JobValues(net.job, site=bare).tres_alloc
        == "cpu=1,mem=100M,node=1,billing=1,gres/craynetwork=1"
    )
    assert net.tres_alloc == "cpu=1,mem=100M,node=1,billing=1"  # not in AccountingStorageTRES


def test_req_tres_counts_the_nodes_asked_for_not_those_allocated() -> None:
    """ULHPC's gurobi launcher (`--ntasks=3 --ntasks-per-node=1`, no -N) on 3 nodes: the test
    cluster's ReqTRES says node=1 (the job's minimum at submission), AllocTRES node=3."""
    placed = [RankPlacement(f"node0{i}", 1, 2, 200) for i in (1, 2, 3)]
    v = _values("-p real -n3 --ntasks-per-node=1 -c2", *placed)
    assert _sacct(v)[:2] == [
        "billing=6,cpu=6,mem=600M,node=1",
        "billing=6,cpu=6,mem=600M,node=3",
    ]
    assert "node=2" in _values("-p real -N2-3 -n3 -c2", *placed).tres_req.split(",")
    assert "node=3" in _values("-p real -w node0[1-3] -n3 -c2", *placed).tres_req.split(",")
