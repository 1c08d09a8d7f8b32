"""A job as the gateway tracks it: the request (JobSpec) plus who, when, where and how it went.

Array jobs follow Slurm's shape: one record (the "meta" record, `array_task_id is None`)
holds the tasks not yet started as a compact ArraySpec; a task that starts becomes a record
of its own with `array_job_id` pointing at the meta record and its own `job_id`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from gateway.model.jobspec import JobSpec
from gateway.model.state import JobState, Reason
from gateway.model.values import ArraySpec

__all__ = ["HANDING", "Hold", "Job", "RankPlacement", "Step", "exit_code_pair", "wait_status"]


class Hold(Enum):
    """Who holds a job: a user (`scontrol hold`, `sbatch -H`) or an operator."""

    USER = "user"
    ADMIN = "admin"


def wait_status(exit_code: int = 0, signal: int = 0) -> int:
    """A POSIX wait status as Slurm stores it (exit 3 -> 768, SIGKILL -> 9)."""
    return signal & 0x7F if signal else (exit_code & 0xFF) << 8


def exit_code_pair(status: int) -> tuple[int, int]:
    """Slurm's `ExitCode=N:S` from a wait status."""
    if status & 0x7F:
        return 0, status & 0x7F
    return (status >> 8) & 0xFF, 0


def batch_step_state(status: int, out_of_memory: bool = False) -> JobState:
    """The batch step's state from the batch shell's wait status, as slurmstepd records
    it: CANCELLED when a signal ended it, FAILED on a non-zero exit, else COMPLETED."""
    if out_of_memory:
        return JobState.OUT_OF_MEMORY
    if status & 0x7F:
        return JobState.CANCELLED
    return JobState.FAILED if status else JobState.COMPLETED


# the backend id of a job being handed to a cluster that queues and places its own jobs
# (Slurm): PENDING there from the start, as slurmctld shows it, and already "handed" so it
# is never scheduled twice; a restart reconciles it with that cluster by its tag
HANDING = "(handing)"


@dataclass(frozen=True, slots=True)
class RankPlacement:
    """Where one node's share of a gang goes."""

    node: str
    tasks: int
    cpus: int
    memory_mb: int
    gpus: tuple[int, ...] = ()  # GPU indices on that node
    nics: tuple[str, ...] = ()  # RDMA devices paired with those GPUs
    gpu_type: str | None = None  # the node's GPU type (gres/gpu:<type> in TRES), if typed


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    """One job record."""

    job_id: int
    spec: JobSpec
    user: str
    uid: int
    group: str
    gid: int
    submit_time: float
    submit_host: str = "localhost"
    submit_line: str = ""
    command: str = ""  # the script's path as given (scontrol Command=), or the wrap text
    # False: an allocation (salloc, srun outside a job) as slurmctld records one: BatchFlag=0,
    # no batch step and no StdOut/StdErr/StdIn (Caldera's holder process is not the job's)
    batch: bool = True
    state: JobState = JobState.PENDING
    reason: Reason = Reason.NONE
    priority: int = 0
    # set by an operator (sbatch --priority, scontrol update Priority=): slurmctld's
    # direct_set_prio, a priority no count or factor recomputes until a release resets it
    fixed_priority: bool = False
    hold: Hold | None = None
    # arrays
    array_job_id: int = 0
    array_task_id: int | None = None
    array_pending: ArraySpec | None = None
    # what the gateway decided and what happened
    partition: str = ""
    account: str = ""
    qos: str = "normal"
    time_limit: int = 0  # effective, minutes (INFINITE for none)
    cluster: str = "local"
    backend_id: str | None = None
    nodes: tuple[str, ...] = ()
    placement: tuple[RankPlacement, ...] = ()
    num_cpus: int = 0
    eligible_time: float | None = None
    start_time: float | None = None
    end_time: float | None = None
    exit_code: int = 0  # wait status
    derived_exit_code: int = 0
    restart_count: int = 0
    state_desc: str | None = None
    cancelled_by: int | None = None  # uid (sacct "CANCELLED by N")
    # a pending job's backfill plan (gateway/scheduler/backfill.py): when and where it is
    # expected to start (squeue --start %S and %Y, scontrol StartTime); None: no estimate
    sched_start: float | None = None
    sched_nodes: str | None = None  # hostlist expression
    # multi-cluster routing (gateway/control/routing.py): the cluster the router chose for
    # the job's next start (None: not routed, or no routing configured), the clusters that
    # may run it (Slurm's FedViableSiblings, comma-separated; FedOrigin: its home cluster),
    # and the last decision in words, with the start it predicted on the chosen cluster
    # (kept to measure, once the job starts, how far off routing's prediction was)
    routed_to: str | None = None
    viable: str = ""
    origin: str = ""
    route_note: str = ""
    route_start: float | None = None
    # suspension (scontrol suspend, PreemptMode=SUSPEND; gateway/model/suspension.py), as
    # slurmctld keeps it: the last suspend or resume (SuspendTime), the seconds run before
    # the last suspend (SecsPreSuspend), the seconds spent suspended before the last resume
    # (sacct Suspended), and who stopped it: SUSPENDED_BY_OPERATOR or the preemptor's id
    suspend_time: float | None = None
    pre_sus_time: int = 0
    suspended_s: int = 0
    suspended_by: int | None = None
    # preemption (gateway/control/preemption.py), as slurmctld shows it (PreemptTime): when
    # the job was preempted (its GraceTime began), then when it was ended
    preempt_time: float | None = None
    # a REQUEUE preemption is ending its run (COMPLETING through KillWait): slurmctld has
    # already requeued the record (pending and completing), so it shows the next run's
    # Restarts, RunTime 0 and no PreemptTime line (recorded on the burst cluster)
    requeuing: bool = False

    @property
    def is_array_meta(self) -> bool:
        """The record that still holds unstarted tasks of an array."""
        return self.array_job_id != 0 and self.array_task_id is None

    @property
    def shown_requeued(self) -> bool:
        """Shown as slurmctld's pending-and-completing record of a requeue (`requeuing`)."""
        return self.requeuing and self.state is JobState.COMPLETING

    @property
    def display_id(self) -> str:
        """`123`, `123_4`, or `123_[5-9%2]` for the pending part of an array (a meta
        record whose every task was cancelled is the bare `123`, as in Slurm)."""
        if self.array_task_id is not None:
            return f"{self.array_job_id}_{self.array_task_id}"
        if self.array_job_id and self.array_pending:
            return f"{self.array_job_id}_[{self.array_pending.task_str()}]"
        return str(self.job_id)

    @property
    def expected_start(self) -> float | None:
        """When it started, or for a pending job when the backfill plan expects it to, else
        its begin time (--begin, a requeued job's delay): the start_time slurmctld packs
        for squeue's %S and scontrol's StartTime; None when unknown."""
        if self.start_time is not None:
            return self.start_time
        if self.state is not JobState.PENDING:
            return None
        if self.sched_start is not None:
            return self.sched_start
        return float(self.spec.begin) if self.spec.begin else None


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    """A job step as sacct reports it: `batch`, `extern`, or a number (srun)."""

    job_id: int
    step_id: str
    name: str
    state: JobState
    start_time: float | None = None
    end_time: float | None = None
    exit_code: int = 0
    nodes: tuple[str, ...] = ()
    ntasks: int = 1
    cpus: int = 0
    max_rss_kb: int = 0
    extra: dict[str, str] = field(default_factory=dict)
    run: int = 0  # the job's restart count in the run (attempt) this step belongs to
