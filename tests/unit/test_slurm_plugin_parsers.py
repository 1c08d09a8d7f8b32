"""Text forms the commands transport reads, and pyslurm's run-time version check."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from gateway.model.state import JobState
from gateway.model.values import INFINITE
from slurm_plugin.cli import parse_scontrol_line, partitions_doc_from_scontrol
from slurm_plugin.config import SlurmClusterConfig
from slurm_plugin.discovery import offered_cluster
from slurm_plugin.from_slurm_json import cluster_from_sinfo_json
from slurm_plugin.pyslurm_client import pyslurm_status, status_from_pyslurm

# `scontrol -o show partition real` on the test cluster (Slurm 22.05.8)
REAL = (
    "PartitionName=real AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL "
    "Default=NO QoS=N/A DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 "
    "Hidden=NO MaxNodes=UNLIMITED MaxTime=UNLIMITED MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED "
    "Nodes=node[01-04] PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO "
    "OverSubscribe=NO OverTimeLimit=NONE PreemptMode=OFF State=UP TotalCPUs=8 TotalNodes=4 "
    "SelectTypeParameters=NONE JobDefaults=(null) DefMemPerNode=UNLIMITED "
    "MaxMemPerNode=UNLIMITED TRES=cpu=8,mem=8000M,node=4,billing=8,gres/gpu=6"
)
DEBUG = (
    "PartitionName=debug AllowGroups=ALL Default=YES DefaultTime=00:30:00 MaxNodes=2 "
    "MaxTime=1-00:00:00 Nodes=node[01-02] State=UP TotalCPUs=4 TotalNodes=2"
)


def test_scontrol_partitions_read_like_slurmrestds() -> None:
    doc = partitions_doc_from_scontrol(REAL + "\n" + DEBUG + "\n")
    real, debug = doc["partitions"]
    assert real["name"] == "real"
    assert real["nodes"] == "node[01-04]"
    assert real["max_time_limit"] == -1
    assert real["default_time_limit"] is None
    assert real["flags"] == []
    assert debug["flags"] == ["default"]
    assert debug["max_time_limit"] == 1440
    assert debug["default_time_limit"] == 30
    assert debug["maximum_nodes_per_job"] == 2
    nodes = {
        "nodes": [
            {
                "name": "node01",
                "cpus": 2,
                "real_memory": 2000,
                "state": "idle",
                "partitions": ["debug", "real"],
                "gres": "",
            },
            {
                "name": "node03",
                "cpus": 2,
                "real_memory": 2000,
                "state": "mixed",
                "partitions": ["real"],
                "gres": "gpu:2",
            },
        ]
    }
    cluster = cluster_from_sinfo_json(nodes, doc, name="c").cluster
    assert cluster.partition("real") is not None
    assert cluster.partition("real").max_time == INFINITE  # type: ignore[union-attr]
    assert cluster.partition("debug").default  # type: ignore[union-attr]
    raw = cluster_from_sinfo_json(nodes, doc, name="c")
    offered = offered_cluster(raw, SlurmClusterConfig(name="c", node_prefix="c-", partitions=()))
    assert [n.name for n in offered.state.nodes] == ["c-node01", "c-node03"]
    assert offered.state.partition("real").nodes[0] == "c-node01"  # type: ignore[union-attr]
    gpus = {n.name: n.gpu_count() for n in offered.state.nodes}
    assert gpus == {"c-node01": 0, "c-node03": 2}


def test_scontrol_job_lines_keep_values_with_spaces() -> None:
    rec = parse_scontrol_line(
        "JobId=4583 ArrayJobId=4583 ArrayTaskId=7 JobName=a b JobState=CANCELLED "
        "Reason=JobHeldUser ExitCode=0:15 Comment=caldera:gw:9 my words StdOut=/x y"
    )
    assert rec["JobName"] == "a b"
    assert rec["ExitCode"] == "0:15"
    assert rec["Comment"] == "caldera:gw:9 my words"
    assert rec["StdOut"] == "/x y"


def test_pyslurm_is_used_only_when_built_for_the_sites_release() -> None:
    right: Any = SimpleNamespace(version=lambda: "22.5.1")
    assert pyslurm_status("22.05.8", right).usable
    wrong: Any = SimpleNamespace(version=lambda: "25.11.0")
    state = pyslurm_status("22.05.8", wrong)
    assert not state.usable
    assert "is for Slurm 25.11" in state.detail
    missing = pyslurm_status("22.05.8")
    assert not missing.usable  # not installed here (optional extra)


def test_pyslurm_records_become_statuses() -> None:
    row = status_from_pyslurm(
        12,
        {
            "job_state": "RUNNING",
            "array_job_id": 10,
            "array_task_id": 2,
            "exit_code": "3:0",
            "nodes": "n[1-2]",
            "comment": "caldera:gw:5",
        },
    )
    assert row.ref.text == "10_2"
    assert row.state is JobState.RUNNING
    assert row.exit_code == 768
    assert row.nodes == ("n1", "n2")
