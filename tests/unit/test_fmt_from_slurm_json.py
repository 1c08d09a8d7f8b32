"""Translation of Slurm 22.05's JSON (squeue, sacct, sinfo and slurmrestd's partitions)
into Caldera's model; the documents are trimmed copies of the test cluster's output."""

from __future__ import annotations

import json

from gateway.model.cluster import NodeState
from gateway.model.job import wait_status
from gateway.model.state import JobState, Reason
from gateway.model.values import INFINITE, NO_VAL
from slurm_plugin.from_slurm_json import (
    cluster_from_sinfo_json,
    exit_codes_from_sacct,
    jobs_from_sacct_json,
    jobs_from_squeue_json,
)

SQUEUE = {
    "meta": {},
    "errors": [],
    "jobs": [
        {
            "account": "root",
            "array_job_id": 593,
            "array_task_id": None,
            "array_max_tasks": 2,
            "array_task_string": "3-9%2",
            "batch_flag": True,
            "batch_host": "",
            "flags": ["JOB_MEM_SET"],
            "command": "",
            "cpus": 1,
            "current_working_directory": "/tmp/fmtx",
            "dependency": "",
            "end_time": 0,
            "exit_code": 0,
            "group_id": 0,
            "group_name": "root",
            "job_id": 593,
            "job_state": "PENDING",
            "memory_per_node": None,
            "memory_per_cpu": 100,
            "name": "arr",
            "node_count": 1,
            "nodes": "",
            "partition": "real",
            "priority": 4294901537,
            "qos": "normal",
            "requeue": True,
            "start_time": 0,
            "state_description": "",
            "state_reason": "JobArrayTaskLimit",
            "standard_output": "/tmp/caldera-slurm/jobs/%A_%a.out",
            "submit_time": 1795331396,
            "tasks": 1,
            "tasks_per_node": 0,
            "time_limit": 5,
            "tres_req_str": "cpu=1,mem=100M,node=1,billing=1",
            "tres_alloc_str": "",
            "user_id": 0,
            "user_name": "root",
            "minimum_cpus_per_node": 1,
            "het_job_id": 0,
        },
        {
            "account": "root",
            "array_job_id": 0,
            "array_task_id": None,
            "batch_flag": True,
            "batch_host": "node01",
            "cpus": 2,
            "current_working_directory": "/tmp/fmtx",
            "dependency": "afterok:594(unfulfilled)",
            "end_time": 1795334996,
            "exit_code": 0,
            "group_id": 0,
            "group_name": "root",
            "job_id": 592,
            "job_state": "RUNNING",
            "memory_per_node": None,
            "memory_per_cpu": None,
            "name": "multi",
            "node_count": 2,
            "nodes": "node[01-02]",
            "partition": "real",
            "start_time": 1795331396,
            "state_reason": "Resources",
            "state_description": "Nodes required for job are DOWN",
            "submit_time": 1795331396,
            "tasks": 2,
            "time_limit": None,
            "tres_per_node": "gres:gpu",
            "user_id": 0,
            "user_name": "root",
            "nice": None,
            "shared": "none",
        },
        {
            "job_id": 600,
            "job_state": "CANCELLED",
            "state_reason": "Nodes busy somewhere",
            "tasks": None,
            "cpus": None,
            "name": "x",
            "user_name": "root",
            "time_limit": 10,
        },
    ],
}


def test_squeue_json_becomes_jobs_and_extras() -> None:
    result = jobs_from_squeue_json(json.dumps(SQUEUE))
    meta, multi, odd = result.jobs
    assert meta.is_array_meta
    assert meta.array_pending is not None
    assert meta.display_id == "593_[3-9%2]"
    assert (meta.state, meta.reason, meta.time_limit) == (
        JobState.PENDING,
        Reason.JOB_ARRAY_TASK_LIMIT,
        5,
    )
    assert meta.spec.mem_per_cpu_mb == 100
    assert meta.spec.stdout == "/tmp/caldera-slurm/jobs/%A_%a.out"
    assert result.extras[593].array_task_str == "3-9%2"
    assert result.extras[593].job_flags == ("JOB_MEM_SET",)
    assert multi.nodes == ("node01", "node02")
    assert multi.time_limit == INFINITE
    assert multi.spec.mem_per_node_mb == 0  # neither per node nor per CPU: pn_min_memory 0
    assert multi.spec.dependency is not None
    assert multi.spec.dependency.display() == "afterok:594(unfulfilled)"
    assert multi.state_desc == "Nodes required for job are DOWN"
    assert result.extras[592].tres_per_node == "gres:gpu"  # kept as slurmctld spelled it
    assert multi.spec.cpus_per_task is None  # 2 CPUs for 2 tasks
    assert odd.reason is Reason.NONE
    assert odd.state_desc == "Nodes busy somewhere"
    assert result.extras[600].reason_text == "Nodes busy somewhere"
    assert result.extras[600].tasks_unknown


def _tres(**counts: int) -> list[dict[str, object]]:
    ids = {"cpu": 1, "mem": 2, "node": 4, "billing": 5}
    return [{"type": k, "name": None, "id": ids[k], "count": v} for k, v in counts.items()]


SACCT = {
    "jobs": [
        {
            "account": "root",
            "allocation_nodes": 0,
            "array": {
                "job_id": 593,
                "limits": {"max": {"running": {"tasks": 2}}},
                "task": "0x3E0",
                "task_id": None,
            },
            "cluster": "caldera",
            "flags": [],
            "group": "root",
            "job_id": 593,
            "name": "arr",
            "nodes": "None assigned",
            "partition": "real",
            "priority": 4294901537,
            "qos": "normal",
            "required": {"CPUs": 1, "memory": 100},
            "state": {"current": "PENDING", "reason": "JobArrayTaskLimit"},
            "time": {
                "elapsed": 0,
                "eligible": None,
                "end": 0,
                "start": 0,
                "submission": 1795331396,
                "limit": 5,
            },
            "tres": {"allocated": [], "requested": _tres(cpu=1, mem=100, node=1, billing=1)},
            "user": "root",
            "working_directory": "/tmp/fmtx",
            "steps": [],
        },
        {
            "account": "root",
            "allocation_nodes": 2,
            "array": {"job_id": 0, "task_id": None},
            "cluster": "caldera",
            "flags": ["CLEAR_SCHEDULING", "STARTED_ON_SCHEDULE"],
            "group": "root",
            "job_id": 591,
            "name": "sleeper",
            "nodes": "node[01-02]",
            "partition": "real",
            "required": {"CPUs": 2, "memory": 100},
            "kill_request_user": "root",
            "state": {"current": "CANCELLED", "reason": "None"},
            "time": {
                "elapsed": 3,
                "eligible": 1795331396,
                "end": 1795331399,
                "start": 1795331396,
                "submission": 1795331396,
                "limit": None,
            },
            "tres": {
                "allocated": [
                    *_tres(cpu=2, mem=200, node=2, billing=2),
                    {"type": "gres", "name": "gpu", "id": 1001, "count": 1},
                ],
                "requested": _tres(cpu=2, mem=200, node=2, billing=2),
            },
            "user": "root",
            "working_directory": "/tmp/fmtx",
            "steps": [
                {
                    "nodes": {"list": ["node01"], "count": 1, "range": "node01"},
                    "tres": {
                        "requested": {"max": [{"type": "mem", "count": 11653120}]},
                        "allocated": _tres(cpu=1, mem=100, node=1),
                    },
                    "time": {"elapsed": 3, "end": 1795331399, "start": 1795331396},
                    "exit_code": {"status": "SIGNALED", "signal": {"signal_id": 15}},
                    "tasks": {"count": 1},
                    "state": "CANCELLED",
                    "step": {"job_id": 591, "id": "batch", "name": "batch"},
                },
                {
                    "nodes": {"range": "node[01-02]"},
                    "tasks": {"count": 2},
                    "state": "COMPLETED",
                    "time": {"start": 1795331396, "end": 1795331399},
                    "exit_code": {"status": "SUCCESS", "return_code": 0},
                    "step": {"job_id": 591, "id": 0, "name": "sleep"},
                },
            ],
        },
        {
            "job_id": 192,
            "nodes": "None assigned",
            "state": {"current": "CANCELLED"},
            "time": {
                "start": None,
                "eligible": 1795331196,
                "limit": None,
                "submission": 1795331196,
            },
            "user": "nobody-here",
            "steps": [],
        },
    ]
}


def test_sacct_json_becomes_records_steps_and_extras() -> None:
    acct = jobs_from_sacct_json(
        SACCT, uid_of=lambda name: 0 if name == "root" else 99, gid_of=lambda name: 0
    )
    meta, sleeper, never = acct.jobs
    assert meta.display_id == "593_[5-9%2]"
    assert meta.eligible_time == INFINITE  # null eligible: never eligible, "Unknown"
    assert meta.time_limit == 5
    assert meta.nodes == ()
    assert sleeper.spec.mem_per_cpu_mb == 100  # 200M requested for 2 CPUs: per CPU
    assert sleeper.time_limit == INFINITE  # null limit of an allocated job
    assert acct.extras[591].requid == 0
    assert acct.extras[591].acct_flags == ("SchedMain", "StartRecieved")
    batch, step0 = acct.steps[591]
    assert (batch.step_id, batch.exit_code, batch.max_rss_kb) == (
        "batch",
        wait_status(0, 15),
        11380,
    )
    assert (step0.step_id, step0.nodes, step0.ntasks) == ("0", ("node01", "node02"), 2)
    assert never.start_time == NO_VAL
    assert never.time_limit == NO_VAL
    assert never.uid == 99
    assert acct.tres_ids["gres/gpu"] == 1001


def test_exit_codes_come_from_sacct_text() -> None:
    text = "595|3:0|0:0\n595.batch|3:0|\n591.batch|0:15|\nbogus\n"
    codes = exit_codes_from_sacct(text)
    assert codes == {"595": (768, 0), "595.batch": (768, 0), "591.batch": (15, 0)}
    acct = jobs_from_sacct_json(
        {
            "jobs": [
                {
                    "job_id": 595,
                    "nodes": "node03",
                    "state": {"current": "FAILED"},
                    "exit_code": {"status": "SUCCESS", "return_code": 0},
                    "time": {"submission": 1, "start": 1, "end": 1},
                    "steps": [],
                }
            ]
        },
        exit_codes=codes,
        uid_of=lambda n: 0,
        gid_of=lambda n: 0,
    )
    assert acct.jobs[0].exit_code == 768


NODES = {
    "nodes": [
        {
            "name": "big001",
            "state": "down",
            "state_flags": ["RESERVED", "NOT_RESPONDING"],
            "cpus": 256,
            "cores": 128,
            "sockets": 2,
            "threads": 1,
            "real_memory": 1000000,
            "features": "gpu,v100",
            "active_features": "gpu,v100",
            "gres": "gpu:v100:8(S:0-1)",
            "cpu_load": 4294967294,
            "free_memory": -2,
            "weight": 100,
            "port": 6898,
            "partitions": ["debug"],
            "reason": "virtual node (no slurmd)",
            "address": "127.0.0.1",
        },
        {
            "name": "node01",
            "state": "idle",
            "state_flags": ["DRAIN"],
            "cpus": 2,
            "cores": 1,
            "sockets": 2,
            "threads": 1,
            "real_memory": 2000,
            "cpu_load": 368,
            "free_memory": 18759,
            "partitions": ["debug"],
        },
    ]
}
PARTITIONS = {
    "partitions": [
        {
            "flags": ["default"],
            "name": "debug",
            "nodes": "big001,node01",
            "state": "UP",
            "max_time_limit": -1,
            "default_time_limit": None,
            "maximum_nodes_per_job": -1,
            "maximum_cpus_per_node": -1,
            "min nodes per job": 0,
            "priority_tier": 1,
            "total_cpus": 258,
            "total_nodes": 2,
            "tres": "cpu=258",
        },
    ]
}


def test_sinfo_json_becomes_a_cluster() -> None:
    sc = cluster_from_sinfo_json(NODES, PARTITIONS, name="caldera")
    big, node01 = sc.cluster.nodes
    assert big.state is NodeState.DOWN
    assert big.gres == (("gpu", "v100", 8),)
    assert sc.node_extras["big001"].cpu_load is None
    assert sc.node_extras["big001"].free_memory is None
    assert node01.state is NodeState.DRAINED
    assert sc.node_extras["node01"].cpu_load == 368
    (debug,) = sc.cluster.partitions
    assert debug.default
    assert debug.max_time == INFINITE
    assert debug.max_nodes is None
    assert debug.nodes == ("big001", "node01")
    assert sc.partition_extras["debug"].tres == "cpu=258"
    inferred = cluster_from_sinfo_json(NODES)
    assert [p.name for p in inferred.cluster.partitions] == ["debug"]
