"""sacct's views of fixed records; expected texts are real sacct 22.05 output for the same
jobs 47 seconds after submission (see test_fmt_records)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from gateway.compat.fmt_common import JobExtras
from gateway.compat.sacct_fmt import (
    SACCT_FIELDS,
    SacctFieldError,
    SacctOptions,
    parse_sacct_fields,
    render_sacct,
    sacct_order,
)
from gateway.compat.sacct_fmt_json import sacct_json
from gateway.model.job import Job, Step
from tests.unit.test_fmt_records import SITE, T0, accounting, utc

__all__ = ["utc"]

NOW = float(T0 + 47)


def records() -> tuple[list[Job], dict[int, tuple[Step, ...]], dict[int, JobExtras]]:
    jobs, steps, extras = accounting()
    running = {592, 597, 598}
    jobs = [replace(j, end_time=None) if j.job_id in running else j for j in jobs]
    # slurmdbd keeps the job's own exit code (0 for 591, whose batch step died of
    # SIGTERM) and the reason the job had before it ran ("None" for the failed 595)
    jobs[0] = replace(jobs[0], exit_code=0)
    extras[593] = replace(extras[593], reason_prev="None")
    extras[595] = replace(extras[595], reason_prev="None")
    return jobs, steps, extras


def sacct(**kw: Any) -> str:
    jobs, steps, extras = records()
    return render_sacct(
        jobs,
        steps,
        SacctOptions(site=SITE, **kw),
        now=NOW,
        extras=extras,
    )


def test_default_columns() -> None:
    assert sacct() == (
        "JobID           JobName  Partition    Account  AllocCPUS      State ExitCode \n"
        "------------ ---------- ---------- ---------- ---------- ---------- -------- \n"
        "591             sleeper       real       root          1 CANCELLED+      0:0 \n"
        "591.batch         batch                  root          1  CANCELLED     0:15 \n"
        "592               multi       real       root          2    RUNNING      0:0 \n"
        "592.batch         batch                  root          1    RUNNING      0:0 \n"
        "592.0             sleep                  root          2    RUNNING      0:0 \n"
        "594                held      debug       root          1    PENDING      0:0 \n"
        "595                fail       real       root          1     FAILED      3:0 \n"
        "595.batch         batch                  root          1     FAILED      3:0 \n"
        "596                  ok       real       root          1  COMPLETED      0:0 \n"
        "596.batch         batch                  root          1  COMPLETED      0:0 \n"
        "593_1               arr       real       root          1    RUNNING      0:0 \n"
        "593_1.batch       batch                  root          1    RUNNING      0:0 \n"
        "593_2               arr       real       root          1    RUNNING      0:0 \n"
        "593_2.batch       batch                  root          1    RUNNING      0:0 \n"
        "593_[3-9%2]         arr       real       root          1    PENDING      0:0 \n"
    )


def test_allocations_only() -> None:
    lines = sacct(allocations=True).splitlines()
    assert [ln.split()[0] for ln in lines[2:]] == [
        "591",
        "592",
        "594",
        "595",
        "596",
        "593_1",
        "593_2",
        "593_[3-9%2]",
    ]


FIELDS = (
    "JobID,JobIDRaw,JobName,State,ExitCode,Elapsed,Start,End,Submit,NNodes,NodeList,User,UID,"
    "Group,ReqMem,MaxRSS,Timelimit,DerivedExitCode,Reason,AllocCPUS,NTasks,ReqCPUS,QOS,"
    "Priority,Cluster,WorkDir,AllocTRES,ReqTRES,Eligible,Flags,CPUTime,CPUTimeRAW,ElapsedRaw,"
    "TimelimitRaw,GID,Reserved"
)
T = "2026-11-22T07:09:56"
ONE = "billing=1,cpu=1,mem=100M,node=1"


def test_parsable2_many_fields() -> None:
    lines = sacct(parsable2=True, fields=FIELDS).splitlines()
    assert lines[0] == FIELDS.replace(",", "|")
    assert lines[1] == (
        f"591|591|sleeper|CANCELLED by 0|0:0|00:00:03|{T}|2026-11-22T07:09:59|{T}|1|node01|root|0|"
        f"root|100M||00:30:00|0:0|None|1||1|normal|4294901539|caldera|/tmp/fmtx|{ONE}|{ONE}|{T}|"
        "SchedMain,StartRecieved|00:00:03|3|3|30|0|00:00:00"
    )
    assert lines[2] == (
        f"591.batch|591.batch|batch|CANCELLED|0:15|00:00:03|{T}|2026-11-22T07:09:59|{T}|1|node01|"
        f"||||||||1|1|1|||caldera||cpu=1,mem=100M,node=1||{T}||00:00:03|3|3|||"
    )
    assert lines[3] == (
        f"592|592|multi|RUNNING|0:0|00:00:47|{T}|Unknown|{T}|2|node[01-02]|root|0|root|200M||"
        "01:00:00|0:0|None|2||2|normal|4294901538|caldera|/tmp/fmtx|"
        f"billing=2,cpu=2,mem=200M,node=2|billing=2,cpu=2,mem=200M,node=2|{T}|"
        "SchedMain,StartRecieved|00:01:34|94|47|60|0|00:00:00"
    )
    assert lines[5] == (
        f"592.0|592.0|sleep|RUNNING|0:0|00:00:47|{T}|Unknown|{T}|2|node[01-02]|||||||||2|2|2|||"
        f"caldera||cpu=2,mem=200M,node=2||{T}||00:01:34|94|47|||"
    )
    assert lines[6] == (
        f"594|594|held|PENDING|0:0|00:00:00|Unknown|Unknown|{T}|1|None assigned|root|0|root|500M||"
        "Partition_Limit|0:0|JobHeldUser|1||1|normal|0|caldera|/tmp/fmtx||"
        "billing=1,cpu=1,mem=500M,node=1|Unknown|StartRecieved|00:00:00|0|0|Partition_Limit|0|"
        "00:00:00"
    )
    assert lines[7] == (
        f"595|595|fail|FAILED|3:0|00:00:00|{T}|{T}|{T}|1|node03|root|0|root|100M||UNLIMITED|0:0|"
        f"None|1||1|normal|4294901536|caldera|/tmp/fmtx|{ONE}|{ONE}|{T}|SchedMain,StartRecieved|"
        "00:00:00|0|0|UNLIMITED|0|00:00:00"
    )
    assert lines[-1] == (
        f"593_[3-9%2]|593|arr|PENDING|0:0|00:00:00|Unknown|Unknown|{T}|1|None assigned|root|0|"
        "root|100M||00:05:00|0:0|None|1||1|normal|4294901537|caldera|/tmp/fmtx||"
        f"{ONE}|Unknown|StartRecieved|00:00:00|0|0|5|0|00:00:00"
    )


def test_parsable_ends_every_field_with_a_bar() -> None:
    lines = sacct(parsable=True, noheader=True).splitlines()
    assert lines[0] == "591|sleeper|real|root|1|CANCELLED by 0|0:0|"
    assert lines[1] == "591.batch|batch||root|1|CANCELLED|0:15|"


def test_widths_cut_with_a_plus_and_never_cut_numbers() -> None:
    text = sacct(
        fields="jobid%5,jobname%-20,state%3,start%10,nodelist%.10,end%25,elapsed%4,alloccpus%-3"
    )
    lines = text.splitlines()
    assert lines[:5] == [
        "JobID JobName              Sta      Start                        End Elap All ",
        "----- -------------------- --- ----------  ------------------------- ---- --- ",
        "  591 sleeper              CA+ 2026-11-22        2026-11-22T07:09:59 00:00:03 1   ",
        "591.+ batch                CA+ 2026-11-22        2026-11-22T07:09:59 00:00:03 1   ",
        "  592 multi                RU+ 2026-11-22                    Unknown 00:00:47 2   ",
    ]
    assert (
        "  594 held                 PE+    Unknown                    Unknown 00:00:00 1   "
        in lines
    )


def test_fields_are_matched_by_prefix_in_table_order() -> None:
    assert [f.name for f, _ in parse_sacct_fields("jobid,end,state,user,nn")] == [
        "JobID",
        "End",
        "State",
        "User",
        "NNodes",
    ]
    assert [w for _, w in parse_sacct_fields("jobid%20,jobname%-5")] == [20, -5]
    assert len(parse_sacct_fields("ALL")) == len(SACCT_FIELDS)
    with pytest.raises(SacctFieldError, match='Invalid field requested: "bogus"'):
        parse_sacct_fields("bogus")


def test_order_is_submit_then_array_then_id() -> None:
    jobs, _, _ = records()
    assert [j.job_id for j in sacct_order(jobs[::-1])] == [
        591,
        592,
        594,
        595,
        596,
        597,
        598,
        593,
    ]


def test_json_keeps_dbv0_0_38_layout_and_its_exit_codes() -> None:
    jobs, steps, extras = records()
    doc = json.loads(sacct_json(jobs, steps, now=NOW, extras=extras))
    assert doc["meta"]["plugin"] == {
        "type": "openapi/dbv0.0.38",
        "name": "Slurm OpenAPI DB v0.0.38",
    }
    assert [j["job_id"] for j in doc["jobs"]] == [591, 592, 593, 594, 595, 596, 597, 598]
    failed = next(j for j in doc["jobs"] if j["job_id"] == 595)
    assert failed["exit_code"] == {"status": "SUCCESS", "return_code": 0}  # as 22.05 prints
    assert failed["state"] == {"current": "FAILED", "reason": "None"}
    cancelled_step = doc["jobs"][0]["steps"][0]
    assert cancelled_step["exit_code"] == {
        "status": "SIGNALED",
        "return_code": None,
        "signal": {"signal_id": 15, "name": "Terminated"},
    }
    assert cancelled_step["step"] == {
        "job_id": 591,
        "het": {"component": None},
        "id": "batch",
        "name": "batch",
    }
    meta = next(j for j in doc["jobs"] if j["job_id"] == 593)
    assert meta["array"] == {
        "job_id": 593,
        "limits": {"max": {"running": {"tasks": 2}}},
        "task": "0x3F8",
        "task_id": None,
    }
    assert meta["nodes"] == "None assigned"
    fixed = json.loads(sacct_json(jobs, steps, now=NOW, extras=extras, faithful_exit_codes=False))
    assert next(j for j in fixed["jobs"] if j["job_id"] == 595)["exit_code"] == {
        "status": "FAILED",
        "return_code": 3,
    }
