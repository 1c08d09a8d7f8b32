"""Errors of the Slurm transports, all `BackendError`s carrying Slurm's own message.

`SlurmUnreachable` (retryable): slurmctld or slurmrestd cannot be reached; trying again
later may work. `SlurmRejected` (not retryable): Slurm answered and refused, e.g.
`sbatch: error: Batch job submission failed: Invalid partition name specified`; the
message is Slurm's text so the user sees exactly what Slurm said.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gateway.model.backend import BackendError

__all__ = [
    "SlurmError",
    "SlurmRejected",
    "SlurmUnreachable",
    "classify_failure",
    "errno_from_text",
]


class SlurmError(BackendError):
    """A Slurm operation failed."""

    def __init__(
        self,
        message: str,
        *,
        retryable: bool = False,
        command: Sequence[str] = (),
        errno: int | None = None,
    ) -> None:
        super().__init__(message, retryable=retryable, errno=errno)
        self.command = tuple(command)


class SlurmUnreachable(SlurmError):
    """The cluster (slurmctld, slurmdbd or slurmrestd) does not answer."""

    def __init__(self, message: str, *, command: Sequence[str] = ()) -> None:
        super().__init__(message, retryable=True, command=command)


class SlurmRejected(SlurmError):
    """Slurm answered with an error (invalid request, permission, unknown job ...)."""


# What Slurm's commands and slurmrestd say when the daemons cannot be reached.
_UNREACHABLE = re.compile(
    r"Unable to contact slurm controller|Socket timed out|Connection refused|"
    r"Zero Bytes were transmitted|Transport endpoint is not connected|"
    r"Slurm backup controller in standby mode|Communication connection failure|"
    r"Unable to connect to database|Connection timed out|No route to host|"
    r"Network is unreachable|slurmdbd: Connection refused|"
    r"Insane message length|Protocol authentication error",
    re.IGNORECASE,
)

# Slurm's slurm_strerror texts of the errors a submission meets, and their codes.
_ERRNO_TEXT: dict[str, int] = {
    "Invalid partition name specified": 2000,
    "No partition specified or system default partition": 2001,
    "Access/permission denied": 2002,
    "Requested nodes not in this partition": 2004,
    "More processors requested than permitted": 2005,
    "Node count specification invalid": 2006,
    "Invalid user id": 2010,
    "Requested node configuration is not available": 2014,
    "Invalid job id specified": 2017,
    "Invalid node name specified": 2018,
    "Job/step already completing or completed": 2021,
    "Invalid feature specification": 2029,
    "Job dependency problem": 2038,
    "Job is in held state, pending scheduler release": 2042,
    "Memory required by task is not available": 2044,
    "Invalid account or account/partition combination specified": 2045,
    "Invalid license specification": 2048,
    "Requested time limit is invalid (missing or exceeds some limit)": 2051,
    "Requested reservation is invalid": 2053,
    "Invalid wckey specification": 2057,
    "Invalid qos specification": 2066,
    "Invalid generic resource (gres) specification": 2072,
    "Job is no longer pending execution": 2073,
    "Invalid job array specification": 2081,
    "Job has already finished": 2084,
}


def errno_from_text(text: str) -> int | None:
    """The ESLURM code whose message the text contains, if any."""
    for message, code in _ERRNO_TEXT.items():
        if message in text:
            return code
    return None


def _clean(text: str) -> str:
    lines = [line.rstrip() for line in text.strip().splitlines() if line.strip()]
    return "\n".join(lines)


def classify_failure(
    command: Sequence[str], returncode: int, stdout: str, stderr: str
) -> SlurmError:
    """The error for a command that exited non-zero: its stderr is Slurm's message."""
    message = _clean(stderr) or _clean(stdout) or f"{command[0]} exited {returncode}"
    if _UNREACHABLE.search(message):
        return SlurmUnreachable(message, command=command)
    return SlurmRejected(message, command=command, errno=errno_from_text(message))
