"""QOS and association limits as pending reasons (Slurm's acct_policy.c, enforce=limits):
a job over a limit stays pending with Slurm's reason (QOSMaxJobsPerUserLimit,
AssocGrpCpuLimit, ...) instead of being refused, and starts once it fits.

Checked in Slurm's order: the job's QOS (GrpJobs, MaxWall, MaxJobsPerUser, then GrpTRES,
MaxTRESPerJob, MaxTRESPerUser), then its association and every ancestor (GrpJobs; MaxJobs
and MaxWall of the user's association, inherited down the tree; then GrpTRES up the tree,
MaxTRES per job). TRES counted: cpu, node, mem (MiB).

`LimitGate` is the scheduler's gate: queried in queue order within a cycle, it counts the
running jobs of the snapshot plus the jobs it let through earlier in the same cycle, so a
cycle never starts more than a limit allows. (A job let through that then does not start
for lack of resources still counts for that cycle: slurmctld's main loop would not start a
lower-priority job in its place either, though its backfill might.)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from gateway.model.job import Job
from gateway.model.state import Reason
from gateway.model.values import INFINITE
from gateway.policy.jobs import assoc_index, assoc_of, job_size
from gateway.policy.model import Assoc, PolicyState
from gateway.scheduler.plugins import OK, Code, Status
from gateway.scheduler.snapshot import Snapshot

__all__ = ["LimitGate", "Usage", "has_limits", "limit_reason"]

_QOS_GRP = {"cpu": Reason.QOS_GRP_CPU_LIMIT, "node": Reason.QOS_GRP_NODE_LIMIT,
            "mem": Reason.QOS_GRP_MEM_LIMIT}  # fmt: skip
_QOS_PJ = {"cpu": Reason.QOS_MAX_CPU_PER_JOB_LIMIT, "node": Reason.QOS_MAX_NODE_PER_JOB_LIMIT}
_QOS_PU = {"cpu": Reason.QOS_MAX_CPU_PER_USER_LIMIT, "node": Reason.QOS_MAX_NODE_PER_USER_LIMIT}
_ASSOC_GRP = {"cpu": Reason.ASSOC_GRP_CPU_LIMIT, "node": Reason.ASSOC_GRP_NODE_LIMIT,
              "mem": Reason.ASSOC_GRP_MEM_LIMIT}  # fmt: skip
_ASSOC_PJ = {"cpu": Reason.ASSOC_MAX_CPU_PER_JOB_LIMIT, "node": Reason.ASSOC_MAX_NODE_PER_JOB_LIMIT}


def _tres(job: Job) -> dict[str, int]:
    nodes, cpus = job_size(job)
    spec = job.spec
    mem = spec.mem_per_node_mb * nodes if spec.mem_per_node_mb else 0
    if not mem and spec.mem_per_cpu_mb:
        mem = spec.mem_per_cpu_mb * cpus
    return {"cpu": cpus, "node": nodes, "mem": mem}


@dataclass
class Usage:
    """What running (and already admitted) jobs hold, by QOS, user and association."""

    qos_jobs: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    qos_tres: dict[str, dict[str, int]] = field(default_factory=lambda: defaultdict(dict))
    qos_user_jobs: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    qos_user_tres: dict[tuple[str, str], dict[str, int]] = field(
        default_factory=lambda: defaultdict(dict)
    )
    assoc_jobs: dict[int, int] = field(default_factory=lambda: defaultdict(int))  # subtree
    assoc_tres: dict[int, dict[str, int]] = field(default_factory=lambda: defaultdict(dict))
    user_jobs: dict[int, int] = field(default_factory=lambda: defaultdict(int))  # own assoc
    # inherited Max* values per (lineage, attribute), found once per cycle
    inherited: dict[tuple[int, str], object] = field(default_factory=dict)

    def add(self, job: Job, lineage: list[Assoc]) -> None:
        """Count a job that runs (or will start this cycle)."""
        tres = _tres(job)
        key = (job.qos, job.user)
        self.qos_jobs[job.qos] += 1
        self.qos_user_jobs[key] += 1
        for name, amount in tres.items():
            self.qos_tres[job.qos][name] = self.qos_tres[job.qos].get(name, 0) + amount
            self.qos_user_tres[key][name] = self.qos_user_tres[key].get(name, 0) + amount
        if lineage:
            self.user_jobs[lineage[0].id] += 1
        for a in lineage:
            self.assoc_jobs[a.id] += 1
            for name, amount in tres.items():
                self.assoc_tres[a.id][name] = self.assoc_tres[a.id].get(name, 0) + amount


def _over(held: Mapping[str, int], want: Mapping[str, int], limit: Mapping[str, int]) -> str | None:
    for name, cap in limit.items():
        if name in want and held.get(name, 0) + want[name] > cap:
            return name
    return None


def _inherited(lineage: list[Assoc], attr: str, used: Usage) -> object:
    key = (id(lineage), attr)  # lineages are cached lists, alive for the whole cycle
    if key in used.inherited:
        return used.inherited[key]
    found: object = None
    for a in lineage:
        value = getattr(a, attr)
        if value not in (None, {}):
            found = value
            break
    used.inherited[key] = found
    return found


def limit_reason(job: Job, state: PolicyState, lineage: list[Assoc], used: Usage) -> Reason | None:
    """The first limit the job would exceed if it started now (None: none). The job's
    TRES are counted only when some TRES limit applies (this runs for every pending job
    of every cycle)."""
    want: dict[str, int] | None = None
    limit_min = job.time_limit if job.time_limit not in (0, INFINITE) else None
    qos = state.qos.get(job.qos)
    if qos is not None:
        if qos.grp_jobs is not None and used.qos_jobs.get(job.qos, 0) >= qos.grp_jobs:
            return Reason.QOS_GRP_JOBS_LIMIT
        if qos.max_wall is not None and (limit_min is None or limit_min > qos.max_wall):
            return Reason.QOS_MAX_WALL_DURATION_PER_JOB_LIMIT
        key = (job.qos, job.user)
        if qos.max_jobs_pu is not None and used.qos_user_jobs.get(key, 0) >= qos.max_jobs_pu:
            return Reason.QOS_MAX_JOBS_PER_USER_LIMIT
        if qos.grp_tres or qos.max_tres_pj or qos.max_tres_pu:
            want = _tres(job)
            name = _over(used.qos_tres.get(job.qos, {}), want, qos.grp_tres)
            if name in _QOS_GRP:
                return _QOS_GRP[name]
            name = _over({}, want, qos.max_tres_pj)
            if name in _QOS_PJ:
                return _QOS_PJ[name]
            name = _over(used.qos_user_tres.get(key, {}), want, qos.max_tres_pu)
            if name in _QOS_PU:
                return _QOS_PU[name]
    if not lineage:
        return None
    for a in lineage:
        if a.grp_jobs is not None and used.assoc_jobs.get(a.id, 0) >= a.grp_jobs:
            return Reason.ASSOC_GRP_JOBS_LIMIT
    max_jobs = _inherited(lineage, "max_jobs", used)
    if isinstance(max_jobs, int) and used.user_jobs.get(lineage[0].id, 0) >= max_jobs:
        return Reason.ASSOC_MAX_JOBS_LIMIT
    max_wall = _inherited(lineage, "max_wall", used)
    if isinstance(max_wall, int) and (limit_min is None or limit_min > max_wall):
        return Reason.ASSOC_MAX_WALL_DURATION_PER_JOB_LIMIT
    for a in lineage:
        if a.grp_tres:
            want = want or _tres(job)
            name = _over(used.assoc_tres.get(a.id, {}), want, a.grp_tres)
            if name in _ASSOC_GRP:
                return _ASSOC_GRP[name]
    max_tres = _inherited(lineage, "max_tres_pj", used)
    if isinstance(max_tres, Mapping):
        name = _over({}, want or _tres(job), max_tres)
        if name in _ASSOC_PJ:
            return _ASSOC_PJ[name]
    return None


def has_limits(state: PolicyState) -> bool:
    """Whether any QOS or association sets a limit this gate checks."""
    for q in state.qos.values():
        if (
            q.grp_jobs is not None
            or q.max_wall is not None
            or q.max_jobs_pu is not None
            or q.grp_tres
            or q.max_tres_pj
            or q.max_tres_pu
        ):
            return True
    return any(
        a.grp_jobs is not None
        or a.max_jobs is not None
        or a.max_wall is not None
        or a.grp_tres
        or a.max_tres_pj
        for a in state.assocs
    )


class LimitGate:
    """The scheduler's gate for QOS and association limits (plugin name "limits"). It has
    no policy until a gateway's policy service binds one (then every cycle asks it). With
    no limit set anywhere it costs one identity test per job."""

    name = "limits"

    def __init__(self) -> None:
        self._policy: Callable[[], PolicyState | None] = lambda: None
        self._snap: Snapshot | None = None
        self._state: PolicyState | None = None
        self._active = False
        self._used = Usage()
        self._index: dict[tuple[str, str, str], Assoc] = {}
        self._accounts: dict[str, Assoc] = {}
        self._lineages: dict[tuple[str, str, str], list[Assoc]] = {}

    def bind(self, policy: Callable[[], PolicyState | None]) -> None:
        """Where the current PolicyState comes from."""
        self._policy = policy

    def _lineage(self, job: Job, state: PolicyState) -> list[Assoc]:
        key = (job.user, job.account, job.partition)
        found = self._lineages.get(key)
        if found is None:
            assoc = assoc_of(job, state, self._index)
            found = []
            seen: set[int] = set()
            while assoc is not None and assoc.id not in seen:
                seen.add(assoc.id)
                found.append(assoc)
                up = assoc.account if assoc.user else assoc.parent
                assoc = self._accounts.get(up) if up else None
            self._lineages[key] = found
        return found

    def _reset(self, snap: Snapshot, state: PolicyState) -> None:
        if state is not self._state:
            self._state = state
            self._active = has_limits(state)
            self._index = assoc_index(state)
            self._accounts = {a.account: a for a in state.assocs if not a.user}
            self._lineages = {}
        self._snap, self._used = snap, Usage()
        if self._active:
            for running in snap.running:
                if running.state.is_active:
                    self._used.add(running, self._lineage(running, state))

    def check(self, job: Job, snap: Snapshot) -> Status:
        """OK (and counted) unless starting the job would exceed a limit."""
        state = self._policy()
        if state is None:
            return OK
        if snap is not self._snap or state is not self._state:
            self._reset(snap, state)
        if not self._active:
            return OK
        lineage = self._lineage(job, state)
        reason = limit_reason(job, state, lineage, self._used)
        if reason is not None:
            return Status(Code.WAIT, reason)
        self._used.add(job, lineage)
        return OK
