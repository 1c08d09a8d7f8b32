"""Drained nodes: kept in the store across reopen (schema 4), shown drained by the
overlay, skipped by the scheduler with slurmctld's ReqNodeNotAvail when only drained nodes
could run a job, and shown by sinfo/scontrol as slurmctld prints them."""

from __future__ import annotations

import sqlite3
import time
from dataclasses import replace
from pathlib import Path

from gateway.compat.fmt_common import NodeExtras
from gateway.compat.show_fmt import show_node
from gateway.compat.sinfo_fmt import SinfoOptions, render_sinfo
from gateway.model.cluster import NodeState
from gateway.model.job import RankPlacement
from gateway.model.state import JobState, Reason
from gateway.scheduler.builtin import DEFAULT_PLUGINS, FACTORIES
from gateway.scheduler.cycle import run_cycle
from gateway.scheduler.plugins import Registry
from gateway.scheduler.snapshot import NodeFree, Snapshot
from gateway.store.node_admin import NodeAdmin, drain_overlay
from gateway.store.sqlite import SqliteStore
from tests.support.builders import make_cluster, make_job

REG = Registry.build(DEFAULT_PLUGINS, FACTORIES)
T0 = 1_790_000_000.0


def _snap(drained: dict[str, NodeAdmin], jobs: list, nodes: int = 2) -> Snapshot:
    clusters = drain_overlay({"local": make_cluster(nodes=nodes, cpus=4)}, drained)
    free = {
        n.name: NodeFree(n, n.cpus, n.memory_mb, frozenset())
        for c in clusters.values()
        for n in c.nodes
    }
    running = tuple(j for j in jobs if j.state.is_active)
    for j in running:
        for p in j.placement:
            f = free[p.node]
            free[p.node] = replace(f, cpus=f.cpus - p.cpus, jobs=f.jobs + 1)
    return Snapshot(
        now=time.time(),
        pending=tuple(j for j in jobs if j.state is JobState.PENDING),
        running=running,
        clusters=dict(clusters),
        free=free,
        dep_targets={},
        running_tasks={},
    )


def test_a_drain_survives_a_reopen_and_a_resume_removes_it(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "c.db")
    store.set_node_admin([NodeAdmin("n01", "disk bad", 0, "root", T0)], [])
    store.close()
    again = SqliteStore(tmp_path / "c.db")
    assert again.node_admin() == {"n01": NodeAdmin("n01", "disk bad", 0, "root", T0)}
    again.set_node_admin([], ["n01"])
    assert again.node_admin() == {}


def test_a_schema_3_store_is_migrated_to_4_and_keeps_its_jobs(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    SqliteStore(db).close()
    conn = sqlite3.connect(db)
    conn.execute("DROP TABLE node_admin")
    conn.execute("UPDATE meta SET value='3' WHERE key='schema'")
    conn.commit()
    conn.close()
    store = SqliteStore(db)
    assert store._rows("SELECT value FROM meta WHERE key='schema'") == [("5",)]  # 5: policy
    store.set_node_admin([NodeAdmin("n02", "x", 0, "root", T0)], [])
    assert list(store.node_admin()) == ["n02"]


def test_the_overlay_drains_only_named_nodes_and_keeps_a_down_node_down() -> None:
    cluster = make_cluster(nodes=3)
    down = replace(
        cluster,
        nodes=(cluster.nodes[0], replace(cluster.nodes[1], state=NodeState.DOWN), cluster.nodes[2]),
    )
    admin = {n: NodeAdmin(n, "maint", 0, "root", T0) for n in ("n02", "n03")}
    out = drain_overlay({"local": down}, admin)["local"]
    assert [(n.state, n.reason) for n in out.nodes] == [
        (NodeState.IDLE, None),
        (NodeState.DOWN, "maint"),
        (NodeState.DRAINED, "maint"),
    ]
    clusters = {"local": cluster}
    assert drain_overlay(clusters, {}) is clusters


def test_a_job_that_only_drained_nodes_could_run_waits_for_reqnodenotavail() -> None:
    admin = {"n02": NodeAdmin("n02", "maint", 0, "root", T0)}
    result = run_cycle(_snap(admin, [make_job(1).nodes(2).build(), make_job(2).build()]), REG)
    assert result.reasons == {1: Reason.REQ_NODE_NOT_AVAIL}
    assert result.descs == {1: "ReqNodeNotAvail, UnavailableNodes:n02"}
    assert [(d.job.job_id, d.placement[0].node) for d in result.starts] == [(2, "n01")]


def test_a_job_that_fits_once_jobs_end_on_the_undrained_nodes_waits_for_resources() -> None:
    admin = {"n02": NodeAdmin("n02", "maint", 0, "root", T0)}
    busy = (
        make_job(9)
        .state(JobState.RUNNING, placement=(RankPlacement("n01", 1, 4, 100, ()),))
        .build()
    )
    result = run_cycle(_snap(admin, [busy, make_job(1).build()]), REG)
    assert result.reasons == {1: Reason.RESOURCES}
    assert not result.starts


def test_sinfo_and_scontrol_show_drained_and_draining_nodes_as_slurm() -> None:
    admin = {n: NodeAdmin(n, "bad fan", 0, "root", T0) for n in ("n01", "n02")}
    cluster = drain_overlay({"local": make_cluster(nodes=3)}, admin)["local"]
    n01, n02, n03 = cluster.nodes
    cluster = replace(cluster, nodes=(n01, replace(n02, state=NodeState.DRAINING), n03))
    extras = {
        "n01": NodeExtras(reason_time=T0, reason_user="root", reason_uid=0),
        "n02": NodeExtras(alloc_cpus=4, reason_time=T0, reason_user="root", reason_uid=0),
        "n03": NodeExtras(),
    }
    text = render_sinfo(
        cluster, SinfoOptions(node_view=True, format="%N %C %T %t %E"), now=T0, node_extras=extras
    )
    assert text.splitlines() == [
        "NODELIST CPUS(A/I/O/T) STATE STATE REASON",
        "n01 0/0/4/4 drained drain bad fan",
        "n02 4/0/0/4 draining drng bad fan",
        "n03 0/4/0/4 idle idle none",
    ]
    shown = show_node(n01, extras=extras["n01"])
    assert "   State=IDLE+DRAIN ThreadsPerCore=" in shown
    assert "   Reason=bad fan [root@" in shown


def test_sinfo_cpus_count_the_allocated_cpus_of_a_busy_node() -> None:
    cluster = make_cluster(nodes=2, cpus=4)
    cluster = replace(
        cluster, nodes=(replace(cluster.nodes[0], state=NodeState.MIXED), cluster.nodes[1])
    )
    extras = {"n01": NodeExtras(alloc_cpus=1), "n02": NodeExtras()}
    text = render_sinfo(
        cluster, SinfoOptions(node_view=True, format="%N %C"), now=T0, node_extras=extras
    )
    assert text.splitlines()[1:] == ["n01 1/3/0/4", "n02 0/4/0/4"]
