"""`scontrol show job|node|partition` of fixed records; every expected text is real
scontrol 22.05 output for the same job, node or partition (see test_fmt_records)."""

from __future__ import annotations

from dataclasses import replace

from gateway.compat.fmt_common import PartitionExtras
from gateway.compat.show_fmt import show_job, show_jobs, show_node, show_partition
from gateway.model.job import Job
from tests.unit.test_fmt_records import SITE, SQUEUE_EXTRAS, T0, cluster, running_jobs, utc

__all__ = ["utc"]


def _job(job_id: int) -> Job:
    return next(j for j in running_jobs() if j.job_id == job_id)


def test_running_job_record() -> None:
    text = show_job(_job(592), now=float(T0 + 73), extras=SQUEUE_EXTRAS[592], site=SITE)
    assert text == (
        "JobId=592 JobName=multi\n"
        "   UserId=root(0) GroupId=root(0) MCS_label=N/A\n"
        "   Priority=4294901538 Nice=0 Account=root QOS=normal\n"
        "   JobState=RUNNING Reason=None Dependency=(null)\n"
        "   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0\n"
        "   RunTime=00:01:13 TimeLimit=01:00:00 TimeMin=N/A\n"
        "   SubmitTime=2026-11-22T07:09:56 EligibleTime=2026-11-22T07:09:56\n"
        "   AccrueTime=2026-11-22T07:09:56\n"
        "   StartTime=2026-11-22T07:09:56 EndTime=2026-11-22T08:09:56 Deadline=N/A\n"
        "   SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-11-22T07:09:56 Scheduler=Main\n"
        "   Partition=real AllocNode:Sid=localhost:17056\n"
        "   ReqNodeList=(null) ExcNodeList=(null)\n"
        "   NodeList=node[01-02]\n"
        "   BatchHost=node01\n"
        "   NumNodes=2 NumCPUs=2 NumTasks=2 CPUs/Task=1 ReqB:S:C:T=0:0:*:*\n"
        "   TRES=cpu=2,mem=200M,node=2,billing=2\n"
        "   Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*\n"
        "   MinCPUsNode=1 MinMemoryCPU=100M MinTmpDiskNode=0\n"
        "   Features=(null) DelayBoot=00:00:00\n"
        "   OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null)\n"
        "   Command=(null)\n"
        "   WorkDir=/tmp/fmtx\n"
        "   StdErr=/tmp/caldera-slurm/jobs/592.out\n"
        "   StdIn=/dev/null\n"
        "   StdOut=/tmp/caldera-slurm/jobs/592.out\n"
        "   Power=\n"
        "   \n"
        "\n"
    )


def test_pending_array_record_head_and_paths() -> None:
    text = show_job(_job(593), now=float(T0 + 73), extras=SQUEUE_EXTRAS[593], site=SITE)
    lines = text.splitlines()
    assert lines[0] == "JobId=593 ArrayJobId=593 ArrayTaskId=3-9%2 ArrayTaskThrottle=2 JobName=arr"
    assert lines[3] == "   JobState=PENDING Reason=JobArrayTaskLimit Dependency=(null)"
    assert lines[6] == "   SubmitTime=2026-11-22T07:09:56 EligibleTime=Unknown"
    assert lines[8] == "   StartTime=Unknown EndTime=Unknown Deadline=N/A"
    assert "   NodeList=" in lines
    assert "   StdErr=/tmp/caldera-slurm/jobs/593_4294967294.out" in lines
    task = show_job(_job(598), now=float(T0 + 73), extras=SQUEUE_EXTRAS[598], site=SITE)
    assert task.startswith(
        "JobId=598 ArrayJobId=593 ArrayTaskId=2 ArrayTaskThrottle=2 JobName=arr\n"
    )
    assert "   StdOut=/tmp/caldera-slurm/jobs/593_2.out\n" in task


def test_one_liner() -> None:
    text = show_job(
        _job(594), now=float(T0 + 73), extras=SQUEUE_EXTRAS[594], site=SITE, one_liner=True
    )
    assert text == (
        "JobId=594 JobName=held UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=0 Nice=0"
        " Account=root QOS=normal JobState=PENDING Reason=JobHeldUser Dependency=(null)"
        " Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:00"
        " TimeLimit=UNLIMITED TimeMin=N/A SubmitTime=2026-11-22T07:09:56 EligibleTime=Unknown"
        " AccrueTime=Unknown StartTime=Unknown EndTime=Unknown Deadline=N/A SuspendTime=None"
        " SecsPreSuspend=0 LastSchedEval=2026-11-22T07:09:56 Scheduler=Main Partition=debug"
        " AllocNode:Sid=localhost:17056 ReqNodeList=(null) ExcNodeList=(null) NodeList="
        " NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:*"
        " TRES=cpu=1,mem=500M,node=1,billing=1 Socks/Node=* NtasksPerN:B:S:C=0:0:*:*"
        " CoreSpec=* MinCPUsNode=1 MinMemoryNode=500M MinTmpDiskNode=0 Features=(null)"
        " DelayBoot=00:00:00 OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null)"
        " Command=(null) WorkDir=/tmp/fmtx StdErr=/tmp/fmtx/slurm-594.out StdIn=/dev/null"
        " StdOut=/tmp/fmtx/slurm-594.out Power= \n"
    )


def test_details_add_the_derived_exit_code_after_the_exit_code() -> None:
    """`scontrol show job -d` (job_info.c's line 5a): `DerivedExitCode=` (the highest step
    exit code, or the signal) after ExitCode, in every state; absent without -d."""
    job = replace(_job(594), derived_exit_code=3 << 8)
    plain = show_job(job, now=float(T0 + 73), extras=SQUEUE_EXTRAS[594], site=SITE)
    detailed = show_job(job, now=float(T0 + 73), extras=SQUEUE_EXTRAS[594], site=SITE, details=True)
    assert "DerivedExitCode" not in plain
    lines = detailed.splitlines()
    at = next(i for i, line in enumerate(lines) if "ExitCode=0:0" in line)
    assert lines[at + 1] == "   DerivedExitCode=3:0"
    assert [line for line in lines if "DerivedExitCode" not in line] == plain.splitlines()
    signalled = replace(job, derived_exit_code=9)
    assert "   DerivedExitCode=0:9\n" in show_job(signalled, now=float(T0), details=True)


def test_several_records_keep_their_order() -> None:
    jobs = [_job(594), _job(591)]
    text = show_jobs(jobs, now=float(T0 + 3), extras=SQUEUE_EXTRAS, site=SITE)
    assert [r.split()[0] for r in text.split("\n\n") if r] == ["JobId=594", "JobId=591"]


def test_node_record() -> None:
    state, nex, _ = cluster()
    big = next(n for n in state.nodes if n.name == "big001")
    assert show_node(big, extras=nex["big001"]) == (
        "NodeName=big001 CoresPerSocket=128 \n"
        "   CPUAlloc=0 CPUEfctv=256 CPUTot=256 CPULoad=N/A\n"
        "   AvailableFeatures=gpu,v100,v100-32g\n"
        "   ActiveFeatures=gpu,v100,v100-32g\n"
        "   Gres=gpu:v100:8\n"
        "   NodeAddr=127.0.0.1 NodeHostName=big001 Port=6898 \n"
        "   RealMemory=1000000 AllocMem=0 FreeMem=N/A Sockets=2 Boards=1\n"
        "   State=DOWN+RESERVED+NOT_RESPONDING ThreadsPerCore=1 TmpDisk=0 Weight=100 Owner=N/A"
        " MCS_label=N/A\n"
        "   Partitions=debug,xyz-cluster \n"
        "   BootTime=None SlurmdStartTime=None\n"
        "   LastBusyTime=2026-11-22T07:05:55\n"
        "   CfgTRES=cpu=256,mem=1000000M,billing=256,gres/gpu=8,gres/gpu:v100=8\n"
        "   AllocTRES=\n"
        "   CapWatts=n/a\n"
        "   CurrentWatts=0 AveWatts=0\n"
        "   ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s\n"
        "   Reason=virtual node (no slurmd)\n"
        "\n"
    )


def test_partition_record() -> None:
    state, _, _ = cluster()
    real = state.partition("real")
    assert real is not None
    tres = "cpu=8,mem=8000M,node=4,billing=8,gres/gpu=6,gres/gpu:a100=4,license/cscratch1=1000"
    assert show_partition(real, state, extras=PartitionExtras(state="UP", tres=tres)) == (
        "PartitionName=real\n"
        "   AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL\n"
        "   AllocNodes=ALL Default=NO QoS=N/A\n"
        "   DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO\n"
        "   MaxNodes=UNLIMITED MaxTime=UNLIMITED MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED\n"
        "   Nodes=node[01-04]\n"
        "   PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO\n"
        "   OverTimeLimit=NONE PreemptMode=OFF\n"
        "   State=UP TotalCPUs=8 TotalNodes=4 SelectTypeParameters=NONE\n"
        "   JobDefaults=(null)\n"
        "   DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED\n"
        f"   TRES={tres}\n"
        "\n"
    )
