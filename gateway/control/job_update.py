"""`scontrol update JobId=...` field by field, as slurmctld's update_job changes a job
record: pure functions from the job and the field's text to the new job or Slurm's error
(gateway/control/ops.py applies them, all fields of a command or none)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from gateway.compat.cnum import parse_uint32, strtol
from gateway.compat.dependency import DependencyError, parse_dependency
from gateway.compat.duration import time_str_to_mins
from gateway.compat.hostlist import HostlistError, expand
from gateway.compat.quantity import parse_mail_type
from gateway.compat.slurm_errors import SlurmErrno
from gateway.model.cluster import ClusterState
from gateway.model.job import Hold, Job
from gateway.model.state import JobState, Reason
from gateway.model.values import INFINITE, NO_VAL
from gateway.policy.priority import reniced
from gateway.scheduler.licenses import valid_request
from gateway.scheduler.request import constraint_satisfied

__all__ = ["UpdateSite", "not_persistent", "update_field"]


@dataclass(frozen=True, slots=True)
class UpdateSite:
    """What update_job checks a field against: the MaxTime (minutes) of the job's
    partition, the site's node names, the features of each of its nodes."""

    max_time: int = INFINITE
    nodes: frozenset[str] = frozenset()
    features: tuple[tuple[str, ...], ...] = ()
    clusters: tuple[ClusterState, ...] = ()  # whose licences a Licenses= may name


def _throttle(job: Job, value: str) -> Job | SlurmErrno:
    """ArrayTaskThrottle (slurmctld's strtoll; 0 lifts the limit) on every record of an
    array, so the scheduler's per-record check sees it; other jobs are left alone."""
    throttle, _ = strtol(value)
    if throttle < 0:
        return SlurmErrno.INVALID_ARRAY
    if job.spec.array is None:
        return job
    pending = replace(job.array_pending, throttle=throttle) if job.array_pending else None
    spec = replace(job.spec, array=replace(job.spec.array, throttle=throttle))
    return replace(job, array_pending=pending, spec=spec)


def _time_limit(job: Job, value: str, operator: bool, max_time: int) -> Job | SlurmErrno:
    """update_job's rule: an operator sets any limit; a user lowers it, or raises a pending
    job's up to its partition's MaxTime (the test cluster: a held `-t 5` job's user set 10,
    then UNLIMITED, in a partition without MaxTime; a running job's raise is refused)."""
    minutes = time_str_to_mins(value)
    if minutes == NO_VAL or not 0 <= minutes <= INFINITE:
        return SlurmErrno.INVALID_TIME_VALUE
    if minutes == job.time_limit:
        return job
    # 0 is a limit already over (sbatch's -t 0 is none, scontrol's is not): the test
    # cluster let a user set it and ended the job TIMEOUT at its next time-limit check
    lowered = minutes < job.time_limit
    if not (operator or lowered or (job.state is JobState.PENDING and max_time >= minutes)):
        return SlurmErrno.ACCESS_DENIED
    return replace(job, time_limit=minutes, spec=replace(job.spec, time_limit=minutes))


def _nodes(job: Job, k: str, value: str, site: UpdateSite) -> Job | SlurmErrno:
    """ReqNodeList=/ExcNodeList= of a pending job (empty: none); every name must be a node
    of the site (the test cluster: `Invalid node name specified` for an unknown one)."""
    if job.state is not JobState.PENDING:
        return SlurmErrno.JOB_NOT_PENDING
    try:
        names = expand(value) if value else []
    except HostlistError:
        return SlurmErrno.INVALID_NODE_NAME
    if any(name not in site.nodes for name in names):
        return SlurmErrno.INVALID_NODE_NAME
    if k == "reqnodelist":
        return replace(job, spec=replace(job.spec, nodelist=value or None))
    return replace(job, spec=replace(job.spec, exclude=value or None))


_PENDING_FIELDS = frozenset({"workdir", "stdout", "minmemorynode", "minmemorycpu"})


def _pending_field(job: Job, k: str, value: str) -> Job | SlurmErrno:
    """WorkDir=, StdOut= (taken as given, a relative path too, as the test cluster
    takes it), MinMemoryNode=/MinMemoryCPU= (MB, a plain number) of a pending job."""
    if job.state is not JobState.PENDING:
        return SlurmErrno.JOB_NOT_PENDING
    spec = job.spec
    if k == "workdir":
        return replace(job, spec=replace(spec, workdir=value))
    if k == "stdout":
        return replace(job, spec=replace(spec, stdout=value))
    megabytes = parse_uint32(value)
    if megabytes is None:
        return SlurmErrno.NOT_SUPPORTED  # scontrol refuses it first: "Invalid ... value"
    if k == "minmemorynode":
        return replace(job, spec=replace(spec, mem_per_node_mb=megabytes, mem_per_cpu_mb=None))
    return replace(job, spec=replace(spec, mem_per_cpu_mb=megabytes, mem_per_node_mb=None))


def update_field(
    job: Job, key: str, value: str, operator: bool, site: UpdateSite | None = None
) -> Job | SlurmErrno:
    """The job with one `scontrol update` field changed, or slurmctld's error for it."""
    spec, site = job.spec, site or UpdateSite()
    k = key.lower()
    if k == "timelimit":
        return _time_limit(job, value, operator, site.max_time)
    if k in ("reqnodelist", "excnodelist"):
        return _nodes(job, k, value, site)
    if k in _PENDING_FIELDS:
        return _pending_field(job, k, value)
    if k == "licenses":  # a user's running job keeps its licences (the test cluster)
        if job.state is not JobState.PENDING and not operator:
            return SlurmErrno.ACCESS_DENIED
        if value and not valid_request(value, site.clusters):
            return SlurmErrno.INVALID_LICENSES
        return replace(job, spec=replace(spec, licenses=value or None))
    if k in ("mailtype", "mailuser"):  # (running jobs too, as on the test cluster)
        user = spec.mail_user or job.user
        if k == "mailuser":
            return replace(job, spec=replace(spec, mail_user=value or None))
        types = parse_mail_type(value)
        if types is None:
            return SlurmErrno.NOT_SUPPORTED  # scontrol refuses it first: "Invalid MailType"
        return replace(job, spec=replace(spec, mail_type=types, mail_user=user))
    if k == "requeue":  # update_job: 0 or 1, any other number left alone
        number, end = strtol(value)
        if end != len(value) or number not in (0, 1):
            return job
        return replace(job, spec=replace(spec, requeue=number == 1))
    if k == "features":
        if job.state is not JobState.PENDING:
            return SlurmErrno.JOB_NOT_PENDING
        if value and not any(constraint_satisfied(value, f) for f in site.features):
            return SlurmErrno.INVALID_FEATURE
        return replace(job, spec=replace(spec, constraint=value or None))
    if k == "partition":
        if job.state is not JobState.PENDING:
            return SlurmErrno.JOB_NOT_PENDING
        parts = tuple(p for p in value.split(",") if p)
        return replace(job, partition=",".join(parts), spec=replace(spec, partitions=parts))
    if k == "dependency":
        if job.state is not JobState.PENDING:
            return SlurmErrno.JOB_NOT_PENDING
        try:
            dep = parse_dependency(value)
        except DependencyError as exc:
            return exc.errno
        return replace(
            job, reason=Reason.NONE, spec=replace(spec, dependency=dep if dep.items else None)
        )
    if k == "nice":
        nice, end = strtol(value)
        if end != len(value) or abs(nice) > 0x80000000 - 3:
            return SlurmErrno.INVALID_NICE
        if nice < 0 and not operator:
            return SlurmErrno.ACCESS_DENIED
        if job.fixed_priority and job.priority != 0:
            return job  # slurmctld: "ignore nice set request"
        new = replace(job, spec=replace(spec, nice=nice))
        if job.hold is None and not job.state.is_finished:
            new = replace(new, priority=reniced(job.priority, spec.nice, nice))
        return new
    if k == "jobname" or k == "name":
        return replace(job, spec=replace(spec, name=value))
    if k == "comment":
        return replace(job, spec=replace(spec, comment=value))
    if k == "priority":
        return _priority(job, value, operator)
    if k == "arraytaskthrottle":
        return _throttle(job, value)
    if k == "starttime":  # seconds since the epoch, never before now (the client's)
        begin, end = strtol(value)
        if end != len(value) or begin <= 0:
            return SlurmErrno.INVALID_TIME_VALUE
        if job.state is not JobState.PENDING:
            return SlurmErrno.JOB_NOT_PENDING
        # the next cycle says whether it still waits (BeginTime, a requeued job's delay)
        reason = Reason.NONE if job.reason is Reason.BEGIN_TIME else job.reason
        spec = replace(spec, begin=begin)
        return replace(job, spec=spec, reason=reason, eligible_time=None)
    if k == "timemin":
        minutes = time_str_to_mins(value)
        if minutes == NO_VAL:
            return SlurmErrno.INVALID_TIME_VALUE
        return replace(job, spec=replace(spec, time_min=minutes or None))
    return SlurmErrno.NOT_SUPPORTED


def _priority(job: Job, value: str, operator: bool) -> Job | SlurmErrno:
    """Priority=N (job_mgr.c update_job, 22.05): an operator sets any priority and it stays
    (direct_set_prio); a user may only lower theirs, and it lasts until recomputed
    (`not_persistent`). Setting one resets the nice value. A held job keeps its hold.
    Priority=0 holds the job, as the caller's `scontrol hold` would (a running one keeps
    running, shown at priority 0 with the hold's reason, as on the test cluster)."""
    number = parse_uint32(value)
    if number is None:
        return SlurmErrno.NOT_SUPPORTED  # scontrol refuses it first: "Invalid Priority value"
    if number == job.priority:
        return job
    if job.priority == 0:
        return SlurmErrno.JOB_HELD
    if number == 0:
        hold = Hold.ADMIN if operator else Hold.USER
        reason = Reason.JOB_HELD_ADMIN if operator else Reason.JOB_HELD_USER
        pending = job.state is JobState.PENDING
        return replace(job, hold=hold if pending else None, priority=0, reason=reason)
    if not operator and number > job.priority:
        return SlurmErrno.ACCESS_DENIED
    spec = replace(job.spec, nice=None)
    return replace(job, priority=number, fixed_priority=operator, spec=spec)


def not_persistent(before: Job, after: Job, operator: bool) -> bool:
    """A user lowered their job's priority: slurmctld applies it and still answers
    ESLURM_PRIO_RESET_FAIL (the next recomputation undoes it; nice is the lasting way)."""
    return not operator and after.priority != before.priority and after.hold is None
