"""Job states and pending reasons with Slurm's names and codes, and translation tables.

One enum for states (`PENDING`/`PD` ... `OUT_OF_MEMORY`/`OOM`) and one for reasons, both
spelled exactly as squeue, sacct and scontrol spell them; plus the tables that translate a
Slurm cluster's and a Kubernetes pod's view of a job into them.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["JobState", "Reason", "state_from_slurm"]


class JobState(Enum):
    """Slurm's job states: value is (long name, compact code)."""

    PENDING = ("PENDING", "PD")
    RUNNING = ("RUNNING", "R")
    SUSPENDED = ("SUSPENDED", "S")
    COMPLETING = ("COMPLETING", "CG")
    COMPLETED = ("COMPLETED", "CD")
    CONFIGURING = ("CONFIGURING", "CF")
    CANCELLED = ("CANCELLED", "CA")
    FAILED = ("FAILED", "F")
    TIMEOUT = ("TIMEOUT", "TO")
    PREEMPTED = ("PREEMPTED", "PR")
    NODE_FAIL = ("NODE_FAIL", "NF")
    BOOT_FAIL = ("BOOT_FAIL", "BF")
    DEADLINE = ("DEADLINE", "DL")
    OUT_OF_MEMORY = ("OUT_OF_MEMORY", "OOM")
    REQUEUED = ("REQUEUED", "RQ")
    REQUEUE_HOLD = ("REQUEUE_HOLD", "RH")
    SPECIAL_EXIT = ("SPECIAL_EXIT", "SE")
    STOPPED = ("STOPPED", "ST")
    REVOKED = ("REVOKED", "RV")
    SIGNALING = ("SIGNALING", "SI")
    STAGE_OUT = ("STAGE_OUT", "SO")
    RESIZING = ("RESIZING", "RS")

    @property
    def long(self) -> str:
        """`RUNNING`, as squeue %T and sacct print it."""
        return self.value[0]

    @property
    def code(self) -> str:
        """`R`, as squeue %t prints it."""
        return self.value[1]

    @property
    def is_finished(self) -> bool:
        """A state a job never leaves (except by requeue)."""
        return self in _FINISHED

    @property
    def is_active(self) -> bool:
        """Holding or about to hold resources."""
        return self in _ACTIVE

    @classmethod
    def parse(cls, text: str) -> JobState:
        """A long name or code (any case), as `squeue -t` and `sacct -s` accept."""
        key = text.strip().upper()
        for state in cls:
            if key in state.value:
                return state
        raise ValueError(f"Invalid job state specified: {text}")


_ACTIVE = frozenset(
    {
        JobState.RUNNING,
        JobState.SUSPENDED,
        JobState.COMPLETING,
        JobState.CONFIGURING,
        JobState.SIGNALING,
        JobState.STAGE_OUT,
    }
)
_FINISHED = frozenset(
    {
        JobState.COMPLETED,
        JobState.CANCELLED,
        JobState.FAILED,
        JobState.TIMEOUT,
        JobState.PREEMPTED,
        JobState.NODE_FAIL,
        JobState.BOOT_FAIL,
        JobState.DEADLINE,
        JobState.OUT_OF_MEMORY,
        JobState.REVOKED,
        JobState.SPECIAL_EXIT,
    }
)


class Reason(Enum):
    """Why a job waits (or why it ended), spelled as Slurm's `job_reason_string`."""

    NONE = "None"
    PRIORITY = "Priority"
    RESOURCES = "Resources"
    DEPENDENCY = "Dependency"
    DEPENDENCY_NEVER_SATISFIED = "DependencyNeverSatisfied"
    BEGIN_TIME = "BeginTime"
    JOB_HELD_USER = "JobHeldUser"
    JOB_HELD_ADMIN = "JobHeldAdmin"
    JOB_ARRAY_TASK_LIMIT = "JobArrayTaskLimit"
    PARTITION_TIME_LIMIT = "PartitionTimeLimit"
    PARTITION_NODE_LIMIT = "PartitionNodeLimit"
    PARTITION_CONFIG = "PartitionConfig"
    PARTITION_DOWN = "PartitionDown"
    REQ_NODE_NOT_AVAIL = "ReqNodeNotAvail"
    LICENSES = "Licenses"
    RESERVATION = "Reservation"
    NODE_DOWN = "NodeDown"
    BAD_CONSTRAINTS = "BadConstraints"
    SYSTEM_FAILURE = "SystemFailure"
    JOB_LAUNCH_FAILURE = "JobLaunchFailure"
    NON_ZERO_EXIT_CODE = "NonZeroExitCode"
    TIME_LIMIT = "TimeLimit"
    OUT_OF_MEMORY = "OutOfMemory"
    INVALID_ACCOUNT = "InvalidAccount"
    INVALID_QOS = "InvalidQOS"
    JOB_HOLD_MAX_REQUEUE = "JobHoldMaxRequeue"
    CLEANING = "Cleaning"
    # QOS and association limits (gateway/policy/limits.py), as job_reason_string spells them
    QOS_GRP_JOBS_LIMIT = "QOSGrpJobsLimit"
    QOS_GRP_CPU_LIMIT = "QOSGrpCpuLimit"
    QOS_GRP_NODE_LIMIT = "QOSGrpNodeLimit"
    QOS_GRP_MEM_LIMIT = "QOSGrpMemLimit"
    QOS_MAX_JOBS_PER_USER_LIMIT = "QOSMaxJobsPerUserLimit"
    QOS_MAX_CPU_PER_USER_LIMIT = "QOSMaxCpuPerUserLimit"
    QOS_MAX_NODE_PER_USER_LIMIT = "QOSMaxNodePerUserLimit"
    QOS_MAX_CPU_PER_JOB_LIMIT = "QOSMaxCpuPerJobLimit"
    QOS_MAX_NODE_PER_JOB_LIMIT = "QOSMaxNodePerJobLimit"
    QOS_MAX_WALL_DURATION_PER_JOB_LIMIT = "QOSMaxWallDurationPerJobLimit"
    ASSOC_GRP_JOBS_LIMIT = "AssocGrpJobsLimit"
    ASSOC_GRP_CPU_LIMIT = "AssocGrpCpuLimit"
    ASSOC_GRP_NODE_LIMIT = "AssocGrpNodeLimit"
    ASSOC_GRP_MEM_LIMIT = "AssocGrpMemLimit"
    ASSOC_MAX_JOBS_LIMIT = "AssocMaxJobsLimit"
    ASSOC_MAX_CPU_PER_JOB_LIMIT = "AssocMaxCpuPerJobLimit"
    ASSOC_MAX_NODE_PER_JOB_LIMIT = "AssocMaxNodePerJobLimit"
    ASSOC_MAX_WALL_DURATION_PER_JOB_LIMIT = "AssocMaxWallDurationPerJobLimit"
    # Caldera's own, for a backend that cannot be reached (shown like Slurm's reasons)
    CLUSTER_UNREACHABLE = "ClusterUnreachable"

    @classmethod
    def parse(cls, text: str) -> Reason:
        """A reason from its Slurm spelling; unknown text raises ValueError."""
        for reason in cls:
            if reason.value == text:
                return reason
        raise ValueError(f"unknown reason {text!r}")


# Slurm's state strings (squeue/sacct text and --json) to JobState. Slurm may print
# flags after the base state (`CANCELLED by 0`, `RUNNING,COMPLETING`): the first word wins.
def state_from_slurm(text: str) -> JobState:
    """Translate a Slurm cluster's state text (long or compact) into a JobState."""
    base = text.replace(",", " ").split()[0] if text.strip() else "PENDING"
    return JobState.parse(base)
