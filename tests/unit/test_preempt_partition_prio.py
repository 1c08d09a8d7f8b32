"""PreemptType=preempt/partition_prio (preempt_partition_prio.c): partitions' PriorityTier,
PreemptMode and GraceTime from caldera.toml's [[partitions]] and from slurm.conf, how
`scontrol show partition` prints them, and the victims a cycle picks across tiers."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from gateway.cli.node_view import partition_extras
from gateway.compat.show_fmt import show_partition
from gateway.control.config import load_config
from gateway.control.site import local_cluster
from gateway.control.site_tables import site_value
from gateway.control.slurm_conf import SlurmConfError, parse_slurm_conf
from gateway.model.cluster import Partition
from gateway.model.job import Job
from gateway.policy.preempt_rules import (
    Mode,
    grace_s,
    may_preempt,
    may_preempt_any,
    mode_of,
    preempt_config,
)
from gateway.scheduler.builtin import DEFAULT_PLUGINS, FACTORIES
from gateway.scheduler.cycle import run_cycle
from gateway.scheduler.plugins import Registry
from gateway.scheduler.preempt import Preemption
from tests.unit.test_preempt_victims import _pending, _running
from tests.unit.test_scheduler_cycle import snap

REG = Registry.build(DEFAULT_PLUGINS, FACTORIES)
CFG = preempt_config({"preempt_type": "preempt/partition_prio", "preempt_mode": "REQUEUE"})


def _parts(*parts: Partition) -> dict[str, Partition]:
    return {p.name: p for p in parts}


HIGH = Partition(name="high", nodes=("n01", "n02"), priority_tier=2, preempt_mode="REQUEUE")
LOW = Partition(name="low", nodes=("n01", "n02"), priority_tier=1, preempt_mode="CANCEL")
ELSE = Partition(name="else", nodes=("n03",), priority_tier=1, preempt_mode="CANCEL")


def _in(job: Job, partition: str) -> Job:
    return replace(job, partition=partition)


def test_a_higher_tier_sharing_nodes_preempts_and_nothing_else_does() -> None:
    parts = _parts(HIGH, LOW, ELSE, replace(LOW, name="low2", priority_tier=2))
    now = time.time()
    pre = _in(_pending(9, 1), "high")
    victim = _in(_running(1, {"n01": 1}, priority=1), "low")
    assert may_preempt(CFG, None, parts, now, pre, victim)
    # the same tier, a higher one, no shared node, an unknown partition: never
    assert not may_preempt(CFG, None, parts, now, pre, _in(victim, "low2"))
    assert not may_preempt(CFG, None, parts, now, _in(pre, "low"), _in(victim, "high"))
    assert not may_preempt(CFG, None, parts, now, pre, _in(victim, "else"))
    assert not may_preempt(CFG, None, parts, now, pre, _in(victim, "gone"))
    # a preemptor submitted to several partitions: the higher one counts
    assert may_preempt(CFG, None, parts, now, _in(pre, "low,high"), victim)


def test_a_partition_with_preempt_mode_off_is_never_preempted() -> None:
    parts = _parts(HIGH, replace(LOW, preempt_mode="OFF"))
    victim = _in(_running(1, {"n01": 1}, priority=1), "low")
    assert not may_preempt(CFG, None, parts, time.time(), _in(_pending(9, 1), "high"), victim)


def test_mode_and_grace_come_from_the_victims_partition_not_its_qos() -> None:
    parts = _parts(HIGH, replace(LOW, grace_time_s=45))
    victim = _in(_running(1, {"n01": 1}, priority=1), "low")
    assert mode_of(CFG, None, victim, parts=parts) is Mode.CANCEL
    assert grace_s(CFG, None, victim, parts) == 45
    requeue = _in(victim, "high")
    assert mode_of(CFG, None, requeue, parts=parts) is Mode.REQUEUE
    no_requeue = replace(requeue, spec=replace(requeue.spec, requeue=False))
    assert mode_of(CFG, None, no_requeue, parts=parts) is Mode.CANCEL
    # preempt/qos ignores the partition's mode and grace
    qos = preempt_config({"preempt_type": "preempt/qos", "preempt_mode": "REQUEUE"})
    assert mode_of(qos, None, victim, parts=parts) is Mode.REQUEUE
    assert grace_s(qos, None, victim, parts) == 0


def test_with_the_sites_mode_off_partition_prio_preempts_nothing() -> None:
    off = preempt_config({"preempt_type": "preempt/partition_prio", "preempt_mode": "OFF"})
    assert not may_preempt_any(off, None, _in(_pending(9, 1), "high"))
    assert may_preempt_any(CFG, None, _in(_pending(9, 1), "high"))


@pytest.mark.parametrize(
    ("pending_in", "victims"),
    [("high", {9: (2,)}), ("low", {})],
)
def test_a_cycle_takes_the_lowest_priority_lower_tier_job_only_for_a_higher_tier(
    pending_in: str, victims: dict[int, tuple[int, ...]]
) -> None:
    running = [
        _in(_running(1, {"n01": 4}, priority=20), "low"),
        _in(_running(2, {"n02": 4}, priority=10), "low"),
    ]
    pre = replace(_in(_pending(9, 4), pending_in), priority=100)
    s = snap([*running, pre], nodes=2, cpus=4)
    nodes = tuple(replace(n, partitions=("high", "low")) for n in s.clusters["local"].nodes)
    parts = (replace(HIGH, default=True), LOW)
    cluster = replace(s.clusters["local"], nodes=nodes, partitions=parts)
    by_name = {n.name: n for n in nodes}
    free = {k: replace(f, node=by_name[k]) for k, f in s.free.items()}
    s = replace(s, clusters={"local": cluster}, free=free)
    rules = Preemption(lambda p, v: may_preempt(CFG, None, _parts(*parts), s.now, p, v), s.running)
    result = run_cycle(s, REG, rules)
    assert result.preempt == victims
    assert not result.starts


# --- configuration ------------------------------------------------------------------


SLURM_CONF = """ClusterName=tiers
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
PreemptExemptTime=00:01:00
NodeName=n[01-02] CPUs=4 RealMemory=4000
PartitionName=high Nodes=ALL PriorityTier=10 PreemptMode=OFF GraceTime=30
PartitionName=low Nodes=ALL Default=YES
"""


def test_slurm_conf_gives_tiers_modes_grace_and_the_preempt_settings() -> None:
    conf = parse_slurm_conf(SLURM_CONF, "slurm.conf")
    high, low = conf.partitions
    assert (high.priority_tier, high.preempt_mode, high.grace_time_s) == (10, "OFF", 30)
    assert (low.priority_tier, low.preempt_mode, low.grace_time_s) == (1, None, 0)
    assert dict(conf.preempt) == {
        "preempt_type": "preempt/partition_prio",
        "preempt_mode": "REQUEUE",
        "preempt_exempt_time": "00:01:00",
    }


def test_the_local_site_shows_tiers_as_scontrol_does(tmp_path: Path) -> None:
    (tmp_path / "slurm.conf").write_text(SLURM_CONF)
    (tmp_path / "caldera.toml").write_text('[local]\nslurm_conf = "slurm.conf"\n')
    config = load_config(tmp_path)
    assert config.preempt_type == "preempt/partition_prio"
    assert config.preempt_exempt_time == "00:01:00"
    cluster = local_cluster(config)
    high, low = cluster.partitions
    # a partition without its own PreemptMode shows the site's, as slurmctld prints it
    assert (high.preempt_mode, low.preempt_mode) == ("OFF", "REQUEUE")
    text = show_partition(high, cluster, extras=partition_extras(high))
    assert "PriorityJobFactor=1 PriorityTier=10 RootOnly=NO" in text
    assert "OverTimeLimit=NONE PreemptMode=OFF" in text
    assert " GraceTime=30 " in text
    low_text = show_partition(low, cluster, extras=partition_extras(low))
    assert "PriorityTier=1 " in low_text
    assert "PreemptMode=REQUEUE" in low_text


def test_site_tables_take_the_same_settings() -> None:
    (part,) = site_value(
        "partitions",
        [{"name": "high", "priority_tier": 5, "preempt_mode": "cancel", "grace_time": 20}],
    )
    assert (part.priority_tier, part.preempt_mode, part.grace_time_s) == (5, "CANCEL", 20)


@pytest.mark.parametrize(
    ("item", "fragment"),
    [
        ({"priority_tier": -1}, "priority_tier must be an integer >= 0"),
        ({"priority_tier": "high"}, "priority_tier must be an integer"),
        ({"preempt_mode": "sometimes"}, "partitions[0] (p): preempt_mode: PreemptMode must be"),
        ({"grace_time": -5}, "grace_time must be an integer >= 0"),
    ],
)
def test_bad_site_table_values_name_the_partition(item: dict[str, object], fragment: str) -> None:
    with pytest.raises(ValueError, match="partitions") as err:
        site_value("partitions", [{"name": "p", **item}])
    assert fragment in str(err.value)


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ("PartitionName=p Nodes=ALL PriorityTier=x", "slurm.conf:2: PriorityTier='x'"),
        ("PartitionName=p Nodes=ALL PreemptMode=maybe", "slurm.conf:2: PreemptMode: PreemptMode"),
        ("PartitionName=p Nodes=ALL GraceTime=-1", "slurm.conf:2: GraceTime='-1'"),
        ("PreemptType=preempt/tiers", "slurm.conf:2: preempt_type: one of"),
    ],
)
def test_bad_slurm_conf_values_name_the_line(line: str, fragment: str) -> None:
    text = f"NodeName=n01 CPUs=1 RealMemory=100\n{line}\n"
    with pytest.raises(SlurmConfError, match=r"slurm\.conf") as err:
        parse_slurm_conf(text, "slurm.conf")
    assert fragment in str(err.value)


def test_a_higher_tier_is_scheduled_first_whatever_the_priorities() -> None:
    # slurmctld's sort_job_queue2: PriorityTier before job priority
    low = replace(_in(_pending(8, 4, qos="low"), "low"), priority=1000)
    high = replace(_in(_pending(9, 4), "high"), priority=1)
    s = snap([low, high], nodes=1, cpus=4)
    nodes = tuple(replace(n, partitions=("high", "low")) for n in s.clusters["local"].nodes)
    cluster = replace(s.clusters["local"], nodes=nodes, partitions=(HIGH, LOW))
    free = {k: replace(f, node=nodes[0]) for k, f in s.free.items()}
    s = replace(s, clusters={"local": cluster}, free=free)
    assert [d.job.job_id for d in run_cycle(s, REG).starts] == [9]
    flat = replace(cluster, partitions=(replace(HIGH, priority_tier=1), LOW))
    flat_starts = run_cycle(replace(s, clusters={"local": flat}), REG).starts
    assert [d.job.job_id for d in flat_starts] == [8]
