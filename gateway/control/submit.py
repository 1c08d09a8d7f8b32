"""From an sbatch invocation to a Job record: parse, check against the site, fill defaults.

This is what sbatch and slurmctld do together before a job id exists; it is pure (clock,
caller and site are arguments) so that it can be tested without a running gateway.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from gateway.compat.errors import CompatError
from gateway.compat.optypes import ParseContext
from gateway.compat.sbatch import SbatchRequest, first_pass, second_pass
from gateway.compat.script import check_script, script_too_long, wrap_script
from gateway.compat.slurm_errors import SlurmErrno
from gateway.compat.verify import SubmitError
from gateway.control.site import check_request, partition_defaults, pick_partitions
from gateway.model.cluster import ClusterState
from gateway.model.job import Hold, Job
from gateway.model.jobspec import JobSpec
from gateway.model.state import JobState, Reason
from gateway.scheduler.cycle import Decision
from gateway.scheduler.dependencies import prune_missing
from gateway.scheduler.part_limits import partition_limit

__all__ = [
    "Caller",
    "NeedScript",
    "RecordedRefusal",
    "SbatchCall",
    "build_job",
    "parse_call",
    "submit_message",
    "test_only_message",
]


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is asking, from the socket's peer credentials."""

    uid: int
    gid: int
    user: str
    group: str
    operator: bool


@dataclass(frozen=True, slots=True)
class SbatchCall:
    """An sbatch invocation as the client saw it."""

    argv: Sequence[str]
    env: Mapping[str, str]
    cwd: str
    script: str | None  # None with --wrap (or when the client had no script)
    script_path: str | None = None  # absolute, as sbatch resolves it; None: stdin or --wrap
    host: str = "localhost"
    # A client that skipped /v1/sbatch/locate guessed the script: `script_operand` is the
    # argument it read (None: it guessed --wrap). A wrong guess raises NeedScript.
    located: bool = True
    script_operand: str | None = None
    # The client's random token for this invocation; `retry`: it sent this submission before
    # and lost the answer, so the job may exist already (then its id is the answer)
    token: str | None = None
    retry: bool = False
    # salloc, or srun outside a job: an allocation whose Command is this (`(null)` for
    # salloc, srun's program as given), held by Caldera's holder script; None: a batch job
    allocation: str | None = None


class NeedScript(Exception):
    """The client's guess of the script was wrong: here is what sbatch's first pass says
    (the operand naming the script, None for standard input; or --wrap)."""

    def __init__(self, operand: str | None, wrap: bool) -> None:
        super().__init__(operand)
        self.operand = operand
        self.wrap = wrap


def parse_call(
    call: SbatchCall,
    caller: Caller,
    now: float,
    max_array_size: int,
    gres_names: tuple[str, ...] | None = None,
) -> SbatchRequest:
    """Run sbatch's passes on the call; raises CompatError with sbatch's output.
    `gres_names` is the site's GresTypes (None: any name is accepted)."""
    ctx = ParseContext(
        cwd=call.cwd,
        uid=caller.uid,
        now=now,
        user=caller.user,
        max_array_size=max_array_size,
        gres_names=gres_names,
    )
    first = first_pass(call.argv, ctx)
    if not call.located:
        guessed_wrap = call.script is None
        if guessed_wrap != (first.wrap is not None) or (
            not guessed_wrap and first.script_path != call.script_operand
        ):
            raise NeedScript(first.script_path, first.wrap is not None)
    if first.wrap is not None:
        script = wrap_script(first.wrap)
    else:
        if call.script is None:
            raise CompatError.error("Batch script is empty!", 1)
        check_script(call.script)
        script = call.script
    return second_pass(first, script, call.env, ctx)


def build_job(
    job_id: int,
    request: SbatchRequest,
    call: SbatchCall,
    caller: Caller,
    now: float,
    clusters: dict[str, ClusterState],
    def_mem_per_cpu_mb: int,
    accept_qos: frozenset[str] | None = None,
    job_exists: Callable[[int], bool] | None = None,
) -> Job:
    """The Job record of a parsed request, or SubmitError as slurmctld would answer.
    `job_exists` tells which dependency targets are known; slurmctld drops the others at
    once unless the job is held (then when it is first tested)."""
    spec: JobSpec = request.spec
    if script_too_long(request.script):
        raise SubmitError(SlurmErrno.PATHNAME_TOO_LONG)
    if spec.dependency is not None and job_exists is not None and not spec.hold:
        spec = replace(spec, dependency=prune_missing(spec.dependency, job_exists))
    if spec.het:
        raise SubmitError(SlurmErrno.NOT_SUPPORTED)
    if spec.uid is not None and spec.uid != caller.uid and not caller.operator:
        raise SubmitError(SlurmErrno.ACCESS_DENIED)
    if accept_qos is not None and spec.qos is not None and spec.qos not in accept_qos:
        raise SubmitError(SlurmErrno.INVALID_QOS)
    partitions = pick_partitions(spec, clusters)
    spec = partition_defaults(spec, partitions, clusters)
    limit = _partition_limit(spec, partitions, clusters)
    refused: SubmitError | None = None
    try:
        check_request(
            spec, partitions, clusters, def_mem_per_cpu_mb, fit=not spec.hold and limit is None
        )
    except SubmitError as exc:
        if exc.errno is not SlurmErrno.REQUESTED_NODE_CONFIG_UNAVAILABLE:
            raise
        refused = exc
    part = None
    for cluster in clusters.values():
        part = cluster.partition(partitions[0]) or part
    time_limit = part.time_for(spec.time_limit) if part else (spec.time_limit or 0)
    command = call.script_path or "(null)"
    if spec.script_args and call.script_path:
        command = " ".join((command, *spec.script_args))
    if call.allocation is not None:
        command = call.allocation
    job = Job(
        job_id=job_id,
        spec=spec,
        user=caller.user,
        uid=spec.uid if spec.uid is not None else caller.uid,
        group=caller.group,
        gid=spec.gid if spec.gid is not None else caller.gid,
        submit_time=now,
        submit_host=call.host,
        submit_line=" ".join(call.argv),
        command=command,
        batch=call.allocation is None,
        state=JobState.PENDING,
        reason=Reason.JOB_HELD_USER if spec.hold else (limit or Reason.NONE),
        priority=0,  # numbered once admitted (gateway/policy/service.py PolicyService.admit)
        hold=Hold.USER if spec.hold else None,
        array_job_id=job_id if spec.array else 0,
        array_pending=spec.array,
        partition=",".join(partitions),
        account=(spec.account or "").lower(),
        qos=spec.qos or "normal",
        time_limit=time_limit,
        cluster=next(iter(clusters), "local"),
    )
    if refused is not None:
        raise RecordedRefusal(refused, _failed_at_submission(job, now))
    return job


class RecordedRefusal(Exception):
    """A request no node configuration can hold: slurmctld has made the job's record by
    then (`_select_nodes_parts` runs after `_job_create`), so the refusal uses a job id and
    leaves the job FAILED (Reason=BadConstraints, exit code 1) in scontrol and sacct."""

    def __init__(self, error: SubmitError, job: Job) -> None:
        super().__init__(str(error))
        self.error, self.job = error, job


def _failed_at_submission(job: Job, now: float) -> Job:
    return replace(
        job,
        state=JobState.FAILED,
        reason=Reason.BAD_CONSTRAINTS,
        hold=None,
        exit_code=1,  # slurmctld's own 1 (scontrol 0:1; slurmdbd stores it as 1:0)
        eligible_time=now,
        start_time=now,
        end_time=now,
    )


def _partition_limit(
    spec: JobSpec, partitions: tuple[str, ...], clusters: dict[str, ClusterState]
) -> Reason | None:
    """The partition limit the job exceeds in every partition it names (None: some
    partition admits it). Slurm's default EnforcePartLimits=NO accepts it to wait."""
    reasons: list[Reason] = []
    for cluster in clusters.values():
        for name in partitions:
            part = cluster.partition(name)
            if part is not None:
                found = partition_limit(spec, cluster, part)
                if found is None:
                    return None
                reasons.append(found)
    return reasons[0] if reasons else None


def submit_message(job_id: int, request: SbatchRequest) -> tuple[str, str]:
    """What sbatch prints on success: (stdout, stderr)."""
    err = "".join(d.render("sbatch") + "\n" for d in request.warnings)
    if request.quiet:
        return "", err
    if request.parsable:
        return f"{job_id}\n", err
    return f"Submitted batch job {job_id}\n", err


def test_only_message(job: Job, starts: Sequence[Decision], now: float) -> str:
    """`sbatch --test-only`'s answer for the cycle's starts of the job (none: no start)."""
    from gateway.compat.job_fields import slurm_time

    first = starts[0] if starts else None

    nodes = ",".join(p.node for p in first.placement) if first else ""
    cpus = sum(p.cpus for p in first.placement) if first else 0
    partition = first.partition if first else job.partition.split(",")[0]
    return (
        f"sbatch: Job {job.job_id} to start at {slurm_time(int(now))} using {cpus} "
        f"processors on nodes {nodes} in partition {partition}\n"
    )
