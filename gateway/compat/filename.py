"""Output/error/input file name patterns (`-o slurm-%A_%3a.out`).

Slurm expands these in two places with two different rules, and both are visible to users:
- slurmstepd opens the file (`fname_create`): %% %A %a %J %j %n %N %s %t %u %x, widths
  like %3a (at most 10), and a backslash anywhere disables expansion;
- `scontrol show job` prints StdOut/StdErr/StdIn (`_fname_format`): only %A %a %j %u %x.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.compat.cnum import strtoul

__all__ = [
    "NO_TASK",
    "PatternContext",
    "default_output",
    "expand_for_display",
    "expand_for_open",
]

NO_TASK = 0xFFFF_FFFE  # Slurm's NO_VAL: not an array task (printed as such by %a)
_MAX_WIDTH = 10


@dataclass(frozen=True, slots=True)
class PatternContext:
    """What a pattern can refer to."""

    job_id: int
    job_name: str
    user: str
    workdir: str
    array_job_id: int = 0
    array_task_id: int = NO_TASK
    node_name: str = ""
    node_id: int = 0
    task_id: int = 0
    step: str = "batch"  # %s for the batch step; a number for others


def _remove_path_slashes(p: str) -> str | None:
    """Unescape `\\x`; None when the pattern has no backslash."""
    if "\\" not in p:
        return None
    out: list[str] = []
    i = 0
    while i < len(p):
        if p[i] == "\\" and p[i + 1 : i + 2] == "\\":
            out.append("\\")
            i += 2
        elif p[i] == "\\":
            i += 1
        else:
            out.append(p[i])
            i += 1
    return "".join(out)


def _field(letter: str, width: int, ctx: PatternContext) -> str | None:
    def num(value: int) -> str:
        return str(value).zfill(width)

    if letter == "a":
        return num(ctx.array_task_id)
    if letter == "A":
        return num(ctx.job_id if ctx.array_task_id == NO_TASK else ctx.array_job_id)
    if letter in "jJ":
        return num(ctx.job_id)
    if letter == "n":
        return num(ctx.node_id)
    if letter == "N":
        return ctx.node_name
    if letter == "s":
        return ctx.step if not ctx.step.isdigit() else num(int(ctx.step))
    if letter == "t":
        return num(ctx.task_id)
    if letter == "u":
        return ctx.user
    if letter == "x":
        return ctx.job_name
    return None


def _expand_batch(path: str, ctx: PatternContext) -> str:
    """`_create_batch_fname`, including its handling of widths before unknown letters."""
    out: list[str] = []
    q = p = 0
    n = len(path)
    while p < n:
        if path[p] != "%":
            p += 1
            continue
        if p + 1 < n and path[p + 1] == "%":
            p += 1
            out.append(path[q:p])
            p += 1
            q = p
            continue
        p += 1
        width = 0
        if p < n and path[p].isdigit():
            out.append(path[q : p - 1])
            value, end = strtoul(path, p)
            width = min(value, _MAX_WIDTH)
            p = end
            q = p - 1
            if p >= n:
                break
        if p < n:
            text = _field(path[p], width, ctx)
            if text is not None:
                out.append(path[q : max(q, p - 1)])
                out.append(text)
                p += 1
                q = p
    if q != p:
        out.append(path[q:p])
    return "".join(out)


def expand_for_open(pattern: str, ctx: PatternContext) -> str:
    """The absolute path slurmstepd opens for the batch step (`fname_create`)."""
    whole, end = strtoul(pattern)
    if pattern and end == len(pattern) and whole != ctx.task_id:
        return "/dev/null"
    escaped = _remove_path_slashes(pattern)
    prefix = ""
    if not pattern.startswith("/"):
        prefix = ctx.workdir
        if escaped is not None:
            return prefix + escaped
        if not prefix.endswith("/"):
            prefix += "/"
    if escaped is not None:
        return escaped
    return prefix + _expand_batch(pattern, ctx)


def default_output(is_array: bool) -> str:
    """The pattern used when no `--output` was given."""
    return "slurm-%A_%a.out" if is_array else "slurm-%J.out"


def expand_for_display(pattern: str | None, ctx: PatternContext, is_stdin: bool = False) -> str:
    """StdOut/StdErr/StdIn as `scontrol show job` prints them (`slurm_get_job_stdout`)."""
    if pattern is None:
        if is_stdin:
            return "/dev/null"
        if ctx.array_job_id:
            return f"{ctx.workdir}/slurm-{ctx.array_job_id}_{ctx.array_task_id}.out"
        return f"{ctx.workdir}/slurm-{ctx.job_id}.out"
    text = pattern
    array_id = ctx.job_id if ctx.array_task_id == NO_TASK else ctx.array_job_id
    text = text.replace("%A", str(array_id))
    text = text.replace("%a", str(ctx.array_task_id))
    text = text.replace("%j", str(ctx.job_id))
    text = text.replace("%u", ctx.user)
    text = text.replace("%x", ctx.job_name)
    return text if text.startswith("/") else f"{ctx.workdir}/{text}"
