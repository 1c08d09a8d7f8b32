"""sinfo's views of a fixed cluster (four idle real nodes and three virtual nodes that
never answer, in three partitions, as on the test cluster); the layouts are real sinfo
22.05's (see test_fmt_records and tests/differential/test_fmt_vs_slurm.py)."""

from __future__ import annotations

import json
from typing import Any

from gateway.compat.sinfo_fmt import (
    SINFO_FIELDS,
    SinfoOptions,
    parse_sinfo_format,
    parse_sinfo_long_format,
    render_sinfo,
    sinfo_records,
)
from gateway.compat.sinfo_fmt_json import partitions_json_doc, sinfo_json
from tests.unit.test_fmt_records import T0, cluster, utc

__all__ = ["utc"]


def sinfo(**kw: Any) -> str:
    state, nex, pex = cluster()
    return render_sinfo(
        state,
        SinfoOptions(**kw),
        now=float(T0),
        node_extras=nex,
        partition_extras=pex,
    )


def test_default_view_groups_nodes_by_state_per_partition() -> None:
    assert sinfo() == (
        "PARTITION   AVAIL  TIMELIMIT  NODES  STATE NODELIST\n"
        "debug*         up   infinite      3  down* big[001-003]\n"
        "debug*         up   infinite      4   idle node[01-04]\n"
        "real           up   infinite      4   idle node[01-04]\n"
        "xyz-cluster    up   infinite      3  down* big[001-003]\n"
        "xyz-cluster    up   infinite      2   idle node[03-04]\n"
    )


def test_node_view_one_line_per_node_and_partition() -> None:
    lines = sinfo(node_view=True).splitlines()
    assert lines[:3] == [
        "NODELIST   NODES   PARTITION STATE ",
        "big001         1      debug* down* ",
        "big001         1 xyz-cluster down* ",
    ]
    assert lines[-1] == "node04         1 xyz-cluster idle  "
    assert len(lines) == 1 + 3 * 2 + 2 * 2 + 2 * 3


def test_summarize() -> None:
    assert sinfo(summarize=True) == (
        "PARTITION   AVAIL  TIMELIMIT   NODES(A/I/O/T) NODELIST\n"
        "debug*         up   infinite          0/4/3/7 big[001-003],node[01-04]\n"
        "real           up   infinite          0/4/0/4 node[01-04]\n"
        "xyz-cluster    up   infinite          0/2/3/5 big[001-003],node[03-04]\n"
    )


def test_long_views() -> None:
    assert sinfo(long=True).splitlines()[:3] == [
        "Sun Nov 22 07:09:56 2026",
        "PARTITION   AVAIL  TIMELIMIT   JOB_SIZE ROOT OVERSUBS     GROUPS  NODES       STATE"
        " NODELIST",
        "debug*         up   infinite 1-infinite   no       NO        all      3       down*"
        " big[001-003]",
    ]
    assert sinfo(node_view=True, long=True, partitions=("real",)).splitlines()[1:3] == [
        "NODELIST   NODES PARTITION       STATE CPUS    S:C:T MEMORY TMP_DISK WEIGHT AVAIL_FE"
        " REASON              ",
        "node01         1      real        idle 2       2:1:1   2000        0      1     real"
        " none                ",
    ]


def test_formats() -> None:
    assert sinfo(format="%P %a %l %D %t %N %c %m %G %f %z %C %F").splitlines()[:3] == [
        "PARTITION AVAIL TIMELIMIT NODES STATE NODELIST CPUS MEMORY GRES AVAIL_FEATURES S:C:T"
        " CPUS(A/I/O/T) NODES(A/I/O/T)",
        "debug* up infinite 3 down* big[001-003] 256 1000000 gpu:v100:8 gpu,v100,v100-32g"
        " 2:128:1 0/0/768/768 0/0/3/3",
        "debug* up infinite 4 idle node[01-04] 2 2000 (null) real 2:1:1 0/8/0/8 0/4/0/4",
    ]
    assert sinfo(format="%N %t").splitlines() == [
        "NODELIST STATE",
        "big[001-003] down*",
        "node[01-04] idle",
    ]
    text = sinfo(format_long="partition:.15,nodes,statecomplete")
    assert text.splitlines()[1] == ("         debug*3                   down+reserved+not_re")


def test_filters() -> None:
    assert sinfo(states=("idle",), format="%P %D %t").splitlines() == [
        "PARTITION NODES STATE",
        "debug* 4 idle",
        "real 4 idle",
        "xyz-cluster 2 idle",
    ]
    assert sinfo(responding=True, partitions=("debug",), format="%N").splitlines() == [
        "NODELIST",
        "node[01-04]",
    ]
    # the partition column is as wide as the longest name shown (at least 9)
    assert sinfo(noheader=True, partitions=("real",)) == (
        "real         up   infinite      4   idle node[01-04]\n"
    )


def test_records_count_nodes_and_cpus() -> None:
    state, nex, pex = cluster()
    recs = sinfo_records(state, SinfoOptions(summarize=True), node_extras=nex, partition_extras=pex)
    debug = recs[0]
    assert (debug.nodes_alloc, debug.nodes_idle, debug.nodes_other, debug.nodes_total) == (
        0,
        4,
        3,
        7,
    )
    assert (debug.cpus_idle, debug.cpus_other, debug.cpus_total) == (8, 768, 776)


def test_table_and_parsers() -> None:
    letters = [f.letter for f in SINFO_FIELDS if f.letter]
    assert len(letters) == len(set(letters))
    items = parse_sinfo_format("x%.5a %-9P|%10N")
    assert items[0].suffix == "x"
    assert items[1].right
    assert items[1].width == 5
    assert items[2].field is None
    assert items[2].suffix == "%-9P|"
    long_items = parse_sinfo_long_format("partition:.15x,nodes")
    assert (long_items[0].width, long_items[0].suffix, long_items[1].width) == (15, "x", 20)


def test_json_layout() -> None:
    state, nex, pex = cluster()
    doc = json.loads(sinfo_json(state, node_extras=nex))
    assert list(doc) == ["meta", "errors", "nodes"]
    big = next(n for n in doc["nodes"] if n["name"] == "big001")
    assert (big["state"], big["state_flags"]) == ("down", ["RESERVED", "NOT_RESPONDING"])
    assert (big["cpu_load"], big["free_memory"], big["gres"]) == (4294967294, -2, "gpu:v100:8")
    assert list(big)[17:21] == ["mcs_label", "name", "next_state_after_reboot", "address"]
    parts = json.loads(json.dumps(partitions_json_doc(state, partition_extras=pex)))
    assert parts["partitions"][0]["flags"] == ["default"]
    assert parts["partitions"][0]["max_time_limit"] == -1
