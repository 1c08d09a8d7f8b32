"""Job dependency expressions (`--dependency`) as slurmctld reads them.

Grammar (Slurm 22.05, `update_job_dependency`): items separated by `,` (all must hold) or
`?` (any may hold); an item is `singleton`, a bare job id (afterany), or
`type:job[_task|_*][+minutes][(state)][:job...]` with type one of after, afterany,
afterok, afternotok, aftercorr, afterburstbuffer. `job_[1-3]` expands to each task.
Slurm's quirks are kept: a `+minutes` delay carries over to the later jobs of the same
list, a `(state)` is searched in the whole rest of the text, a repeated item is kept
once. Whether the named jobs exist is not checked (Slurm does not either). The types
(`Dependency`, `DepItem`, ...) live in `gateway.model.values`; this module reads them.
"""

from __future__ import annotations

from gateway.compat.cnum import strtol, to_int32, to_uint32
from gateway.compat.errors import CompatError, Diagnostic, Level
from gateway.compat.slurm_errors import SlurmErrno
from gateway.model.values import ALL_TASKS, Dependency, DepItem, DepKind, DepState

__all__ = [
    "DependencyError",
    "parse_dependency",
]

_INFINITE = 0xFFFF_FFFF  # what `_*` is stored as
_NO_VAL = 0xFFFF_FFFE  # "no task"
_DEFAULT_MAX_ARRAY = 1001


class DependencyError(CompatError):
    """What slurmctld answers to a dependency it cannot read."""

    def __init__(self, errno: SlurmErrno) -> None:
        super().__init__(
            Diagnostic(Level.ERROR, f"Batch job submission failed: {errno.text}"), exit_code=1
        )
        self.errno = errno


# Slurm compares these many leading characters, case-insensitively, in this order.
_PREFIXES: tuple[tuple[str, DepKind | None], ...] = (
    ("afternotok:", DepKind.AFTER_NOT_OK),
    ("aftercorr:", DepKind.AFTER_CORR),
    ("afterany:", DepKind.AFTER_ANY),
    ("afterok:", DepKind.AFTER_OK),
    ("afterburstb", DepKind.AFTER_BURST_BUFFER),  # Slurm compares only 11 characters
    ("after:", DepKind.AFTER),
    ("expand:", None),  # job expansion: not permitted here
)


class _Invalid(Exception):
    def __init__(self, errno: SlurmErrno = SlurmErrno.DEPENDENCY) -> None:
        super().__init__(errno.text)
        self.errno = errno


def _parse_state(s: str, pos: int) -> tuple[DepState, int]:
    """`_parse_depend_state`: an optional `(failed)`; any other word is unfulfilled.

    Like Slurm, the parenthesis is searched in the whole rest of the string and parsing
    resumes after the `)`.
    """
    opening = s.find("(", pos)
    if opening < 0:
        return DepState.UNFULFILLED, pos
    close = s.find(")", pos)
    if close < 0:
        raise _Invalid
    word = s[opening + 1 : close] if close > opening else s[opening + 1 :]
    state = DepState.FAILED if word.lower() == "failed" else DepState.UNFULFILLED
    return state, close + 1


def _task(value: int) -> int | None:
    task = to_uint32(value)
    if task == _INFINITE:
        return ALL_TASKS
    return None if task == _NO_VAL else task


def _job_and_task(s: str, pos: int) -> tuple[int, int | None, int]:
    value, end = strtol(s, pos)
    job_id = to_uint32(value)
    task: int | None = None
    if s[end : end + 1] == "_":
        if s[end + 1 : end + 2] == "*":
            task, end = ALL_TASKS, end + 2
        else:
            t, end = strtol(s, end + 1)
            task = _task(t)
    return job_id, task, end


def _add(items: list[DepItem], item: DepItem) -> None:
    """`_add_dependency_to_list`: a repeated job, task and type is kept once."""
    if not any((i.job_id, i.task, i.kind) == (item.job_id, item.task, item.kind) for i in items):
        items.append(item)


def _parse_job_list(s: str, pos: int, kind: DepKind, out: list[DepItem]) -> int:
    """`_parse_dependency_jobid_new`; returns the index just past the list."""
    minutes = 0  # Slurm keeps the delay for the later jobs of the list
    while True:
        job_id, task, end = _job_and_task(s, pos)
        if job_id == 0 or (end < len(s) and s[end] not in ",?:+("):
            raise _Invalid
        if s[end : end + 1] == "+":
            value, end = strtol(s, end + 1)
            minutes = to_int32(value)  # a C int
            if minutes <= 0:
                raise _Invalid
        state, end = _parse_state(s, end)
        _add(out, DepItem(kind, job_id, task, minutes, state))
        if s[end : end + 1] != ":":
            return end
        pos = end + 1


def _bitmap(body: str, max_size: int) -> list[int] | None:
    """`bit_unfmt` into a MaxArraySize bitmap: the set indices, None when invalid."""
    if ":" in body:  # `first-last:step` (Slurm's loop stops before `last`)
        first, end = strtol(body)
        if body[end : end + 1] != "-":
            return None
        last, end = strtol(body, end + 1)
        if body[end : end + 1] != ":":
            return None
        step, end = strtol(body, end + 1)
        if end != len(body) or last < first or step <= 0:
            return None
        pairs = [(i, i) for i in range(first, last, step)]
    else:
        pairs = []
        total, start = 0, -1
        for i, ch in enumerate(body + "\0"):
            if "0" <= ch <= "9":
                total = total * 10 + ord(ch) - 48
            elif ch == "-":
                start, total = total, 0
            elif ch in ",\0":
                if i == 0:
                    break
                pairs.append((total if start == -1 else start, total))
                start, total = -1, 0
    found: set[int] = set()
    for lo, hi in pairs:
        if lo < 0 or lo >= max_size or hi < 0 or hi >= max_size:
            return None
        found.update(range(lo, hi + 1))
    return sorted(found) or None


def _expand_array_brackets(spec: str, max_size: int) -> str:
    """`_xlate_array_dep`: `afterok:7_[1-3]` -> `afterok:7_1:7_2:7_3`."""
    if "_[" not in spec:
        return spec
    out: list[str] = []
    i, job_start = 0, -1
    while i < len(spec):
        ch = spec[i]
        out.append(ch)
        if "0" <= ch <= "9":
            if job_start < 0:
                job_start = i
        elif ch == "_" and spec[i + 1 : i + 2] == "[" and job_start >= 0:
            job_id = to_uint32(strtol(spec, job_start)[0])
            close = spec.find("]", i + 2)
            tasks = _bitmap(spec[i + 2 : close], max_size) if close >= 0 else None
            if not tasks:
                return spec
            out.append(str(tasks[0]))
            out.extend(f":{job_id}_{t}" for t in tasks[1:])
            i = close
            job_start = -1
        else:
            job_start = -1
        i += 1
    return "".join(out)


def _parse(s: str) -> Dependency:
    items: list[DepItem] = []
    any_of = False
    pos = 0
    while True:
        if s[pos : pos + 9].lower() == "singleton":
            state, pos = _parse_state(s, pos + 9)
            _add(items, DepItem(DepKind.SINGLETON, state=state))
            sep = s[pos : pos + 1]
            if sep in (",", "?"):
                any_of = any_of or sep == "?"
                pos += 1
                continue
            if sep:
                raise _Invalid
            break
        colon = s.find(":", pos)
        if colon < 0:
            if not s[pos : pos + 1].isdigit():
                raise _Invalid
            job_id, task, end = _job_and_task(s, pos)
            if job_id == 0 or (end < len(s) and s[end] != ","):
                raise _Invalid
            _add(items, DepItem(DepKind.AFTER_ANY, job_id, task))
            if s[end : end + 1] == ",":
                pos = end + 1
                continue
            break
        low = s[pos:].lower()
        found = next(((p, k) for p, k in _PREFIXES if low.startswith(p)), None)
        if found is None:
            raise _Invalid
        if found[1] is None:
            raise _Invalid(SlurmErrno.NOT_SUPPORTED)
        pos = _parse_job_list(s, colon + 1, found[1], items)
        sep = s[pos : pos + 1]
        if sep not in (",", "?"):
            break  # after a job list Slurm stops here, ignoring any trailing text
        any_of = any_of or sep == "?"
        pos += 1
    return Dependency(tuple(items), any_of)


def parse_dependency(spec: str, max_array_size: int = _DEFAULT_MAX_ARRAY) -> Dependency:
    """Parse `--dependency`; raises DependencyError as slurmctld refuses it.

    An empty string or `0` clears dependencies (an empty Dependency). `max_array_size`
    bounds the task indices of `job_[...]` (the cluster's MaxArraySize).
    """
    if spec in ("", "0"):
        return Dependency(())
    try:
        return _parse(_expand_array_brackets(spec, max_array_size))
    except _Invalid as exc:
        raise DependencyError(exc.errno) from None
