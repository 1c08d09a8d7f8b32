"""Which clusters may ever run a job, and the reason `scontrol show job` gives for the others.

Jobs come from real sbatch command lines through Caldera's sbatch parser; clusters are
described as backends describe them (a Slurm-like home with V100 nodes, a burst cluster with
A100 nodes, a Kubernetes cluster that sees only /home through a volume). The static "could
ever run" answer is cross-checked against the scheduler's own placement on empty clusters.
"""

from __future__ import annotations

import time
import tomllib
from dataclasses import replace

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from gateway.compat.errors import CompatError
from gateway.compat.optypes import ParseContext
from gateway.compat.sbatch import parse_sbatch
from gateway.federation.config import parse_routing
from gateway.federation.eligibility import (
    eligibility,
    eligible,
    home_of,
)
from gateway.model.cluster import ClusterState, Gpu, Node, Partition
from gateway.model.job import Job
from gateway.model.jobspec import JobSpec
from gateway.scheduler.builtin import DEFAULT_PLUGINS, FACTORIES
from gateway.scheduler.cycle import run_cycle
from gateway.scheduler.plugins import Registry
from gateway.scheduler.snapshot import NodeFree, Snapshot
from tests.support.builders import make_job

CWD = "/home/u/proj"
CTX = ParseContext(cwd=CWD, now=1_800_000_000.0, user="u", uid=1000)

ROUTING = """
[routing]
home = "a"
margin = "5m"

[[routing.rule]]
partition = "cpu"
clusters = ["a", "burst", "k8s"]

[[routing.rule]]
qos = "high"
clusters = ["a"]

[routing.cluster.burst]
weight = "60s"

[routing.cluster.k8s]
burst = false
images = ["localhost/*"]

[[routing.cluster.k8s.fs]]
submit = "/home"
path = "/mnt/home"
"""


def _nodes(
    prefix: str,
    count: int,
    cpus: int,
    memory_mb: int,
    partition: str,
    features: tuple[str, ...] = (),
    gres: tuple[tuple[str, str | None, int], ...] = (),
) -> tuple[Node, ...]:
    return tuple(
        Node(
            name=f"{prefix}{i:02d}",
            cpus=cpus,
            memory_mb=memory_mb,
            partitions=(partition,),
            features=features,
            gres=gres,
            gpus=tuple(Gpu(index=g) for g in range(sum(c for n, _, c in gres if n == "gpu"))),
        )
        for i in range(1, count + 1)
    )


def _cluster(name: str, *groups: tuple[str, tuple[Node, ...]], **kw: object) -> ClusterState:
    return ClusterState(
        name=name,
        nodes=tuple(n for _, nodes in groups for n in nodes),
        partitions=tuple(
            Partition(name=p, nodes=tuple(n.name for n in nodes), default=i == 0)
            for i, (p, nodes) in enumerate(groups)
        ),
        **kw,  # type: ignore[arg-type]
    )


HOME = _cluster(
    "a",
    ("cpu", _nodes("a", 4, 32, 128_000, "cpu", ("skylake", "ib"))),
    ("gpu", _nodes("ag", 2, 32, 256_000, "gpu", ("v100",), (("gpu", "v100", 4),))),
    licenses=(("fluent", 4),),
)
BURST = _cluster(
    "burst",
    ("cpu", _nodes("b", 8, 64, 256_000, "cpu", ("zen3",))),
    ("gpu", _nodes("bg", 1, 64, 512_000, "gpu", (), (("gpu", "a100", 8), ("nvme", None, 1)))),
    licenses=(),  # Caldera counts them: none here
)
K8S = _cluster("k8s", ("cpu", _nodes("k", 2, 16, 64_000, "cpu")))
CLUSTERS = {"a": HOME, "burst": BURST, "k8s": K8S}
CFG = parse_routing(tomllib.loads(ROUTING), ("a", "burst", "k8s"), "caldera.toml")


def job(*argv: str, env: dict[str, str] | None = None) -> Job:
    spec = parse_sbatch(
        ["sbatch", *argv, f"{CWD}/job.sh"], "#!/bin/sh\ntrue\n", env or {}, CTX
    ).spec
    base = make_job(1).build()
    return replace(
        base,
        spec=spec,
        partition=",".join(spec.partitions) or "cpu",
        qos=spec.qos or "normal",
    )


@pytest.mark.parametrize(
    ("argv", "expected", "reasons"),
    [
        (["-p", "cpu", "-N", "2", "-c", "8"], {"a", "burst", "k8s"}, {}),
        ([], {"a", "burst", "k8s"}, {}),  # the home's default partition, ruled like cpu
        (
            ["-p", "gpu", "--gres=gpu:a100:2"],
            {"burst"},
            {"a": ["no node has gres gpu:a100"], "k8s": ["[routing.cluster.k8s] burst = false"]},
        ),
        (
            ["-p", "gpu", "--gpus-per-node=v100:2"],
            {"a"},
            {"burst": ["no node has gres gpu:v100"]},
        ),
        (["-p", "gpu", "--gres=gpu:v100:8"], set(), {"a": ["no node has 8 gpu:v100"]}),
        (["-p", "gpu", "--gres=gpu:1,nvme:1"], {"burst"}, {"a": ["gres nvme"]}),
        (["-p", "gpu", "--gres=gpu:1"], {"a", "burst"}, {}),
        (
            ["-p", "cpu", "-N", "6"],
            {"burst"},
            {"a": ["6 nodes needed", "4 could"], "k8s": ["6 nodes needed", "2 could"]},
        ),
        (["-p", "cpu", "-c", "48"], {"burst"}, {"a": ["no node has 48 CPUs"]}),
        (
            ["-p", "cpu", "--mem=200G"],
            {"burst"},
            {"a": ["no node has 204800M memory"], "k8s": ["memory"]},
        ),
        (["-p", "cpu", "-C", "zen3"], {"burst"}, {"a": ["no node has features zen3"]}),
        (["-p", "cpu", "-C", "zen3|skylake"], {"a", "burst"}, {}),
        (
            ["-p", "cpu", "--burst=never"],
            {"a"},
            {"burst": ["--burst=never", "home is a"], "k8s": ["--burst=never"]},
        ),
        (["-p", "cpu", "-M", "burst"], {"burst"}, {"a": ["not in -M burst"]}),
        (["-p", "cpu", "-M", "BURST"], {"burst"}, {"a": ["not in -M BURST"]}),
        (["-p", "cpu", "-M", "ALL"], {"a", "burst", "k8s"}, {}),
        (["-p", "cpu", "-M", "burst,k8s"], {"burst", "k8s"}, {"a": ["not in -M burst,k8s"]}),
        (["-p", "cpu", "-M", "burst", "--burst=never"], {"burst"}, {}),  # -M names its home
        (["-p", "gpu", "-M", "all"], {"a", "burst"}, {"k8s": ["no partition gpu"]}),
        (
            ["-p", "cpu", "-D", "/tmp/x"],
            {"a", "burst"},
            {"k8s": ["working directory /tmp/x not reachable"]},
        ),
        (
            ["-p", "cpu", "-o", "/scratch/out/%j.out"],
            {"a", "burst"},
            {"k8s": ["output directory /scratch/out not reachable"]},
        ),
        (["-p", "cpu", "-e", "/var/log/x.err"], {"a", "burst"}, {"k8s": ["error directory"]}),
        (["-p", "cpu", "--image=docker.io/x"], {"a", "burst"}, {"k8s": ["image docker.io/x"]}),
        (["-p", "cpu", "--image=localhost/x:1"], {"a", "burst", "k8s"}, {}),
        (
            ["-p", "nosuch"],
            set(),
            {"a": ["no partition nosuch"], "burst": ["no partition nosuch"]},
        ),
        (["-p", "nosuch,cpu"], {"a", "burst", "k8s"}, {}),
        # k8s does not say (licenses None: a cluster that counts its own): not ruled out
        (["-p", "cpu", "-L", "fluent:2"], {"a", "k8s"}, {"burst": ["no license fluent:2"]}),
        (["-p", "cpu", "-L", "fluent:5"], {"k8s"}, {"a": ["no license fluent:5"]}),
        (["-p", "cpu", "-L", "matlab|fluent:1"], {"a", "k8s"}, {"burst": ["matlab|fluent:1"]}),
        (["-p", "cpu", "-n", "200"], {"burst"}, {"a": ["200 tasks"], "k8s": ["200 tasks"]}),
        (["-p", "cpu", "-n", "100"], {"a", "burst"}, {}),
        (["-p", "cpu", "-w", "a02"], {"a"}, {"burst": ["no node a02"], "k8s": ["no node a02"]}),
        (
            ["-p", "debug", "--qos=high"],
            set(),
            {"burst": ["routing sends QOS high to a", "[[routing.rule]] #2"]},
        ),
    ],
)
def test_eligibility_on_realistic_clusters(
    argv: list[str], expected: set[str], reasons: dict[str, list[str]]
) -> None:
    verdicts = eligibility(job(*argv), CLUSTERS, CFG)
    assert list(verdicts) == ["a", "burst", "k8s"]  # every configured cluster, home first
    assert set(eligible(verdicts)) == expected
    for name, why in verdicts.items():
        if why is not None:
            assert why.startswith(f"{name}: ")
            assert "\n" not in why
    for name, fragments in reasons.items():
        why = verdicts[name]
        assert why is not None, name
        for fragment in fragments:
            assert fragment in why, (fragment, why)


def test_a_cluster_not_described_yet_is_skipped_with_a_reason() -> None:
    verdicts = eligibility(job("-p", "cpu"), {"a": HOME, "burst": BURST}, CFG)
    assert eligible(verdicts) == ("a", "burst")
    assert verdicts["k8s"] is not None
    assert "not described" in verdicts["k8s"]


def test_a_job_without_partition_uses_each_clusters_default_partition() -> None:
    other_default = replace(
        BURST, partitions=(replace(BURST.partitions[0], default=False), BURST.partitions[1])
    )
    other_default = replace(
        other_default,
        partitions=(
            other_default.partitions[0],
            replace(other_default.partitions[1], default=True),
        ),
    )
    j = job("--gres=gpu:a100:1", "-M", "burst")
    assert eligible(eligibility(j, {**CLUSTERS, "burst": other_default}, CFG)) == ("burst",)
    assert eligible(eligibility(j, CLUSTERS, CFG)) == ()  # burst's default is cpu: no a100


def test_the_answer_follows_a_new_description_of_the_same_cluster() -> None:
    j = job("-p", "cpu", "-N", "6", "-M", "burst")
    assert eligible(eligibility(j, CLUSTERS, CFG)) == ("burst",)
    for _ in range(40):  # more descriptions than the views kept: none is answered stale
        shrunk = replace(BURST, nodes=BURST.nodes[:4] + BURST.nodes[8:])
        why = eligibility(j, {**CLUSTERS, "burst": shrunk}, CFG)["burst"]
        assert why is not None
        assert "6 nodes needed, 4 could" in why
    assert eligible(eligibility(j, CLUSTERS, CFG)) == ("burst",)


def test_without_a_routing_table_every_cluster_that_can_run_it_is_eligible() -> None:
    plain = parse_routing({}, ("a", "burst", "k8s"), "caldera.toml")
    verdicts = eligibility(job("-p", "cpu", "-D", "/tmp/x"), CLUSTERS, plain)
    assert eligible(verdicts) == ("a", "burst", "k8s")


def test_home_is_the_sites_unless_minus_m_leaves_it_out() -> None:
    assert home_of(job().spec, CFG) == "a"
    assert home_of(job("-M", "k8s,burst").spec, CFG) == "k8s"
    assert home_of(job("-M", "burst,a").spec, CFG) == "a"
    assert home_of(job("-M", "all").spec, CFG) == "a"


def test_burst_after_is_read_from_caldera_lines_env_and_checked() -> None:
    script = "#!/bin/sh\n#CALDERA --burst=prefer --burst-after=45\ntrue\n"
    spec = parse_sbatch(["sbatch", f"{CWD}/job.sh"], script, {}, CTX).spec
    assert (spec.burst, spec.burst_after_min) == ("prefer", 45)
    assert job(env={"CALDERA_BURST_AFTER": "7"}).spec.burst_after_min == 7
    assert job("--burst-after=0").spec.burst_after_min == 0
    assert CFG.burst_after_for(spec) == 45 * 60
    for bad in ("x", "-1", "1.5", "", "2h"):
        with pytest.raises(CompatError) as info:
            job(f"--burst-after={bad}")
        assert f"Invalid --burst-after specification: {bad}" in str(info.value)


# --- cross-check: "could ever run" agrees with the scheduler on an empty cluster -------

REG = Registry.build(DEFAULT_PLUGINS, FACTORIES)
ONE = parse_routing({}, ("c",), "caldera.toml")

_node_shapes = st.tuples(
    st.sampled_from([2, 4, 8, 16]),  # cpus
    st.sampled_from([1000, 4000, 16000]),  # memory MiB
    st.sampled_from([0, 1, 2, 4]),  # gpus
    st.sampled_from([None, "a100", "v100"]),  # gpu type
    st.sampled_from([(), ("x",), ("x", "y")]),  # features
)


def _random_cluster(
    shapes: list[tuple[int, int, int, str | None, tuple[str, ...]]],
) -> ClusterState:
    nodes = tuple(
        Node(
            name=f"n{i:02d}",
            cpus=cpus,
            memory_mb=mem,
            partitions=("debug",),
            features=features,
            gres=(("gpu", gtype, gpus),) if gpus else (),
            gpus=tuple(Gpu(index=g) for g in range(gpus)),
        )
        for i, (cpus, mem, gpus, gtype, features) in enumerate(shapes)
    )
    return ClusterState(
        name="c",
        nodes=nodes,
        partitions=(Partition(name="debug", nodes=tuple(n.name for n in nodes), default=True),),
    )


def _starts_on_empty(j: Job, cluster: ClusterState) -> bool:
    free = {
        n.name: NodeFree(n, n.cpus, n.memory_mb, frozenset(g.index for g in n.gpus))
        for n in cluster.nodes
    }
    snap = Snapshot(now=time.time(), pending=(j,), running=(), clusters={"c": cluster}, free=free)
    return bool(run_cycle(snap, REG).starts)


@settings(max_examples=250, deadline=None)
@given(
    st.lists(_node_shapes, min_size=1, max_size=4),
    st.sampled_from([None, 1, 2, 3]),  # -N
    st.sampled_from([None, 1, 2, 6, 12]),  # -n
    st.sampled_from([None, 1, 2, 4]),  # -c
    st.sampled_from([None, 500, 3000, 10000]),  # --mem (MiB)
    st.sampled_from([None, "1", "2", "a100:1", "v100:2", "a100:4"]),  # --gres=gpu:...
    st.sampled_from([None, "x", "y", "x&y", "x|z"]),  # -C
)
def test_could_ever_run_agrees_with_the_scheduler_on_an_empty_cluster(
    shapes: list[tuple[int, int, int, str | None, tuple[str, ...]]],
    nodes: int | None,
    tasks: int | None,
    cpus: int | None,
    mem: int | None,
    gpus: str | None,
    constraint: str | None,
) -> None:
    argv = [
        *(["-N", str(nodes)] if nodes else []),
        *(["-n", str(tasks)] if tasks else []),
        *(["-c", str(cpus)] if cpus else []),
        *([f"--mem={mem}"] if mem else []),
        *([f"--gres=gpu:{gpus}"] if gpus else []),
        *(["-C", constraint] if constraint else []),
    ]
    try:
        j = job(*argv)
    except CompatError:
        event("refused by sbatch")
        return  # sbatch refuses the combination itself
    j = replace(j, partition="debug")
    cluster = _random_cluster(shapes)
    verdict = eligibility(j, {"c": cluster}, ONE)["c"]
    event("eligible" if verdict is None else verdict.split(" in partition")[0].split(" ")[-1])
    assert (verdict is None) == _starts_on_empty(j, cluster), (argv, verdict)


def test_spec_without_workdir_reachability_fields_is_fine() -> None:
    spec = JobSpec(name="j", workdir=CWD, partitions=("cpu",), stdout=None, stderr=None)
    j = replace(make_job(1).build(), spec=spec, partition="cpu")
    assert eligible(eligibility(j, CLUSTERS, CFG)) == ("a", "burst", "k8s")
