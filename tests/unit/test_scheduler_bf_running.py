"""The running-jobs index kept across cycles (bf_running.py) must be what a rebuild from
scratch gives, order of equal ends included, whatever starts and ends in between."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from gateway.model.cluster import ClusterState
from gateway.model.job import Job, RankPlacement
from gateway.model.state import JobState
from gateway.scheduler import bf_running
from gateway.scheduler.bf_running import RunningIndex, build, running_index, update
from gateway.scheduler.snapshot import NodeFree, Snapshot
from gateway.simulate.engine import POLICIES, simulate
from gateway.simulate.swf import SwfJob, Trace
from tests.support.builders import make_cluster, make_job

NOW = 1_800_000_000.0


def _job(job_id: int, nodes: list[str], minutes: int, exclusive: bool, start: float) -> Job:
    b = make_job(job_id).nodes(len(nodes)).time(minutes)
    if exclusive:
        b = b.exclusive()
    placement = tuple(RankPlacement(n, 1, 1, 100) for n in nodes)
    return b.state(
        JobState.RUNNING, start_time=start, nodes=tuple(nodes), placement=placement
    ).build()


def _snap(cluster: ClusterState, running: list[Job], now: float = NOW) -> Snapshot:
    free = {n.name: NodeFree(n, n.cpus, n.memory_mb, frozenset()) for n in cluster.nodes}
    return Snapshot(now=now, pending=(), running=tuple(running), clusters={"c": cluster}, free=free)


def _shape(index: RunningIndex) -> tuple[object, ...]:
    """The index without its seq values (only their order means anything)."""
    ends = [(end, node, use) for end, _, node, use in index.ends]
    return ends, dict(index.by_node)


@pytest.mark.parametrize("seed", range(8))
def test_an_index_kept_across_snapshots_equals_one_rebuilt_after_starts_and_ends(
    seed: int,
) -> None:
    rng = random.Random(seed)
    cluster = make_cluster(nodes=12, cpus=4)
    names = [n.name for n in cluster.nodes]
    running: list[Job] = []
    kept = build(_snap(cluster, running))
    next_id = 1
    for _ in range(60):
        for job in rng.sample(running, k=min(len(running), rng.randint(0, 2))):
            running.remove(job)  # ended
        for _ in range(rng.randint(0, 3)):  # started; equal limits give equal ends
            width = rng.randint(1, 4)
            nodes = rng.sample(names, k=width)
            limit = rng.choice((10, 10, 30, 60))
            start = NOW - rng.choice((0, 0, 60))
            running.append(_job(next_id, nodes, limit, rng.random() < 0.3, start))
            next_id += 1
        snap = _snap(cluster, running)
        before = _shape(kept)
        fresh = update(kept, snap)
        assert _shape(kept) == before  # an index handed out never changes
        assert _shape(fresh) == _shape(build(snap))
        assert list(fresh.ends) == sorted(fresh.ends)
        assert fresh.next_seq > max((s for _, s, _, _ in fresh.ends), default=-1)
        kept = fresh


def test_a_reordered_snapshot_or_new_node_descriptions_rebuild_what_changed() -> None:
    cluster = make_cluster(nodes=4, cpus=2)
    a = _job(1, ["n01", "n02"], 10, False, NOW)
    b = _job(2, ["n03"], 10, False, NOW)  # ends with a: their order is the snapshot's
    c = _job(3, ["n04"], 10, True, NOW)
    first = build(_snap(cluster, [a, b, c]))
    swapped = _snap(cluster, [b, a, c])
    assert _shape(update(first, swapped)) == _shape(build(swapped))
    assert [n for _, _, n, _ in update(first, swapped).ends] == ["n03", "n01", "n02", "n04"]
    # the same jobs on bigger nodes: the exclusive job holds the whole of its new node
    bigger = ClusterState(
        name=cluster.name,
        nodes=tuple(replace(n, cpus=8) for n in cluster.nodes),
        partitions=cluster.partitions,
    )
    moved = _snap(bigger, [a, b, c])
    again = update(first, moved)
    assert _shape(again) == _shape(build(moved))
    assert again.by_node["n04"][0].cpus == 8
    assert update(again, moved) is again  # nothing changed: the same index


def test_the_index_is_kept_per_set_of_clusters() -> None:
    bf_running._INDEXES.clear()
    cluster = make_cluster(nodes=2, cpus=2)
    snap = _snap(cluster, [_job(1, ["n01"], 10, False, NOW)])
    first = running_index(snap)
    assert running_index(snap) is first
    other = Snapshot(now=NOW, pending=(), running=(), clusters={"d": cluster}, free=dict(snap.free))
    assert running_index(other).ends == ()
    assert running_index(snap) is first


def test_a_replay_decides_the_same_with_the_index_rebuilt_at_every_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = random.Random(5)
    jobs = tuple(
        SwfJob(
            i,
            float(i * rng.randint(10, 200)),
            float(rng.randint(60, 3000)),
            rng.randint(1, 16),
            rng.choice((5, 20, 60)),
            rng.randint(1, 5),
        )
        for i in range(1, 301)
    )
    trace = Trace(tuple(sorted(jobs, key=lambda j: j.submit)), 16, 0)
    kept = simulate(trace, 16, POLICIES["easy"])
    monkeypatch.setattr(bf_running, "running_index", lambda snap: build(snap))
    monkeypatch.setattr("gateway.scheduler.backfill.running_index", lambda snap: build(snap))
    rebuilt = simulate(trace, 16, POLICIES["easy"])
    assert kept.summary().rsplit(" wall=", 1)[0] == rebuilt.summary().rsplit(" wall=", 1)[0]
    assert kept.cycles > 100
