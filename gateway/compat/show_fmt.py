"""`scontrol show job|node|partition` records in Slurm 22.05's exact layout.

Each record is the sequence of lines `slurm_sprint_job_info`, `slurm_sprint_node_table`
and `slurm_sprint_partition_info` build; lines are joined by "\\n   " (or one space with
`-o`) and a record ends with a blank line (or a newline with `-o`). The request part of a
job (limits, memory, I/O paths, TRES requests) comes from `job_fields.request_fields`; the
rest from the job record, `JobValues` and the extras a backend reported.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from gateway.compat.duration import mins_to_str, secs_to_str
from gateway.compat.filename import NO_TASK
from gateway.compat.fmt_common import (
    JobExtras,
    NodeExtras,
    PartitionExtras,
    hostlist_compress,
    make_time_str,
)
from gateway.compat.job_fields import JobIdentity, SiteDefaults, preempt_line, request_fields
from gateway.compat.job_fmt_values import job_values
from gateway.compat.job_times import own_extras
from gateway.compat.node_fmt_state import BASE, node_state, node_state_string_complete
from gateway.model.cluster import ClusterState, Node, Partition
from gateway.model.job import Job, exit_code_pair
from gateway.model.state import JobState
from gateway.model.suspension import expected_end
from gateway.model.values import INFINITE, NO_VAL

__all__ = ["show_job", "show_jobs", "show_node", "show_nodes", "show_partition", "show_partitions"]

_NULL = "(null)"


# slurm.h: frequency names and governors, flagged by the top bit (cpu_freq_to_string)
_CPU_FREQ_NAMES: Final = {
    0x80000001: "Low",
    0x80000002: "Medium",
    0x80000004: "Highm1",
    0x80000003: "High",
    0x88000000: "Conservative",
    0x82000000: "Performance",
    0x81000000: "PowerSave",
    0x80800000: "UserSpace",
    0x84000000: "OnDemand",
}


def _cpu_freq(value: int) -> str:
    """`cpu_freq_to_string`: a name, "Unknown" for other flagged values, kHz as a number."""
    if value in _CPU_FREQ_NAMES:
        return _CPU_FREQ_NAMES[value]
    return "Unknown" if value & 0x80000000 else str(value)


def _end(lines: list[str], one_liner: bool) -> str:
    sep = " " if one_liner else "\n   "
    return sep.join(lines) + sep + ("\n" if one_liner else "\n\n")


def _opt(value: int | None) -> str:
    return "*" if value is None else str(value)


def _expected_end(job: Job) -> float:
    """A running job's EndTime is when its time limit runs out (slurmctld sets end_time
    at start: start + limit), a planned pending job's is its expected start + limit (as
    slurmctld's backfill sets it); 0 (Unknown) otherwise."""
    started = job.state in (JobState.RUNNING, JobState.SUSPENDED)
    start = job.start_time if started else job.expected_start
    if not (started or job.state is JobState.PENDING) or start is None:
        return 0
    if job.time_limit in (INFINITE, NO_VAL, 0):
        return 0
    if started:  # moved by each resume (the time limit clock stood still meanwhile)
        return expected_end(job, job.time_limit * 60)
    return start + job.time_limit * 60


def _start_end(job: Job) -> tuple[float | None, float]:
    """StartTime and EndTime. A record being requeued is pending to slurmctld, not
    planned yet: Unknown (burst cluster, KillWait; its scheduler may already have tried
    it, and then shows now and now + the limit)."""
    if job.shown_requeued:
        return None, 0
    return job.expected_start, job.end_time or _expected_end(job)


def _eligible_time(job: Job) -> float | None:
    """A pending job with a --begin time is eligible then, held or not (slurmctld sets
    details->begin_time at submission); otherwise when it became eligible."""
    if job.eligible_time is not None:
        return job.eligible_time
    if job.state is JobState.PENDING and job.spec.begin:
        return float(job.spec.begin)
    return None


def show_job(
    job: Job,
    *,
    now: float,
    extras: JobExtras | None = None,
    site: SiteDefaults | None = None,
    one_liner: bool = False,
    details: bool = False,
) -> str:
    """One `scontrol show job` record (`-o`: one line; `-d`: with DerivedExitCode)."""
    site = site or SiteDefaults()
    v = job_values(job, own_extras(job, now) if extras is None else extras, site)
    ex, spec = v.extras, job.spec
    task = job.array_task_id if job.array_task_id is not None else NO_TASK
    req = request_fields(
        spec,
        JobIdentity(job.job_id, job.user, job.account, job.array_job_id, task),
        site,
    )
    lines: list[str] = []
    head = f"JobId={job.job_id} "
    if job.array_job_id:
        if v.array_task_str is not None:
            head += f"ArrayJobId={job.array_job_id} ArrayTaskId={v.array_task_str} "
        else:  # a meta record whose every task was cancelled: NO_VAL, printed raw
            task_id = NO_VAL if job.array_task_id is None else job.array_task_id
            head += f"ArrayJobId={job.array_job_id} ArrayTaskId={task_id} "
        if v.array_max_tasks:
            head += f"ArrayTaskThrottle={v.array_max_tasks} "
    elif ex.het_job_id:
        head += f"HetJobId={ex.het_job_id} HetJobOffset={ex.het_job_offset} "
    lines.append(head + f"JobName={spec.name}")
    if ex.het_job_id_set:
        lines.append(f"HetJobIdSet={ex.het_job_id_set}")
    lines.append(
        f"UserId={job.user}({job.uid}) GroupId={job.group}({job.gid}) "
        f"MCS_label={ex.mcs_label or 'N/A'}"
    )
    lines.append(f"Priority={job.priority} Nice={v.nice} Account={job.account} QOS={job.qos}")
    reason = "".join("_" if c.isspace() else c for c in v.reason)
    lines.append(f"JobState={job.state.long} Reason={reason} Dependency={v.dependency or _NULL}")
    code, sig = exit_code_pair(job.exit_code)
    lines.append(
        f"Requeue={int(v.requeue)} Restarts={v.restarts} "
        f"BatchFlag={int(v.batch_flag)} Reboot=0 ExitCode={code}:{sig}"
    )
    if details:
        lines.append("DerivedExitCode={}:{}".format(*exit_code_pair(job.derived_exit_code)))
    limit = "Partition_Limit" if job.time_limit == NO_VAL else mins_to_str(job.time_limit)
    time_min = mins_to_str(v.time_min) if v.time_min else "N/A"
    lines.append(f"RunTime={secs_to_str(v.time_used(now))} TimeLimit={limit} TimeMin={time_min}")
    lines.append(
        f"SubmitTime={make_time_str(job.submit_time)} "
        f"EligibleTime={make_time_str(_eligible_time(job))}"
    )
    lines.append(f"AccrueTime={make_time_str(ex.accrue_time)}")
    start, end = _start_end(job)
    end_text = "Unknown" if job.time_limit == INFINITE and end > now else make_time_str(end)
    deadline = make_time_str(spec.deadline) if spec.deadline else "N/A"
    lines.append(f"StartTime={make_time_str(start)} EndTime={end_text} Deadline={deadline}")
    lines.extend(preempt_line(job, site))
    sus_at = ex.suspend_time or job.suspend_time
    suspend = make_time_str(sus_at) if sus_at else "None"
    lines.append(
        f"SuspendTime={suspend} SecsPreSuspend={ex.pre_sus_time or job.pre_sus_time} "
        f"LastSchedEval={make_time_str(ex.last_sched_eval)} "
        f"Scheduler={'Backfill' if ex.sched_backfill else 'Main'}"
    )
    alloc_node = ex.alloc_node or job.submit_host
    lines.append(f"Partition={job.partition} AllocNode:Sid={alloc_node}:{ex.alloc_sid or 0}")
    lines.append(f"ReqNodeList={req['ReqNodeList']} ExcNodeList={req['ExcNodeList']}")
    node_line = f"NodeList={v.nodes_str}"
    if sched := ex.sched_nodes or (job.state is JobState.PENDING and job.sched_nodes):
        node_line += f" SchedNodeList={sched}"
    lines.append(node_line)
    if v.batch_host:
        lines.append(f"BatchHost={v.batch_host}")
    if job.viable:  # routed over several clusters: Slurm federation's sibling line
        handed = job.backend_id or job.state is not JobState.PENDING
        active = job.cluster if handed else (job.routed_to or "")
        lines.append(
            f"FedOrigin={job.origin or '(null)'} FedViableSiblings={job.viable} "
            f"FedActiveSiblings={active or '(null)'}"
        )
    if job.state is JobState.PENDING:
        lo, hi = v.num_nodes, v.max_nodes
        if hi and hi < lo:
            lo = hi
    else:
        lo, hi = v.num_nodes, 0
    nodes = f"{lo}-{hi}" if hi else str(lo)
    tasks = "N/A" if ex.tasks_unknown else str(v.num_tasks)
    lines.append(
        f"NumNodes={nodes} NumCPUs={v.num_cpus} NumTasks={tasks} "
        f"CPUs/Task={v.cpus_per_task} ReqB:S:C:T=0:0:{_opt(spec.cores_per_socket)}:"
        f"{_opt(spec.threads_per_core)}"
    )
    lines.append(f"TRES={v.tres_alloc or v.tres_req}")
    lines.append(
        f"Socks/Node={_opt(spec.sockets_per_node)} "
        f"NtasksPerN:B:S:C={spec.ntasks_per_node or 0}:0:{_opt(spec.ntasks_per_socket)}:"
        f"{_opt(spec.ntasks_per_core)} CoreSpec=*"
    )
    mb, per_cpu = v.memory
    mem_key = "MinMemoryCPU" if per_cpu else "MinMemoryNode"
    lines.append(
        f"MinCPUsNode={v.min_cpus_node} {mem_key}={v.min_memory_str} "
        f"MinTmpDiskNode={v.tmp_disk_str}"
    )
    del mb
    lines.append(f"Features={req['Features']} DelayBoot={secs_to_str(ex.delay_boot)}")
    if spec.reservation:
        lines.append(f"Reservation={spec.reservation}")
    lines.append(
        f"OverSubscribe={v.shared} Contiguous={int(spec.contiguous)} "
        f"Licenses={req['Licenses']} Network=(null)"
    )
    lines.append(f"Command={v.command or _NULL}")
    tail = [f"WorkDir={spec.workdir}"]
    if spec.comment is not None:
        tail.append(f"Comment={spec.comment} ")
    if v.batch_flag:
        tail.append(f"StdErr={v.stderr}")
        tail.append(f"StdIn={v.stdin}")
        tail.append(f"StdOut={v.stdout}")
    if "Switches" in req:
        tail.append(f"Switches={req['Switches']}")
    if any(f is not None for f in ex.cpu_freq):  # the parts that are set, as Slurm spaces them
        low, high, gov = ex.cpu_freq
        tail.append(
            (f"CPU_min_freq={_cpu_freq(low)} " if low is not None else "")
            + (f"CPU_max_freq={_cpu_freq(high)} " if high is not None else "")
            + (f"Governor={_cpu_freq(gov)}" if gov is not None else "")
        )
    tail.append("Power=")
    flags = ""  # one line of flags, printed without a separator (job_info.c, line 38)
    if spec.kill_on_invalid_dep is not None:
        flags += f"KillOInInvalidDependent={'Yes' if spec.kill_on_invalid_dep else 'No'}"
    if spec.spread_job:
        flags += "SpreadJob=Yes"
    if flags:
        tail.append(flags)
    if ex.cpus_per_tres or spec.cpus_per_gpu is not None:
        tail.append(f"CpusPerTres={ex.cpus_per_tres or f'gres:gpu:{spec.cpus_per_gpu}'}")
    if v.mem_per_tres:
        tail.append(f"MemPerTres={v.mem_per_tres}")
    if ex.tres_bind:
        tail.append(f"TresBind={ex.tres_bind}")
    for key, value in (
        ("TresPerJob", v.tres_per_job),
        ("TresPerNode", v.tres_per_node),
        ("TresPerSocket", v.tres_per_socket),
        ("TresPerTask", v.tres_per_task),
    ):
        if value:
            tail.append(f"{key}={value}")
    if "MailUser" in req:
        tail.append(f"MailUser={req['MailUser']} MailType={req['MailType']}")
    if spec.container:
        tail.append(f"Container={spec.container}")
    if job.route_note:  # Caldera's own: the last routing decision and what it compared
        tail.append(f"Routing={job.route_note}")
    return _end(lines + tail, one_liner)


def show_jobs(
    jobs: Sequence[Job],
    *,
    now: float,
    extras: Mapping[int, JobExtras] | None = None,
    site: SiteDefaults | None = None,
    one_liner: bool = False,
) -> str:
    """`scontrol show job` for several records, in the given order."""
    return "".join(
        show_job(j, now=now, extras=(extras or {}).get(j.job_id), site=site, one_liner=one_liner)
        for j in jobs
    )


# --- nodes ----------------------------------------------------------------------------


def _cores(node: Node) -> int:
    if node.cores_per_socket:
        return node.cores_per_socket
    return max(node.cpus // max(node.sockets, 1) // max(node.threads_per_core, 1), 1)


def show_node(
    node: Node,
    *,
    extras: NodeExtras | None = None,
    partitions: Sequence[str] | None = None,
    slurmd_port: int = 6818,
    one_liner: bool = False,
    details: bool = False,
) -> str:
    """One `scontrol show node` record (`details`: `scontrol -d`'s GRES lines too)."""
    ex = extras or NodeExtras()
    state = node_state(node, ex)
    idle = node.cpus - ex.alloc_cpus
    if idle and idle != node.cpus:
        state = (state & ~0xF) | BASE["MIXED"]
    head = f"NodeName={node.name} "
    if ex.arch:
        head += f"Arch={ex.arch} "
    lines = [head + f"CoresPerSocket={_cores(node)} "]
    load = "N/A" if ex.cpu_load is None else f"{ex.cpu_load / 100:.2f}"
    lines.append(f"CPUAlloc={ex.alloc_cpus} CPUEfctv={node.cpus} CPUTot={node.cpus} CPULoad={load}")
    features = ",".join(node.features) or _NULL
    active = ",".join(ex.active_features) if ex.active_features is not None else features
    lines.append(f"AvailableFeatures={features}")
    lines.append(f"ActiveFeatures={active or _NULL}")
    gres = ",".join(f"{n}:{t}:{c}" if t else f"{n}:{c}" for n, t, c in node.gres)
    lines.append(f"Gres={gres or _NULL}")
    if details:  # slurmctld packs these for SHOW_DETAIL only (node_info.c)
        lines.append("GresDrain=N/A")
        if ex.gres_used:
            lines.append(f"GresUsed={ex.gres_used}")
    addr = f"NodeAddr={ex.address or node.name} NodeHostName={ex.hostname or node.name} "
    if ex.port and ex.port != slurmd_port:
        addr += f"Port={ex.port} "
    if ex.version:
        addr += f"Version={ex.version}"
    lines.append(addr)
    if ex.os:
        lines.append(f"OS={ex.os} ")
    free = "N/A" if ex.free_memory is None else str(ex.free_memory)
    lines.append(
        f"RealMemory={node.memory_mb} AllocMem={ex.alloc_memory} FreeMem={free} "
        f"Sockets={node.sockets} Boards={ex.boards}"
    )
    owner = ex.owner or "N/A"
    lines.append(
        f"State={node_state_string_complete(state)} ThreadsPerCore={node.threads_per_core} "
        f"TmpDisk={node.tmp_disk_mb} Weight={ex.weight} Owner={owner} "
        f"MCS_label={ex.mcs_label or 'N/A'}"
    )
    parts = list(partitions) if partitions is not None else list(node.partitions)
    if parts:
        lines.append(f"Partitions={','.join(parts)} ")
    boot = f"BootTime={make_time_str(ex.boot_time)} " if ex.boot_time else "BootTime=None "
    start = (
        f"SlurmdStartTime={make_time_str(ex.slurmd_start_time)}"
        if ex.slurmd_start_time
        else "SlurmdStartTime=None"
    )
    lines.append(boot + start)
    lines.append(f"LastBusyTime={make_time_str(ex.last_busy)}")
    tres = ex.tres or f"cpu={node.cpus},mem={node.memory_mb}M,billing={node.cpus}"
    lines.append(f"CfgTRES={tres}")
    lines.append(f"AllocTRES={ex.tres_used or ''}")
    lines.append("CapWatts=n/a")
    lines.append("CurrentWatts=0 AveWatts=0")
    lines.append("ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s")
    if node.reason:
        for i, part in enumerate(node.reason.split("\n")):
            text = ("Reason=" if i == 0 else "       ") + part
            if i == 0 and ex.reason_time:
                text += f" [{ex.reason_user or ex.reason_uid}@{make_time_str(ex.reason_time)}]"
            lines.append(text)
    if ex.comment:
        lines.append(f"Comment={ex.comment}")
    if ex.extra:
        lines.append(f"Extra={ex.extra}")
    sep = " " if one_liner else "\n   "
    return sep.join(lines) + ("\n" if one_liner else "\n\n")


def show_nodes(
    cluster: ClusterState,
    *,
    node_extras: Mapping[str, NodeExtras] | None = None,
    slurmd_port: int = 6818,
    one_liner: bool = False,
) -> str:
    """`scontrol show node` for every node, in the cluster's node order."""
    nex = node_extras or {}
    out: list[str] = []
    for node in cluster.nodes:
        parts = node.partitions or tuple(p.name for p in cluster.partitions if node.name in p.nodes)
        out.append(
            show_node(
                node,
                extras=nex.get(node.name),
                partitions=parts,
                slurmd_port=slurmd_port,
                one_liner=one_liner,
            )
        )
    return "".join(out)


# --- partitions -----------------------------------------------------------------------


def show_partition(
    part: Partition,
    cluster: ClusterState | None = None,
    *,
    extras: PartitionExtras | None = None,
    one_liner: bool = False,
) -> str:
    """One `scontrol show partition` record."""
    ex = extras or PartitionExtras()
    lines = [f"PartitionName={part.name}"]
    lines.append(
        f"AllowGroups={ex.allow_groups or 'ALL'} AllowAccounts={ex.allow_accounts or 'ALL'} "
        f"AllowQos={ex.allow_qos or 'ALL'}"
    )
    lines.append(
        f"AllocNodes={ex.allow_alloc_nodes or 'ALL'} Default={'YES' if part.default else 'NO'} "
        f"QoS={ex.qos or 'N/A'}"
    )
    if part.default_time is None:
        default_time = "NONE"
    elif part.default_time == INFINITE:
        default_time = "UNLIMITED"
    else:
        default_time = secs_to_str(part.default_time * 60)

    def yes(flag: bool) -> str:
        return "YES" if flag else "NO"

    lines.append(
        f"DefaultTime={default_time} DisableRootJobs={yes(ex.disable_root_jobs)} "
        f"ExclusiveUser={yes(ex.exclusive_user)} GraceTime={ex.grace_time} "
        f"Hidden={yes(ex.hidden)}"
    )
    max_nodes = "UNLIMITED" if part.max_nodes in (None, INFINITE) else str(part.max_nodes)
    max_time = "UNLIMITED" if part.max_time == INFINITE else secs_to_str(part.max_time * 60)
    max_cpus = "UNLIMITED" if ex.max_cpus_per_node == INFINITE else str(ex.max_cpus_per_node)
    lines.append(
        f"MaxNodes={max_nodes} MaxTime={max_time} MinNodes={ex.min_nodes} "
        f"LLN={yes(ex.lln)} MaxCPUsPerNode={max_cpus}"
    )
    lines.append(f"Nodes={hostlist_compress(part.nodes) or _NULL}")
    share = ex.max_share & ~0x8000
    if share == 0:
        over = "EXCLUSIVE"
    elif ex.max_share & 0x8000:
        over = f"FORCE:{share}"
    else:
        over = "NO" if share == 1 else f"YES:{share}"
    lines.append(
        f"PriorityJobFactor={ex.priority_job_factor} PriorityTier={ex.priority_tier} "
        f"RootOnly={yes(ex.root_only)} ReqResv={yes(ex.req_resv)} OverSubscribe={over}"
    )
    over_time = (
        "NONE"
        if ex.over_time_limit is None
        else ("UNLIMITED" if ex.over_time_limit == INFINITE else str(ex.over_time_limit))
    )
    lines.append(f"OverTimeLimit={over_time} PreemptMode={ex.preempt_mode}")
    members = [n for n in (cluster.nodes if cluster else ()) if n.name in set(part.nodes)]
    cpus = ex.total_cpus if ex.total_cpus is not None else sum(n.cpus for n in members)
    count = ex.total_nodes if ex.total_nodes is not None else len(part.nodes)
    state = ex.state or ("UP" if part.up else "DOWN")
    lines.append(f"State={state} TotalCPUs={cpus} TotalNodes={count} SelectTypeParameters=NONE")
    lines.append("JobDefaults=(null)")
    if ex.def_mem_per_cpu is not None:
        def_mem = f"DefMemPerCPU={ex.def_mem_per_cpu}"
    elif ex.def_mem_per_node is not None:
        def_mem = f"DefMemPerNode={ex.def_mem_per_node}"
    else:
        def_mem = "DefMemPerNode=UNLIMITED"
    max_mem = (
        f"MaxMemPerNode={ex.max_mem_per_node}"
        if ex.max_mem_per_node is not None
        else "MaxMemPerNode=UNLIMITED"
    )
    lines.append(f"{def_mem} {max_mem}")
    mem = sum(n.memory_mb for n in members)
    lines.append(f"TRES={ex.tres or f'cpu={cpus},mem={mem}M,node={count},billing={cpus}'}")
    sep = " " if one_liner else "\n   "
    return sep.join(lines) + ("\n" if one_liner else "\n\n")


def show_partitions(
    cluster: ClusterState,
    *,
    partition_extras: Mapping[str, PartitionExtras] | None = None,
    one_liner: bool = False,
) -> str:
    """`scontrol show partition` for every partition, in the cluster's order."""
    pexs = partition_extras or {}
    return "".join(
        show_partition(p, cluster, extras=pexs.get(p.name), one_liner=one_liner)
        for p in cluster.partitions
    )
