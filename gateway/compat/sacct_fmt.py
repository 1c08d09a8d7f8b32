"""sacct's output, as Slurm 22.05 prints it: one field table, `-o field%width`, the views.

`SACCT_FIELDS` declares every field once with sacct's default width (negative: left
justified) and how it prints (string, number, date, duration). Values too long for their
column end in `+`; `-p`/`-P` print `|`-separated values without padding. Jobs print in
sacct's order (submit time, array job, array task, job id), each followed by its steps
(`123.batch`, `123.extern`, `123.0`) unless `-X`. A requeued job has a record per run
(`Job.restart_count`), each with the steps of its run (`Step.run`); `-D` prints them all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gateway.compat.duration import secs_to_str
from gateway.compat.fmt_common import (
    JobExtras,
    byte_len,
    c_str,
    make_time_str,
    msort,
)
from gateway.compat.job_fields import SiteDefaults
from gateway.compat.job_fmt_values import job_values
from gateway.compat.sacct_fmt_fields import SACCT_FIELDS, Kind, Rec, SacctField, Value
from gateway.model.job import Job, Step
from gateway.model.values import NO_VAL

__all__ = [
    "BRIEF_FIELDS",
    "DEFAULT_FIELDS",
    "LONG_FIELDS",
    "SACCT_FIELDS",
    "SacctField",
    "SacctFieldError",
    "SacctOptions",
    "parse_sacct_fields",
    "render_sacct",
    "run_steps",
    "sacct_order",
]

DEFAULT_FIELDS = "jobid,jobname,partition,account,alloccpus,state,exitcode"
BRIEF_FIELDS = "jobid,state,exitcode"
LONG_FIELDS = (
    "jobid,jobidraw,jobname,partition,maxvmsize,maxvmsizenode,maxvmsizetask,avevmsize,"
    "maxrss,maxrssnode,maxrsstask,averss,maxpages,maxpagesnode,maxpagestask,avepages,"
    "mincpu,mincpunode,mincputask,avecpu,ntasks,alloccpus,elapsed,state,exitcode,"
    "avecpufreq,reqcpufreqmin,reqcpufreqmax,reqcpufreqgov,reqmem,consumedenergy,"
    "maxdiskread,maxdiskreadnode,maxdiskreadtask,avediskread,maxdiskwrite,maxdiskwritenode,"
    "maxdiskwritetask,avediskwrite,reqtres,alloctres,tresusageinave,tresusageinmax,"
    "tresusageinmaxn,tresusageinmaxt,tresusageinmin,tresusageinminn,tresusageinmint,"
    "tresusageintot,tresusageoutmax,tresusageoutmaxn,tresusageoutmaxt,tresusageoutave,"
    "tresusageouttot"
)


class SacctFieldError(ValueError):
    """`Invalid field requested: "x"` (sacct exits 1)."""


def parse_sacct_fields(spec: str) -> list[tuple[SacctField, int]]:
    """`-o`/`--format`: comma list of names, each matched as a case-insensitive prefix of
    the table's names in table order (`end` is End, `state` State), optionally `%width`
    (`%-20` left-justifies); `ALL` selects every field."""
    out: list[tuple[SacctField, int]] = []
    for raw in spec.split(","):
        token = raw.strip()
        if not token:
            continue
        width: int | None = None
        if "%" in token:
            token, _, num = token.partition("%")
            width = _atoi(num)
        if token.lower() == "all"[: len(token)] and token:
            out.extend((f, width if width is not None else f.width) for f in SACCT_FIELDS)
            continue
        found = next((f for f in SACCT_FIELDS if f.name.lower().startswith(token.lower())), None)
        if found is None:
            raise SacctFieldError(f'Invalid field requested: "{token}"')
        out.append((found, width if width is not None else found.width))
    return out


def _atoi(text: str) -> int:
    sign, i = 1, 0
    if text[:1] in "+-":
        sign, i = (-1 if text[0] == "-" else 1), 1
    j = i
    while j < len(text) and text[j].isdigit():
        j += 1
    return sign * int(text[i:j]) if j > i else 0


# --- rendering -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SacctOptions:
    """What changes sacct's output."""

    fields: str | None = None  # -o/--format (None: the default or -b/-l set)
    brief: bool = False  # -b
    long: bool = False  # -l
    allocations: bool = False  # -X: no step lines
    duplicates: bool = False  # -D: every record of a requeued job, not only the newest
    parsable: bool = False  # -p: `|` after every field
    parsable2: bool = False  # -P: `|` between fields
    delimiter: str | None = None  # --delimiter (with -p/-P)
    noheader: bool = False  # -n
    site: SiteDefaults = field(default_factory=SiteDefaults)


def _cell(f: SacctField, width: int, value: Value, mode: int, last: bool, delim: str) -> str:
    """One field as print_fields_* prints it; mode 0 fixed, 1 `-p`, 2 `-P`."""
    if f.kind is Kind.DATE:
        abs_len = abs(width)
        text = make_time_str(value if isinstance(value, int | float) else 0, abs_len + 1)
        if mode:
            return text if mode == 2 and last else text + delim
        return _pad(text, width, abs_len)
    if f.kind in (Kind.UINT, Kind.SECS):
        if value is None:
            if mode:
                return "" if mode == 2 and last else delim
            return " ".rjust(width) + " " if width >= 0 else " ".ljust(-width) + " "
        text = secs_to_str(int(value)) if f.kind is Kind.SECS else str(value)
        if mode:
            return text if mode == 2 and last else text + delim
        return (text.rjust(width) if width >= 0 else text.ljust(-width)) + " "  # `%*s`
    sval: str | None = value if isinstance(value, str) else (None if value is None else str(value))
    if mode:
        shown = sval or ""
        return shown if mode == 2 and last else shown + delim
    abs_len = abs(width)
    if sval is None:
        shown = " "
    else:
        shown = sval
        if byte_len(sval) > abs_len:
            shown = c_str(sval, abs_len - 1) + "+" if abs_len else ""
    return _pad(shown, width, abs_len)


def _pad(text: str, width: int, abs_len: int) -> str:
    cut = c_str(text, abs_len)
    pad = abs_len - byte_len(cut)
    return (" " * pad + cut if width == abs_len else cut + " " * pad) + " "


def sacct_order(jobs: Sequence[Job]) -> list[Job]:
    """sacct's job order: submit time, array job id, array task id, job id."""

    def cmp(a: Job, b: Job) -> int:
        def key(j: Job) -> tuple[int, int, int, int]:
            task = j.array_task_id if j.array_task_id is not None else NO_VAL
            return int(j.submit_time), j.array_job_id, task, j.job_id

        ka, kb = key(a), key(b)
        return (ka > kb) - (ka < kb)

    return msort(list(jobs), cmp)


def _newest_records(jobs: Sequence[Job]) -> list[Job]:
    """slurmdbd without JOBCOND_FLAG_DUP: a requeued job's newest record only."""
    newest: dict[int, Job] = {}
    for job in jobs:
        seen = newest.get(job.job_id)
        if seen is None or (job.submit_time, job.restart_count) > (
            seen.submit_time,
            seen.restart_count,
        ):
            newest[job.job_id] = job
    return [j for j in jobs if newest[j.job_id] is j]


def run_steps(job: Job, steps: Mapping[int, Sequence[Step]] | None) -> list[Step]:
    """The steps of this record's run (a requeued job's earlier runs have their own)."""
    return [s for s in (steps or {}).get(job.job_id, ()) if s.run == job.restart_count]


def _selected(opts: SacctOptions) -> list[tuple[SacctField, int]]:
    spec = ""
    if opts.brief:
        spec += BRIEF_FIELDS + ","
    if opts.long:
        spec += LONG_FIELDS + ","
    if opts.fields is not None:
        spec += opts.fields + ","
    if not spec:
        spec = DEFAULT_FIELDS
    return parse_sacct_fields(spec)


def render_sacct(
    jobs: Sequence[Job],
    steps: Mapping[int, Sequence[Step]] | None = None,
    opts: SacctOptions | None = None,
    *,
    now: float,
    extras: Mapping[int, JobExtras] | None = None,
) -> str:
    """sacct's full text output for these job records (already selected by the caller)
    and their steps (keyed by the record's job id)."""
    opts = opts or SacctOptions()
    selected = _selected(opts)
    mode = 2 if opts.parsable2 else 1 if opts.parsable else 0
    delim = opts.delimiter if opts.delimiter is not None else "|"
    lines: list[str] = []
    if not opts.noheader:
        if mode:
            lines.append(
                "".join(
                    f.name if mode == 2 and i == len(selected) - 1 else f.name + delim
                    for i, (f, _) in enumerate(selected)
                )
            )
        else:
            lines.append("".join(_pad(f.name, w, abs(w)) for f, w in selected))
            lines.append("".join("-" * abs(w) + " " for _, w in selected))
    if not opts.duplicates:
        jobs = _newest_records(jobs)
    for job in sacct_order(jobs):
        values = job_values(job, (extras or {}).get(job.job_id), opts.site)
        recs = [Rec(values, None, now)]
        if not opts.allocations:
            recs.extend(Rec(values, s, now) for s in run_steps(job, steps))
        for rec in recs:
            cells = [
                _cell(f, w, f.value(rec), mode, i == len(selected) - 1, delim)
                for i, (f, w) in enumerate(selected)
            ]
            lines.append("".join(cells))
    return "".join(line + "\n" for line in lines)
