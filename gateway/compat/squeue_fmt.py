"""squeue's output, as Slurm 22.05 prints it: one field table, `-o`/`-O` parsers, the views.

`SQUEUE_FIELDS` declares every job field once: its `-o` letter, its `-O` name(s), its
header, the width and justification squeue's own views give it, and how its value is
computed. `parse_format` (`-o "%.18i %9P %j"`) and `parse_long_format`
(`-O "JobID:10,Name:.20"`) turn a user's specification into `FormatItem`s with
squeue's quirks (`%%` and unknown letters, a prefix before the first `%`, `-O` fields
without a width are 20 wide and left-justified, a suffix after the width is printed
verbatim). `render_squeue` filters, combines pending array tasks, sorts the way squeue
does (start time, then `-S`, default `P,t,-p`) and prints header and rows.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from gateway.compat.fmt_common import JobExtras, ctime_str, print_str
from gateway.compat.job_fields import SiteDefaults
from gateway.compat.job_fmt_values import job_values
from gateway.compat.squeue_fmt_fields import (
    _BY_LETTER,
    SQUEUE_FIELDS,
    FormatItem,
    SqueueField,
    SqueueRow,
    field_by_letter,
    field_by_name,
)
from gateway.compat.squeue_fmt_sort import sort_rows
from gateway.model.job import Job
from gateway.model.state import JobState

if TYPE_CHECKING:
    from gateway.compat.squeue_fmt_cache import LineCache

__all__ = [
    "DEFAULT_FORMAT_LONG",
    "LONG_FORMAT_LONG",
    "SQUEUE_FIELDS",
    "START_FORMAT",
    "FormatItem",
    "SqueueField",
    "SqueueOptions",
    "SqueueRow",
    "all_format",
    "format_errors",
    "parse_format",
    "parse_long_format",
    "render_squeue",
    "squeue_rows",
]

DEFAULT_FORMAT_LONG = (
    "jobarrayid:.18 ,partition:.9 ,name:.8 ,username:.8 ,statecompact:.2 ,"
    "timeused:.10 ,numnodes:.6 ,reasonlist:0"
)
LONG_FORMAT_LONG = (
    "jobarrayid:.18 ,partition:.9 ,name:.8 ,username:.8 ,state:.8 ,timeused:.10 ,"
    "timelimit:.9 ,numnodes:.6 ,reasonlist:0"
)
START_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.19S %.6D %20Y %R"


# --- parsing ---------------------------------------------------------------------------


def _parse_token(token: str) -> tuple[str, int, bool, str]:
    i = 0
    right = token.startswith(".")
    if right:
        i = 1
    width = 0
    while i < len(token) and token[i].isdigit():
        width = width * 10 + int(token[i])
        i += 1
    letter = token[i] if i < len(token) else ""
    return letter, width, right, token[i + 1 :]


def all_format(fmt: str) -> str | None:
    """`-o %all` (any case): every letter a-z then A-Z, `|` between them (opts.c); None
    for any other format."""
    if fmt.lower() != "%all":
        return None
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    letters += [chr(c) for c in range(ord("A"), ord("Z") + 1)]
    return "|".join(f"%{c}" for c in letters)


def format_errors(fmt: str, letters: Collection[str] | None = None, what: str = "job") -> list[str]:
    """squeue's error for each letter of `fmt` it does not know (`letters`: the step
    format's for `what` = "job step"; the job format's by default), as it says them while
    parsing; none for `%all`, which skips them."""
    pos = fmt.find("%")
    if pos < 0 or all_format(fmt) is not None:
        return []
    known = _BY_LETTER if letters is None else letters
    out = []
    for token in (t for t in fmt[pos:].split("%") if t):
        letter = _parse_token(token)[0]
        if letter and letter not in known:
            out.append(f"squeue: error: Invalid {what} format specification: {letter}")
    return out


def parse_format(fmt: str) -> list[FormatItem]:
    """`-o`: `%[.][width]letter` items; text before the first `%` is a prefix, text after a
    letter is its suffix. `%%` prints nothing (squeue tokenises on `%`); an unknown letter
    prints itself (`%-9P` prints `%-9P`), except in `%all`, which leaves it out."""
    expanded = all_format(fmt)
    items: list[FormatItem] = []
    pos = fmt.find("%")
    if pos != 0:
        items.append(FormatItem(None, 0, False, fmt if pos < 0 else fmt[:pos]))
    if pos < 0:
        return items
    for token in (t for t in (expanded or fmt[pos:]).split("%") if t):
        letter, width, right, suffix = _parse_token(token)
        found = _BY_LETTER.get(letter) if letter else None
        if found is None and expanded is None:
            items.append(FormatItem(None, width, right, "%" + token))
        elif found is not None:
            items.append(FormatItem(found, width, right, suffix))
    return items


def _strtol(text: str) -> tuple[int, str]:
    i = 0
    if i < len(text) and text[i] in "+-":
        i += 1
    j = i
    while j < len(text) and text[j].isdigit():
        j += 1
    if j == i:
        return 0, text
    return int(text[:j]), text[j:]


def parse_long_format(fmt: str) -> list[FormatItem]:
    """`-O`: comma-separated `name[:[.]width[suffix]]`; no width means 20, left-justified.
    An unknown name prints only its suffix."""
    items: list[FormatItem] = []
    for token in (t for t in fmt.split(",") if t):
        name, sep, spec = token.partition(":")
        width, right, suffix = 20, False, ""
        if sep:
            right = spec.startswith(".")
            width, suffix = _strtol(spec[1:] if right else spec)
        items.append(FormatItem(field_by_name(name), width, right, suffix))
    return items


def _render_item(item: FormatItem, row: SqueueRow | None) -> str:
    if item.field is None:
        return item.suffix
    f = item.field
    if row is None:
        return print_str(f.header, item.width, item.right, f.header_cut) + item.suffix
    value = f.value(row)
    if value is None or not value.isascii():
        return print_str(value, item.width, item.right, f.cut) + item.suffix
    # ASCII: a character is a byte, so print_str's byte arithmetic is str arithmetic
    # (10,000 lines: half of squeue's formatting time went to encoding and decoding)
    width = item.width
    if width > 0:
        if item.right:
            text = value.rjust(width)
            return (text[:width] if f.cut else text) + item.suffix
        return value[:width].ljust(width) + item.suffix
    return (value + " " if width < 0 else value) + item.suffix


def render_line(items: Sequence[FormatItem], row: SqueueRow | None) -> str:
    """One line (the header when `row` is None), without the newline."""
    return "".join(_render_item(i, row) for i in items)


# --- rows ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SqueueOptions:
    """What changes squeue's output (the filters squeue applies itself included)."""

    format: str | None = None  # -o
    format_long: str | None = None  # -O
    long: bool = False  # -l
    start: bool = False  # --start
    array: bool = False  # -r: one row per array task
    array_unique: bool = False  # --array-unique
    noheader: bool = False  # -h
    sort: str | None = None  # -S
    states: tuple[JobState, ...] | None = None  # -t (None: active jobs; () with all)
    all_states: bool = False  # -t all
    job_ids: tuple[str, ...] = ()  # -j (`123`, `123_4`)
    users: tuple[str, ...] = ()  # -u (names)
    partitions: tuple[str, ...] = ()  # -p
    names: tuple[str, ...] = ()  # -n
    max_array_size: int = 1001  # slurm.conf MaxArraySize (bounds `-r` expansion)
    site: SiteDefaults = field(default_factory=SiteDefaults)


_ACTIVE = (
    JobState.PENDING,
    JobState.RUNNING,
    JobState.STAGE_OUT,
    JobState.SUSPENDED,
    JobState.COMPLETING,
)


def _job_matches(job: Job, opts: SqueueOptions, states: tuple[JobState, ...] | None) -> bool:
    if opts.job_ids:
        tid = job.array_task_id
        wanted = False
        for text in opts.job_ids:
            base, _, task = text.partition("_")
            if task:
                if job.array_job_id == int(base) and (
                    tid == int(task)
                    or (job.array_pending is not None and int(task) in job.array_pending)
                ):
                    wanted = True
            elif int(base) in (job.job_id, job.array_job_id):
                wanted = True
        if not wanted:
            return False
    if not opts.all_states:
        allowed = states if states is not None else _ACTIVE
        if job.state not in allowed:
            return False
    if opts.users and job.user not in opts.users:
        return False
    if opts.names and job.spec.name.lower() not in {n.lower() for n in opts.names}:
        return False
    return not (opts.partitions and job.partition not in opts.partitions)


def _combine_pending(rows: list[SqueueRow], opts: SqueueOptions) -> list[SqueueRow]:
    """`_combine_pending_array_tasks`: fold pending tasks that slurmctld keeps as records of
    their own into their array's pending row (squeue then shows the plain `bit_fmt` list)."""
    if opts.array:
        return rows
    out = list(rows)
    # arrays with pending task records: any other meta row keeps its place (a quick test
    # first: the scan below visits every row for each meta row)
    split = (
        set()
        if opts.array_unique
        else {
            r.job.array_job_id
            for r in rows
            if r.job.array_task_id is not None and r.job.state is JobState.PENDING
        }
    )
    i = 0
    while i < len(out):
        meta = out[i]
        job = meta.job
        if (
            job.state is not JobState.PENDING
            or meta.task_str is None
            or not job.array_pending
            or job.array_job_id not in split
        ):
            i += 1
            continue
        tasks: list[int] = []
        desc = meta.values.job.state_desc
        keep: list[SqueueRow] = []
        for other in out:
            oj = other.job
            if (
                other is not meta
                and not opts.array_unique
                and oj.state is JobState.PENDING
                and oj.array_job_id == job.array_job_id
                and oj.array_task_id is not None
                and oj.spec.name == job.spec.name
                and other.partition == meta.partition
            ):
                tasks.append(oj.array_task_id)
                if oj.reason is not job.reason:
                    desc = desc or job.reason.value
                    if oj.reason.value not in desc:
                        desc = f"{desc},{oj.reason.value}"
            else:
                keep.append(other)
        if tasks:
            members = sorted({*job.array_pending.indices(), *tasks})
            text = _bit_fmt(members)
            new_job = replace(job, state_desc=desc)
            values = replace(meta.values, job=new_job)
            meta = replace(meta, values=values, task_str=text)
            keep = [meta if r is out[i] else r for r in keep]
            out = keep
        i += 1
    return out


def _bit_fmt(members: list[int], limit: int = 64) -> str:
    """`bit_fmt` of a set of indices into a SLURM_BITSTR_LEN (64) byte buffer."""
    parts: list[str] = []
    start = prev = members[0]
    for n in [*members[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    return ",".join(parts)[: limit - 1]


def squeue_rows(
    jobs: Sequence[Job],
    opts: SqueueOptions,
    *,
    now: float,
    extras: Mapping[int, JobExtras] | None = None,
) -> list[SqueueRow]:
    """The rows squeue prints, filtered, combined and sorted, before `-r` expansion."""
    states = opts.states
    if opts.start and states is None:
        states = (JobState.PENDING,)
    rows: list[SqueueRow] = []
    for job in jobs:
        if not _job_matches(job, opts, states):
            continue
        values = job_values(job, (extras or {}).get(job.job_id), opts.site)
        rows.append(
            SqueueRow(
                values=values,
                now=now,
                partition=job.partition,
                task_id=job.array_task_id,
                task_str=values.array_task_str,
            )
        )
    rows = _combine_pending(rows, opts)
    sort = opts.sort if opts.sort is not None else ("S" if opts.start else None)
    return sort_rows(rows, sort, now)


def _bitfmt2int(text: str, size: int) -> list[int]:
    """squeue's `bit_unfmt` of the shown task list (`%throttle` cut off), with Slurm's own
    quirks: a `a-b:s` range stops before `b`; indices beyond MaxArraySize stop the list."""
    text = text.split("%", 1)[0]
    out: list[int] = []
    if ":" in text:
        first, _, rest = text.partition("-")
        last, _, step = rest.partition(":")
        if not (first.isdigit() and last.isdigit() and step.isdigit()) or int(step) <= 0:
            return []
        return [i for i in range(int(first), int(last), int(step)) if i < size]
    pairs: list[tuple[int, int]] = []
    total, start = 0, -1
    for ch in text + "\0":
        if ch.isdigit():
            total = total * 10 + int(ch)
        elif ch == "-":
            start, total = total, 0
        elif ch in ",\0":
            pairs.append((total if start == -1 else start, total))
            start, total = -1, 0
    for lo, hi in pairs:
        if lo >= size or hi >= size:
            break
        out.extend(range(lo, hi + 1))
    return sorted(set(out))


def _expand_tasks(row: SqueueRow, max_array_size: int) -> list[SqueueRow]:
    if row.task_str is None:
        return [row]
    return [
        replace(row, task_id=i, task_str=None) for i in _bitfmt2int(row.task_str, max_array_size)
    ]


def _format_items(opts: SqueueOptions) -> list[FormatItem]:
    if opts.format is not None:
        return parse_format(opts.format)
    if opts.format_long is not None:
        return parse_long_format(opts.format_long)
    if opts.start:
        return parse_format(START_FORMAT)
    return parse_long_format(LONG_FORMAT_LONG if opts.long else DEFAULT_FORMAT_LONG)


def render_squeue(
    jobs: Sequence[Job],
    opts: SqueueOptions | None = None,
    *,
    now: float,
    extras: Mapping[int, JobExtras] | None = None,
    cache: LineCache | None = None,
) -> str:
    """squeue's full text output (each line ends with a newline). `cache` (without
    `extras`): lines kept from earlier calls, for the gateway that renders every squeue."""
    opts = opts or SqueueOptions()
    items = _format_items(opts)
    lines: list[str] = []
    if not opts.noheader:
        if opts.long:
            lines.append(ctime_str(now))
        lines.append(render_line(items, None))
    rows = squeue_rows(jobs, opts, now=now, extras=extras)
    if opts.array:
        rows = [r for row in rows for r in _expand_tasks(row, opts.max_array_size)]
    if cache is not None and extras is None:
        store = cache.lines_for(items, opts.site)
        lines.extend(cache.line(store, items, r) for r in rows)
        cache.trim(store, len(rows))
    else:
        lines.extend(render_line(items, r) for r in rows)
    lines.append("")
    return "\n".join(lines)


__all__ += ["field_by_letter", "field_by_name", "render_line"]
