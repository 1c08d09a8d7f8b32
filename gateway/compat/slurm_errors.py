"""Slurm's error codes that Caldera reports, with Slurm's own wording (`slurm_strerror`).

Only the codes a user of sbatch/squeue/scancel/scontrol can meet through Caldera are listed;
the text is Slurm 22.05's, so scripts that grep for it keep working.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["SlurmErrno"]


class SlurmErrno(Enum):
    """An ESLURM_* code and its message."""

    # SLURM_UNEXPECTED_MSG_ERROR: what `scontrol suspend/resume` of an unknown id prints
    UNEXPECTED_MSG = (1000, "Unexpected message received")
    INVALID_PARTITION_NAME = (2000, "Invalid partition name specified")
    DEFAULT_PARTITION_NOT_SET = (2001, "No partition specified or system default partition")
    ACCESS_DENIED = (2002, "Access/permission denied")
    REQUESTED_NODES_NOT_IN_PARTITION = (2004, "Requested nodes not in this partition")
    TOO_MANY_REQUESTED_CPUS = (2005, "More processors requested than permitted")
    INVALID_NODE_COUNT = (2006, "Node count specification invalid")
    USER_ID_MISSING = (2010, "Invalid user id")
    PATHNAME_TOO_LONG = (2012, "Pathname of a file, directory or other parameter too long")
    REQUESTED_NODE_CONFIG_UNAVAILABLE = (2014, "Requested node configuration is not available")
    INVALID_JOB_ID = (2017, "Invalid job id specified")
    INVALID_NODE_NAME = (2018, "Invalid node name specified")
    TRANSITION_STATE_NO_UPDATE = (2020, "Job can not be altered now, try again later")
    ALREADY_DONE = (2021, "Job/step already completing or completed")
    JOB_PENDING = (2024, "Job is pending execution")
    INVALID_FEATURE = (2029, "Invalid feature specification")
    NOT_SUPPORTED = (2036, "Requested operation not supported on this system")
    DISABLED = (2037, "Requested operation is presently disabled")
    DEPENDENCY = (2038, "Job dependency problem")
    JOB_HELD = (2042, "Job is in held state, pending scheduler release")
    INVALID_TASK_MEMORY = (2044, "Memory required by task is not available")
    INVALID_ACCOUNT = (2045, "Invalid account or account/partition combination specified")
    INVALID_QOS = (2066, "Invalid qos specification")
    INVALID_WCKEY = (2057, "Invalid wckey specification")
    INVALID_LICENSES = (2048, "Invalid license specification")
    INVALID_TIME_LIMIT = (
        2051,
        "Requested time limit is invalid (missing or exceeds some limit)",
    )
    RESERVATION_INVALID = (2053, "Requested reservation is invalid")
    INVALID_TIME_VALUE = (2054, "Invalid time specified")
    PARTITION_NOT_AVAIL = (2070, "Required partition not available (inactive or drain)")
    CIRCULAR_DEPENDENCY = (2071, "Circular job dependency")
    INVALID_GRES = (2072, "Invalid generic resource (gres) specification")
    JOB_NOT_PENDING = (2073, "Job is no longer pending execution")
    INVALID_ARRAY = (2081, "Invalid job array specification")
    JOB_FINISHED = (2084, "Job has already finished")
    JOB_NOT_RUNNING = (2085, "Job is not running")
    JOB_NOT_PENDING_NOR_RUNNING = (2086, "Job is not pending nor running")
    JOB_NOT_SUSPENDED = (2087, "Job is not suspended")
    JOB_NOT_FINISHED = (2088, "Job is not finished")
    INTERNAL = (2090, "Slurm internal error, contact system administrator")
    PRIO_RESET_FAIL = (2095, "Changes to job priority are not persistent, change nice instead")
    INVALID_NICE = (2123, "Invalid --nice value")
    INVALID_TIME_MIN_LIMIT = (
        2124,
        "Invalid time-min specification (exceeds job's time or other limits)",
    )
    CONTAINER_NOT_CONFIGURED = (10000, "Container support is not configured")

    @property
    def code(self) -> int:
        """Slurm's numeric errno."""
        return self.value[0]

    @property
    def text(self) -> str:
        """Slurm's `slurm_strerror` text."""
        return self.value[1]
