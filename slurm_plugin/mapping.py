"""Pure translations between Caldera's records and a Slurm cluster's, both ways.

- ids: a Caldera job is one Slurm job; an array task `A_i` (Caldera starts tasks one by
  one) is a one-task Slurm array `S_i`, so `SLURM_ARRAY_TASK_ID` and `%a` stay `i`. The
  backend id is `S` or `S_i`.
- the tag: `caldera:<instance>:<job id>[/<run>]` at the start of the Slurm job's comment
  makes every submission findable (idempotent submit, reconcile after a restart); the run
  (Caldera's restart count) makes a job Caldera requeued a new Slurm job. While Caldera
  withdraws a job (slurm_plugin.withdraw) the tag is followed by `caldera-withdraw`: the
  intent survives a gateway killed half-way, and the cancelled job is recognisably withdrawn.
- states, reasons, exit codes (wait statuses) and signals.
- output paths: `%j`, `%A`, `%a` name Caldera's ids, not Slurm's.
- dependencies: Caldera ids to Slurm ids when every target runs on the same cluster.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from gateway.model.job import Job
from gateway.model.state import JobState, Reason, state_from_slurm
from gateway.model.values import ALL_TASKS, Dependency, DepItem, DepKind

__all__ = [
    "SlurmRef",
    "TargetInfo",
    "backend_id",
    "caldera_output_path",
    "make_tag",
    "marked_for_withdrawal",
    "native_dependency",
    "parse_backend_id",
    "parse_tag",
    "reason_from_slurm",
    "slurm_state",
    "tagged_comment",
    "user_comment",
    "withdrawal_comment",
]


@dataclass(frozen=True, slots=True)
class SlurmRef:
    """A Slurm job: its id and, for an array task, the task index."""

    job_id: int
    task: int | None = None

    @property
    def text(self) -> str:
        """`123` or `123_4`, as Slurm's commands accept it."""
        return f"{self.job_id}_{self.task}" if self.task is not None else str(self.job_id)


def backend_id(ref: SlurmRef) -> str:
    """The backend id Caldera stores for a Slurm job."""
    return ref.text


def parse_backend_id(text: str) -> SlurmRef:
    """`123` or `123_4` back to a SlurmRef; ValueError otherwise."""
    head, sep, tail = text.strip().partition("_")
    if not head.isdigit() or (sep and not tail.isdigit()):
        raise ValueError(f"not a Slurm job id: {text!r}")
    return SlurmRef(int(head), int(tail) if sep else None)


_TAG = re.compile(r"^caldera:([^:\s]+):(\d+)(?:/(\d+))?(?:\s|$)")


def make_tag(instance: str, job_id: int, run: int = 0) -> str:
    """The comment prefix that names the Caldera job (and its run: the restart count when
    Caldera requeued it) of a Slurm job: `caldera:gw:12`, `caldera:gw:12/1`."""
    return f"caldera:{instance}:{job_id}" + (f"/{run}" if run else "")


def parse_tag(comment: str | None, instance: str) -> tuple[int, int] | None:
    """(Caldera job id, run) from a Slurm job's comment, when this instance submitted it."""
    if not comment:
        return None
    m = _TAG.match(comment)
    if m is None or m.group(1) != instance:
        return None
    return int(m.group(2)), int(m.group(3) or 0)


def tagged_comment(instance: str, job_id: int, comment: str | None, run: int = 0) -> str:
    """The comment sent to Slurm: the tag, then the user's comment."""
    tag = make_tag(instance, job_id, run)
    return f"{tag} {comment}" if comment else tag


WITHDRAW_MARK = "caldera-withdraw"


def withdrawal_comment(instance: str, job_id: int, comment: str | None, run: int = 0) -> str:
    """The comment of a Slurm job Caldera is withdrawing: the tag, the mark, the user's."""
    return tagged_comment(instance, job_id, f"{WITHDRAW_MARK} {comment or ''}".strip(), run)


def marked_for_withdrawal(comment: str | None) -> bool:
    """Whether a tagged comment carries the withdrawal mark."""
    m = _TAG.match(comment or "")
    return m is not None and (comment or "")[m.end() :].split(" ", 1)[0] == WITHDRAW_MARK


def user_comment(comment: str | None) -> str | None:
    """The user's part of a tagged comment (without a withdrawal mark)."""
    if not comment:
        return None
    m = _TAG.match(comment)
    if m is None:
        return comment
    rest = comment[m.end() :].strip()
    if rest.split(" ", 1)[0] == WITHDRAW_MARK:
        rest = rest[len(WITHDRAW_MARK) :].strip()
    return rest or None


def slurm_state(text: str) -> JobState:
    """A Slurm state word (`RUNNING`, `CANCELLED by 0`, `CD`) as a JobState."""
    try:
        return state_from_slurm(text)
    except ValueError:
        return JobState.PENDING if not text else JobState.FAILED


def reason_from_slurm(text: str | None) -> tuple[Reason, str | None]:
    """Slurm's reason text as (Reason, the full text when it says more than the Reason).

    `ReqNodeNotAvail,_UnavailableNodes:big[001-064]` -> (REQ_NODE_NOT_AVAIL, that text);
    an unknown reason maps to NONE with its text kept.
    """
    if not text or text in ("None", "(null)"):
        return Reason.NONE, None
    head = re.split(r"[,\s]", text, maxsplit=1)[0]
    try:
        reason = Reason.parse(head)
    except ValueError:
        return Reason.NONE, text
    return reason, (text if head != text else None)


# --- output paths ---------------------------------------------------------------------

_PATTERN = re.compile(r"%(%|(\d*)([jJAa]))")


def caldera_output_path(pattern: str | None, job: Job, *, stderr: bool = False) -> str | None:
    """The `--output`/`--error` value that names the files after Caldera's ids.

    Slurm would expand `%j`, `%A` (and `%a`) to its own ids; they are replaced here by
    Caldera's, keeping Slurm's widths (`%5j`). Other patterns (`%x %u %N %n %t %s`) are
    left to Slurm. A pattern with a backslash is not expanded by Slurm and is passed as
    is. No pattern: Slurm's default `slurm-%j.out` (`slurm-%A_%a.out` for an array
    task) with Caldera's ids; None for stderr (it follows stdout).
    """
    if pattern is None:
        if stderr:
            return None
        if job.array_task_id is not None:
            return f"slurm-{job.array_job_id}_{job.array_task_id}.out"
        return f"slurm-{job.job_id}.out"
    if "\\" in pattern:
        return pattern

    def repl(m: re.Match[str]) -> str:
        if m.group(1) == "%":
            return "%%"
        width = min(int(m.group(2) or 0), 10)
        letter = m.group(3)
        if letter in "jJ":
            value = job.job_id
        elif letter == "A":
            value = job.array_job_id if job.array_task_id is not None else job.job_id
        else:  # %a: the task index, which Slurm knows too; keep Slurm's own for non-arrays
            if job.array_task_id is None:
                return m.group(0)
            value = job.array_task_id
        return str(value).zfill(width)

    return _PATTERN.sub(repl, pattern)


# --- dependencies ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TargetInfo:
    """What the backend knows about one Caldera job that a dependency names."""

    job_id: int
    ref: SlurmRef | None  # None: not (yet) a Slurm job of this cluster
    finished: bool
    array_job_id: int = 0
    array_task_id: int | None = None


def native_dependency(
    dep: Dependency | None,
    members: Callable[[int], list[TargetInfo]],
    this_task: int | None = None,
) -> str | None:
    """The `--dependency` value for Slurm, or None when there is nothing left to wait for.

    `members(job_id)` gives the known records of a Caldera job id (one, or every task of
    an array). Targets that finished are dropped (the gateway released this job, so it
    judged them); targets that are not Slurm jobs of this cluster are dropped too (the
    gateway holds such jobs until their dependencies are met). With `?` (any of), one
    finished or foreign target means the condition is already decided: no dependency.
    `aftercorr` becomes `afterok` on the matching task (Caldera submits tasks one by one).
    """
    if dep is None:
        return None
    parts: list[str] = []
    for item in dep.items:
        text = _native_item(item, members, this_task)
        if text is None:
            if dep.any_of:
                return None
            continue
        parts.append(text)
    if not parts:
        return None
    return ("?" if dep.any_of else ",").join(parts)


def _native_item(
    item: DepItem, members: Callable[[int], list[TargetInfo]], this_task: int | None
) -> str | None:
    if item.kind is DepKind.SINGLETON:
        return "singleton"
    if item.kind is DepKind.AFTER_BURST_BUFFER:
        return None
    infos = members(item.job_id)
    kind = item.kind
    if item.task is not None and item.task != ALL_TASKS:
        infos = [
            i
            for i in infos
            if i.array_task_id == item.task or (i.job_id == item.job_id and i.array_task_id is None)
        ]
    elif kind is DepKind.AFTER_CORR:
        if this_task is None:
            return None
        infos = [i for i in infos if i.array_task_id == this_task]
        kind = DepKind.AFTER_OK
    if not infos or any(i.ref is None for i in infos if not i.finished):
        return None
    active = [i for i in infos if not i.finished and i.ref is not None]
    if not active:
        return None
    delay = f"+{item.minutes}" if item.minutes else ""
    targets = ":".join(f"{i.ref.text}{delay}" for i in active if i.ref is not None)
    return f"{kind.value}:{targets}"
