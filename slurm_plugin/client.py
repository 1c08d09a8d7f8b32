"""One interface to a Slurm cluster, whatever the transport (commands, slurmrestd, pyslurm).

`SlurmClient` is what the backend uses; `CliClient` (slurm_plugin.cli), `RestClient`
(slurm_plugin.rest) and `PyslurmClient` (slurm_plugin.pyslurm_client) implement it. Every
method raises `SlurmUnreachable` (retryable) when the cluster does not answer and
`SlurmRejected` with Slurm's message when it refuses.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from gateway.model.jobspec import JobSpec
from gateway.model.state import JobState
from slurm_plugin.from_slurm_json import SlurmAccounting, SlurmCluster
from slurm_plugin.mapping import SlurmRef

__all__ = [
    "Identity",
    "JobStatus",
    "RowFilter",
    "SlurmClient",
    "SubmitRequest",
]


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a request is made as: the job's user (uid/gid) or None for the gateway itself."""

    user: str
    uid: int
    gid: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SubmitRequest:
    """One batch submission, already translated for the cluster.

    `options` are sbatch's long options (`--partition=real`), `spec` the same request as a
    JobSpec (what slurmrestd's job description is built from); both say the same thing.
    """

    script: str
    options: tuple[str, ...]
    spec: JobSpec
    environment: Mapping[str, str]
    workdir: str
    identity: Identity
    tag: str
    array_task: int | None = None
    dependency: str | None = None
    script_args: tuple[str, ...] = ()
    export_none: bool = False  # --export=NONE: the job starts from the user's login env


@dataclass(frozen=True, slots=True, kw_only=True)
class JobStatus:
    """What the backend tracks of a Slurm job (one row of squeue)."""

    ref: SlurmRef
    state: JobState
    reason: str = "None"
    state_desc: str | None = None
    user: str = ""
    name: str = ""
    partition: str = ""
    comment: str = ""
    nodes: tuple[str, ...] = ()
    submit_time: float | None = None
    start_time: float | None = None
    end_time: float | None = None
    exit_code: int | None = None  # wait status; None: not known from this source
    derived_exit_code: int | None = None
    restart_count: int | None = None
    time_limit: int | None = None
    array_job_id: int = 0
    extra: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RowFilter:
    """Which rows of Slurm's queue a caller wants: these Slurm job ids (raw or array job
    ids) and jobs whose comment starts with a prefix (a Caldera tag). Applied before a
    row is decoded: Slurm's queue may hold thousands of other jobs."""

    job_ids: frozenset[int] = frozenset()
    comment_prefix: str | None = None

    def keeps(self, raw_id: int, array_id: int, comment: str) -> bool:
        """Whether a row is wanted."""
        if raw_id in self.job_ids or (array_id and array_id in self.job_ids):
            return True
        return self.comment_prefix is not None and comment.startswith(self.comment_prefix)


@runtime_checkable
class SlurmClient(Protocol):
    """What Caldera asks of a Slurm cluster."""

    name: str

    def ping(self) -> None:
        """Raise SlurmUnreachable when the controller does not answer."""
        ...

    def version(self) -> str:
        """Slurm's version (`22.05.8`)."""
        ...

    def submit(self, request: SubmitRequest) -> SlurmRef:
        """Submit a batch job; the Slurm job (for `--array=i`, task i of it)."""
        ...

    def statuses(
        self, users: Collection[str] | None = None, keep: RowFilter | None = None
    ) -> list[JobStatus]:
        """Every job slurmctld knows (of these users; that `keep` wants), finished ones
        within MinJobAge. Cheap and frequent; exit codes may be None (see `status`)."""
        ...

    def status(self, refs: Sequence[SlurmRef]) -> list[JobStatus]:
        """These jobs with exit codes; jobs slurmctld forgot are left out."""
        ...

    def signal(
        self,
        ref: SlurmRef,
        signal: int | None,
        *,
        batch_only: bool = False,
        step: int | None = None,
        identity: Identity | None = None,
    ) -> None:
        """scancel (signal None) or send a signal (to one step of the job with `step`)."""
        ...

    def control(self, ref: SlurmRef, action: str, identity: Identity | None = None) -> None:
        """`hold`, `uhold` or `release`."""
        ...

    def update(
        self, ref: SlurmRef, fields: Mapping[str, str], identity: Identity | None = None
    ) -> None:
        """scontrol update JobId=... Key=Value (e.g. TimeLimit=10)."""
        ...

    def accounting(self, refs: Sequence[SlurmRef]) -> SlurmAccounting:
        """slurmdbd's records (with steps) of these jobs, with correct exit codes."""
        ...

    def submit_lines(self, user: str, since: float) -> dict[int, str]:
        """slurmdbd's submit line of the jobs a user submitted since a time (by job id)."""
        ...

    def cluster(self) -> SlurmCluster:
        """Nodes and partitions (discovery)."""
        ...
