"""`squeue -s`: the running steps of running jobs, in squeue's step format.

squeue prints steps with its own letters (`src/squeue/print.c`, `print_step_*`); the
default is `%.15i %.8j %.9P %.8u %.9M %N`. Widths cut as squeue's `_print_str` does. A
letter it does not know prints itself (and squeue says so: `format_errors`), except in
`%all`, which leaves it out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from gateway.compat.duration import mins_to_str
from gateway.compat.fmt_common import make_time_str, secs_short
from gateway.compat.hostlist import compress
from gateway.compat.squeue_fmt import all_format
from gateway.model.job import Job, Step
from gateway.model.state import JobState
from gateway.model.values import INFINITE

__all__ = ["STEP_FORMAT", "STEP_LETTERS", "render_steps"]

STEP_FORMAT = "%.15i %.8j %.9P %.8u %.9M %N"


@dataclass(frozen=True, slots=True)
class _Row:
    step: Step
    job: Job
    now: float


def _used(r: _Row) -> str:
    start = r.step.start_time or r.now
    return secs_short(int(r.now - start))


def _limit(r: _Row) -> str:
    return "UNLIMITED" if r.job.time_limit == INFINITE else mins_to_str(r.job.time_limit)


def _tres_per_node(r: _Row) -> str:
    """%b: the step's `--gres` as slurmctld keeps it (`gres:gpu:1`; `--gpus` and a step
    without the option: (null), seen on the test cluster)."""
    return r.step.extra.get("tres_per_node") or "(null)"


_FIELDS: Mapping[str, tuple[str, Callable[[_Row], str]]] = {
    "b": ("TRES_PER_JOB", _tres_per_node),  # the header squeue prints for it
    "i": ("STEPID", lambda r: f"{r.step.job_id}.{r.step.step_id}"),
    "j": ("NAME", lambda r: r.step.name),
    "P": ("PARTITION", lambda r: r.job.partition),
    "u": ("USER", lambda r: r.job.user),
    "U": ("UID", lambda r: str(r.job.uid)),
    "M": ("TIME", _used),
    "l": ("TIME_LIMIT", _limit),
    "N": ("NODELIST", lambda r: compress(r.step.nodes)),
    "A": ("TASKS", lambda r: str(r.step.ntasks)),
    "S": ("START_TIME", lambda r: make_time_str(r.step.start_time)),
}


STEP_LETTERS = frozenset(_FIELDS)

# slurmctld's ids of the special steps (SLURM_INTERACTIVE_STEP, _BATCH_SCRIPT, _EXTERN_CONT)
_SPECIAL = {"interactive": 0xFFFFFFFA, "batch": 0xFFFFFFFB, "extern": 0xFFFFFFFC}


def _step_rank(step_id: str) -> int:
    """squeue's default step order (`P,i`): by partition, then numeric step id, the
    special steps (their ids near 2**32) after the numbered ones."""
    head = step_id.split("+")[0]
    return int(head) if head.isdigit() else _SPECIAL.get(head, 0xFFFFFFFF)


def _cell(text: str, width: int, right: bool) -> str:
    if not width:
        return text
    text = text[:width]
    return text.rjust(width) if right else text.ljust(width)


def _items(fmt: str) -> list[tuple[str | None, int, bool, str]]:
    """(letter, width, right-justified, text after it); a letter None prints its text."""
    out: list[tuple[str | None, int, bool, str]] = []
    expanded = all_format(fmt)
    pos = fmt.find("%")
    if pos != 0:
        out.append((None, 0, False, fmt if pos < 0 else fmt[:pos]))
    if pos < 0:
        return out
    for token in (t for t in (expanded or fmt[pos:]).split("%") if t):
        i = 1 if token.startswith(".") else 0
        right = i == 1
        j = i
        while j < len(token) and token[j].isdigit():
            j += 1
        width = int(token[i:j] or 0)
        letter = token[j : j + 1]
        if letter in _FIELDS:
            out.append((letter, width, right, token[j + 1 :]))
        elif expanded is None:
            out.append((None, 0, False, "%" + token))
    return out


def render_steps(
    steps: Sequence[Step],
    jobs: Mapping[int, Job],
    *,
    now: float,
    fmt: str | None = None,
    noheader: bool = False,
) -> str:
    """squeue -s text: a header, then one line per running step of a running job."""
    items = _items(fmt or STEP_FORMAT)
    lines = []
    if not noheader:
        lines.append("".join((_cell(_FIELDS[k][0], w, r) if k else "") + s for k, w, r, s in items))
    rows = sorted(
        (
            _Row(s, jobs[s.job_id], now)
            for s in steps
            if s.state is JobState.RUNNING
            and s.job_id in jobs
            and jobs[s.job_id].state is JobState.RUNNING
        ),
        key=lambda r: (r.job.partition, r.step.job_id, _step_rank(r.step.step_id)),
    )
    for row in rows:
        lines.append(
            "".join((_cell(_FIELDS[k][1](row), w, r) if k else "") + s for k, w, r, s in items)
        )
    return "".join(line + "\n" for line in lines)
