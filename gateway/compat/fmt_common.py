"""Helpers shared by Caldera's squeue/sacct/sinfo/scontrol formatters, as Slurm 22.05 prints.

Slurm's commands pad and cut with printf (`%18s`, `%.8s`), print times with localtime
(`%FT%T`), durations as `M:SS` (squeue, sinfo) or `HH:MM:SS` (sacct, scontrol), memory with
`convert_num_unit`, node lists in hostlist form (`gateway.compat.hostlist`), and sort with
glibc's merge sort (`gateway.compat.glibc_sort`). These functions are those rules, pure (no
IO; the current time is always passed in).

`JobExtras`, `NodeExtras` and `PartitionExtras` carry the facts Slurm prints that Caldera's
model records do not hold (yet); every field is optional and the formatters derive a value
from the model when it is None.
"""

from __future__ import annotations

import time as _time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from gateway.compat import hostlist
from gateway.compat.glibc_sort import msort
from gateway.model.values import INFINITE, NO_VAL

__all__ = [
    "JobExtras",
    "JsonValue",
    "NodeExtras",
    "PartitionExtras",
    "byte_len",
    "c_str",
    "convert_num_unit",
    "ctime_str",
    "hostlist_compress",
    "hostlist_expand",
    "json_c_dumps",
    "make_time_str",
    "msort",
    "print_str",
    "secs_short",
]

NULL: Final = "(null)"
YEAR_SECONDS: Final = 365 * 24 * 60 * 60


@dataclass(frozen=True, slots=True, kw_only=True)
class JobExtras:
    """What slurmctld/slurmdbd report about a job that `Job` does not hold. None: derive."""

    num_nodes: int | None = None  # job_info.num_nodes (min nodes while pending)
    max_nodes: int | None = None
    min_cpus_node: int | None = None  # pn_min_cpus
    batch_flag: bool | None = None  # False for salloc/srun allocations
    batch_host: str | None = None
    alloc_node: str | None = None  # submit host as slurmctld saw it
    alloc_sid: int | None = None
    accrue_time: float | None = None
    last_sched_eval: float | None = None
    sched_backfill: bool = False  # Scheduler=Backfill
    suspend_time: float | None = None
    pre_sus_time: int = 0
    tres_req: str | None = None  # "cpu=1,mem=100M,node=1,billing=1"
    tres_alloc: str | None = None
    requid: int | None = None  # who cancelled it (sacct "CANCELLED by N")
    reason_prev: str | None = None  # sacct's Reason column (state_reason_prev)
    acct_flags: tuple[str, ...] = ()  # sacct Flags (SchedMain, StartRecieved, ...)
    dependency: str | None = None  # slurmctld's current dependency text
    mcs_label: str | None = None
    cpus_per_task: int | None = None
    assoc_id: int | None = None
    het_job_id: int = 0  # heterogeneous job: the leader's id (squeue `1682+1`)
    het_job_offset: int = 0
    # --cpu-freq as slurmctld encodes it: (min, max, governor), None where unset
    cpu_freq: tuple[int | None, int | None, int | None] = (None, None, None)
    delay_boot: int = 0  # --delay-boot, seconds
    profile: tuple[str, ...] | None = None  # --profile as slurmctld lists it (["Task"])
    het_job_id_set: str | None = None
    sched_nodes: str | None = None  # squeue %Y / --start SCHEDNODES
    job_flags: tuple[str, ...] | None = None  # slurmctld bitflags (JOB_MEM_SET, ...)
    billable_tres: float | None = None  # with billable_known: slurmctld's value (None: null)
    billable_known: bool = False
    tasks_unknown: bool = False  # num_tasks NO_VAL (a job cancelled before it started)
    reason_text: str | None = None  # a pending reason `Reason` cannot name
    tres_per_node: str | None = None  # as slurmctld keeps them (`gres:gpu`)
    tres_per_job: str | None = None
    tres_per_task: str | None = None
    tres_per_socket: str | None = None
    tres_bind: str | None = None
    cpus_per_tres: str | None = None
    cluster: str | None = None
    stdout_raw: str | None = None  # unexpanded patterns as squeue prints them
    stderr_raw: str | None = None
    stdin_raw: str | None = None
    array_task_str: str | None = None  # slurmctld's text for the pending part
    array_max_tasks: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeExtras:
    """What slurmctld reports about a node that `Node` does not hold. None: derive."""

    state_flags: tuple[str, ...] = ()  # DRAIN, COMPLETING, NOT_RESPONDING, RESERVED, ...
    base_state: str | None = None  # slurmctld's base state when NodeState cannot say it
    alloc_cpus: int = 0
    alloc_memory: int = 0
    cpu_load: int | None = None  # x100, None: N/A
    free_memory: int | None = None  # MB, None: N/A
    weight: int = 1
    address: str | None = None
    hostname: str | None = None
    port: int = 0
    version: str | None = None
    os: str | None = None
    arch: str | None = None
    boards: int = 1
    boot_time: float | None = None
    slurmd_start_time: float | None = None
    last_busy: float | None = None
    reason_time: float | None = None
    reason_user: str | None = None
    reason_uid: int | None = None
    active_features: tuple[str, ...] | None = None
    gres_used: str | None = None
    tres: str | None = None  # CfgTRES
    tres_used: str | None = None  # AllocTRES
    owner: str | None = None
    mcs_label: str | None = None
    comment: str | None = None
    extra: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionExtras:
    """What slurmctld reports about a partition that `Partition` does not hold."""

    min_nodes: int = 0
    priority_tier: int = 1
    priority_job_factor: int = 1
    allow_groups: str | None = None  # None: ALL
    allow_accounts: str | None = None
    allow_qos: str | None = None
    allow_alloc_nodes: str | None = None
    root_only: bool = False
    hidden: bool = False
    exclusive_user: bool = False
    lln: bool = False
    req_resv: bool = False
    disable_root_jobs: bool = False
    max_share: int = 1  # OverSubscribe: 0 EXCLUSIVE, 1 NO, n YES:n (| 0x8000 FORCE)
    max_cpus_per_node: int = INFINITE
    def_mem_per_cpu: int | None = None
    def_mem_per_node: int | None = None  # None: UNLIMITED
    max_mem_per_node: int | None = None
    grace_time: int = 0
    over_time_limit: int | None = None  # None: NONE
    preempt_mode: str = "OFF"
    qos: str | None = None
    state: str | None = None  # UP, DOWN, DRAIN, INACTIVE (None: from Partition.up)
    total_cpus: int | None = None
    total_nodes: int | None = None
    tres: str | None = None


# --- printf-like field rendering -------------------------------------------------------


def _b(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def _u(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def c_str(value: str | None, precision: int | None = None) -> str:
    """What glibc prints for `%s` (`%.Ns` when precision) of a possibly NULL string.

    Widths and precisions count bytes, as in C: a multi-byte character may be cut in half;
    such bytes come back as surrogate escapes (write them with errors="surrogateescape")."""
    if value is None:
        return "" if precision is not None and precision < 6 else NULL
    return value if precision is None else _u(_b(value)[:precision])


def print_str(value: str | None, width: int, right: bool, cut: bool = True) -> str:
    """squeue's and sinfo's `_print_str`: `%Ns` or `%.Ns`, cut to width, padded to width."""
    if right and width > 0:
        data = _b(c_str(value)).rjust(width)
        if cut:
            data = data[:width]
    elif width > 0:
        data = _b(c_str(value, width))
    elif width < 0:
        data = _b(c_str(value) + " ")
    else:
        data = _b(c_str(value))
    return _u(data.ljust(width) if width > 0 else data)


def byte_len(text: str) -> int:
    """Length in bytes, as printf pads."""
    return len(_b(text))


def secs_short(seconds: int, *, check_year: bool = True) -> str:
    """squeue/sinfo `_print_secs`: `M:SS`, `H:MM:SS`, `D-HH:MM:SS` (INVALID beyond a year)."""
    if check_year and (seconds < 0 or seconds > YEAR_SECONDS):
        return "INVALID"
    sign = -1 if seconds < 0 else 1
    total = abs(seconds)
    days = total // 86400 * sign
    hours = total // 3600 % 24 * sign
    minutes = total // 60 % 60 * sign
    secs = total % 60 * sign
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


def make_time_str(epoch: float | None, size: int | None = None) -> str:
    """`slurm_make_time_str`: `%FT%T` in local time; 0/None/INFINITE -> Unknown.

    With `size` (a buffer of that many bytes, as sacct uses) a date that does not fit is
    cut the way strftime into a short buffer leaves it.
    """
    value = int(epoch) if epoch else 0
    if value in (0, INFINITE):
        text = "Unknown"
    elif value == NO_VAL:
        text = "None"
    else:
        text = _time.strftime("%Y-%m-%dT%H:%M:%S", _time.localtime(value))
        if size is not None and len(text) >= size:
            # slurm_strftime: when strftime fails the buffer keeps the longest prefix of
            # the format that fits; "%FT%T" -> "%F" (10 chars) first.
            return text[:10] if size > 10 else ("#" * (size - 1) if size > 1 else "")
    return text if size is None else text[: max(size - 1, 0)]


def ctime_str(now: float) -> str:
    """`slurm_ctime2_r`: `Sun Nov 22 07:09:59 2026` (the date line of `squeue -l`)."""
    return _time.strftime("%a %b %d %H:%M:%S %Y", _time.localtime(int(now)))


_UNITS = "\0KMGTP?"
UNIT_NONE: Final = 0
UNIT_KILO: Final = 1
UNIT_MEGA: Final = 2


def convert_num_unit(num: float, orig_type: int = UNIT_NONE, *, exact: bool = True) -> str:
    """`convert_num_unit(..., NO_VAL, CONVERT_NUM_UNIT_EXACT)`: 4096 -> 4G, 1536 -> 1.50G."""
    if int(num) == 0:
        return "0"
    if exact:
        while num >= 1024 and int(num) % 512 == 0:
            num /= 1024
            orig_type += 1
    else:
        while num >= 1024:
            num /= 1024
            orig_type += 1
    unit = _UNITS[orig_type] if 0 <= orig_type <= 5 else "?"
    unit = unit.replace("\0", "")
    if float(int(num)) == num:
        return f"{int(num)}{unit}"
    return f"{num:.2f}{unit}"


# --- hostlists -----------------------------------------------------------------------


def hostlist_compress(names: Iterable[str], *, sort: bool = True) -> str:
    """Slurm's ranged hostlist string: `node[01-04],big001`, sorted and de-duplicated
    (`hostlist_uniq` + `hostlist_ranged_string`); `sort=False` keeps the given order
    (duplicates dropped)."""
    hosts = [n for n in names if n]
    return hostlist.compress(hostlist.uniq(hosts) if sort else dict.fromkeys(hosts))


def hostlist_expand(text: str | None) -> tuple[str, ...]:
    """`node[01-03],big001` -> (`node01`, `node02`, `node03`, `big001`); `(null)` -> ()."""
    if not text or text == NULL:
        return ()
    return tuple(hostlist.expand(text))


# --- json-c's pretty printer ---------------------------------------------------------

JsonValue = None | bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"]


_ESCAPES = {c: f"\\u{c:04x}" for c in range(0x20)} | {
    ord(ch): esc
    for ch, esc in (
        ('"', '\\"'),
        ("\\", "\\\\"),
        ("/", "\\/"),
        ("\b", "\\b"),
        ("\f", "\\f"),
        ("\n", "\\n"),
        ("\r", "\\r"),
        ("\t", "\\t"),
    )
}


def _escape(text: str) -> str:
    """json-c's string escapes (`/` too), one table lookup per character in C: 10,000
    jobs of `squeue --json` spent 2 s here escaping character by character in Python."""
    return text.translate(_ESCAPES)


def _dump(value: JsonValue, level: int, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        text = f"{value:.17g}"
        if "." not in text and "e" not in text and text.lstrip("-")[:1].isdigit():
            text += ".0"
        out.append(text)
    elif isinstance(value, str):
        out.append(f'"{_escape(value)}"')
    elif isinstance(value, list):
        out.append("[\n")
        for i, item in enumerate(value):
            if i:
                out.append(",\n")
            out.append("  " * (level + 1))
            _dump(item, level + 1, out)
        if value:
            out.append("\n")
        out.append("  " * level + "]")
    else:
        out.append("{\n")
        for i, (key, item) in enumerate(value.items()):
            if i:
                out.append(",\n")
            out.append("  " * (level + 1) + f'"{_escape(key)}": ')
            _dump(item, level + 1, out)
        if value:
            out.append("\n")
        out.append("  " * level + "}")


def json_c_dumps(value: JsonValue) -> str:
    """json-c's `JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED` text, as Slurm's
    `--json` prints it (two-space indent, `\\/`, `[\\n  ]` for an empty list)."""
    out: list[str] = []
    _dump(value, 0, out)
    return "".join(out)
