"""The value types a JobSpec and a Job hold, and Slurm's sentinel numbers.

Job arrays (`--array`), dependencies (`--dependency`), generic resources (`--gres`,
`--gpus*`), `--signal`, and INFINITE/NO_VAL (limits and times). They live in the model so
that the model needs nothing from `gateway.compat`, which parses and prints them (its
parsers return these types: `parse_array`, `parse_dependency`, `parse_gres`,
`parse_signal`). Pure data with their canonical renderings; no parsing here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from typing import Final

__all__ = [
    "ALL_TASKS",
    "INFINITE",
    "NO_VAL",
    "SIGNAL_NAMES",
    "ArraySpec",
    "Burst",
    "DepItem",
    "DepKind",
    "DepState",
    "Dependency",
    "GresItem",
    "IndexRange",
    "SignalSpec",
    "signal_num_to_name",
]

INFINITE: Final = 0xFFFF_FFFF  # Slurm's INFINITE (uint32); "UNLIMITED" when printed
NO_VAL: Final = 0xFFFF_FFFE  # Slurm's NO_VAL: "not a valid time"


# --- job arrays ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IndexRange:
    """first..last (inclusive) every step."""

    first: int
    last: int
    step: int = 1

    def __len__(self) -> int:
        return (self.last - self.first) // self.step + 1

    def __contains__(self, index: object) -> bool:
        return (
            isinstance(index, int)
            and self.first <= index <= self.last
            and (index - self.first) % self.step == 0
        )

    def render(self) -> str:
        """`a`, `a-b` or `a-b:s`."""
        if self.first == self.last:
            return str(self.first)
        text = f"{self.first}-{self.last}"
        return text if self.step == 1 else f"{text}:{self.step}"


@dataclass(frozen=True, slots=True)
class ArraySpec:
    """A job array's task indices, sorted and disjoint, and its throttle (0: none)."""

    ranges: tuple[IndexRange, ...]
    throttle: int = 0

    @property
    def count(self) -> int:
        """Number of tasks."""
        return sum(len(r) for r in self.ranges)

    @property
    def min_index(self) -> int:
        """Lowest task index."""
        return self.ranges[0].first

    @property
    def max_index(self) -> int:
        """Highest task index."""
        return self.ranges[-1].last

    def __contains__(self, index: object) -> bool:
        return any(index in r for r in self.ranges)

    def indices(self) -> Iterator[int]:
        """Every task index in ascending order (lazily)."""
        for r in self.ranges:
            yield from range(r.first, r.last + 1, r.step)

    def render(self) -> str:
        """The canonical `--array` value (parses back to an equal spec)."""
        body = ",".join(r.render() for r in self.ranges)
        return f"{body}%{self.throttle}" if self.throttle else body

    def task_str(self, limit: int = 64) -> str:
        """`xlate_array_task_str`: how scontrol/squeue show pending tasks.

        A regular step becomes `a-b:s`; otherwise the `bit_fmt` form cut to `limit`
        bytes with a trailing `...` (SLURM_BITSTR_LEN), then `%throttle`.
        """
        text = self._step_form() or _truncate(self._bit_fmt_prefix(limit), limit)
        return f"{text}%{self.throttle}" if self.throttle else text

    def _step_form(self) -> str | None:
        first, last = self.min_index, self.max_index
        if last - first <= 10 or self.count <= 5:
            return None
        if any(r.step == 1 and r.last > r.first for r in self.ranges):
            return None  # two consecutive indices: first + 1 may be set, no step
        step = 0
        prev = first
        for r in self.ranges:
            for i in range(r.first, r.last + 1, r.step):
                if i == first:
                    continue
                if step == 0:
                    step = i - prev
                elif i - prev != step:
                    return None
                prev = i
        return f"{first}-{last}:{step}" if step > 1 else None

    def _bit_fmt_prefix(self, limit: int) -> str:
        parts: list[str] = []
        size = 0
        for r in self.ranges:
            if r.step == 1:
                items = [str(r.first) if r.first == r.last else f"{r.first}-{r.last}"]
            else:
                items = (str(i) for i in range(r.first, r.last + 1, r.step))  # type: ignore[assignment]
            for item in items:
                parts.append(item)
                size += len(item) + 1
                if size > limit:
                    return ",".join(parts)
        return ",".join(parts)

    def bitmap_str(self) -> str:
        """Slurm's `bit_fmt` of the index set (`0-3,8,12`), as in `ArrayTaskId=`."""
        parts: list[str] = []
        for r in self.ranges:
            if r.step == 1:
                parts.append(str(r.first) if r.first == r.last else f"{r.first}-{r.last}")
            else:
                parts.extend(str(i) for i in range(r.first, r.last + 1, r.step))
        return ",".join(parts)


def _truncate(text: str, limit: int) -> str:
    """What `bit_fmt` into a `limit`-byte buffer plus Slurm's `...` marker leaves."""
    text = text[: limit - 1]
    return text[: limit - 4] + "..." if len(text) > limit - 3 else text


# --- dependencies --------------------------------------------------------------------

ALL_TASKS = -1  # `job_*`: every task of an array


class DepKind(Enum):
    """Dependency types; the value is Slurm's spelling."""

    AFTER = "after"
    AFTER_ANY = "afterany"
    AFTER_OK = "afterok"
    AFTER_NOT_OK = "afternotok"
    AFTER_CORR = "aftercorr"
    AFTER_BURST_BUFFER = "afterburstbuffer"
    SINGLETON = "singleton"


class Burst(Enum):
    """The user's `#CALDERA --burst=`: may the job leave its home cluster (routing: gateway/
    federation/routing.py)."""

    NEVER = "never"
    ALLOWED = "allowed"
    PREFER = "prefer"


class DepState(Enum):
    """Per-item state, printed in parentheses by scontrol."""

    UNFULFILLED = "unfulfilled"
    FULFILLED = "fulfilled"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class DepItem:
    """One condition: a kind, a job id (0 for singleton), a task and a delay in minutes."""

    kind: DepKind
    job_id: int = 0
    task: int | None = None  # None: the job itself; ALL_TASKS: every task; else one task
    minutes: int = 0
    state: DepState = DepState.UNFULFILLED

    def target(self, whole_array: bool = False) -> str:
        """`123`, `123_4` or `123_*` (`whole_array`: the job is an array, as Slurm shows it)."""
        if self.task is None:
            return f"{self.job_id}_*" if whole_array else str(self.job_id)
        return f"{self.job_id}_{'*' if self.task == ALL_TASKS else self.task}"

    def render(self, with_state: bool = False) -> str:
        """The option form of this item (`afterok:12+5`), with `(state)` when asked."""
        state = f"({self.state.value})" if with_state else ""
        if self.kind is DepKind.SINGLETON:
            return f"singleton{state}"
        delay = f"+{self.minutes}" if self.minutes else ""
        return f"{self.kind.value}:{self.target()}{delay}{state}"

    def display(self, whole_array: bool = False) -> str:
        """As `Dependency=` in scontrol: `afterok:12_*(unfulfilled)`."""
        if self.kind is DepKind.SINGLETON:
            return f"singleton({self.state.value})"
        seconds = (self.minutes * 60) & 0xFFFF_FFFF  # a C int, read back as uint32
        delay = f"+{seconds // 60}" if seconds else ""
        return f"{self.kind.value}:{self.target(whole_array)}{delay}({self.state.value})"


@dataclass(frozen=True, slots=True)
class Dependency:
    """Conditions joined by AND (`,`) or, when `any_of`, by OR (`?`)."""

    items: tuple[DepItem, ...]
    any_of: bool = False

    def render(self) -> str:
        """The `--dependency` value (parses back to an equal Dependency).

        Slurm looks for a `(state)` in the whole rest of the text, so once one item has a
        state every item spells its own.
        """
        with_state = any(i.state is not DepState.UNFULFILLED for i in self.items)
        items = [i.render(with_state) for i in self.items]
        if self.any_of and len(items) == 1:
            items *= 2  # `?` needs two items; Slurm keeps a repeated one once
        return ("?" if self.any_of else ",").join(items)

    def display(self, arrays: frozenset[int] = frozenset()) -> str:
        """`Dependency=` as scontrol prints it; fulfilled items are left out.

        `arrays` are the ids of job arrays among the targets: Slurm shows a dependency on
        a whole array as `job_*`.
        """
        sep = "?" if self.any_of else ","
        return sep.join(
            i.display(i.task is None and i.job_id in arrays)
            for i in self.items
            if i.state is not DepState.FULFILLED
        )


# --- generic resources ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GresItem:
    """One generic resource: `gpu:a100:4` is GresItem("gpu", "a100", 4).

    `text` is the item as the request spelled it (`gpu`, `gpu:2k`, `gpu:a100:0`), empty
    for the canonical `name[:type]:count`.
    """

    name: str
    type: str | None
    count: int
    text: str = ""

    def render(self) -> str:
        """The item as Slurm records it (without the `gres:` prefix)."""
        if self.text:
            return self.text
        mid = f":{self.type}" if self.type else ""
        return f"{self.name}{mid}:{self.count}"

    def tres(self) -> str:
        """As Slurm records it in TresPer*: `gres:gpu:a100:4`."""
        return f"gres:{self.render()}"


# --- signals -------------------------------------------------------------------------

SIGNAL_NAMES: tuple[tuple[str, int], ...] = (
    ("HUP", 1),
    ("INT", 2),
    ("QUIT", 3),
    ("ABRT", 6),
    ("KILL", 9),
    ("ALRM", 14),
    ("TERM", 15),
    ("USR1", 10),
    ("USR2", 12),
    ("URG", 23),
    ("CONT", 18),
    ("STOP", 19),
    ("TSTP", 20),
    ("TTIN", 21),
    ("TTOU", 22),
    ("XCPU", 24),
)


def signal_num_to_name(num: int) -> str:
    """`sig_num2name`: `USR1`, or the number when it has no short name."""
    for sig_name, value in SIGNAL_NAMES:
        if value == num:
            return sig_name
    return str(num)


@dataclass(frozen=True, slots=True)
class SignalSpec:
    """`--signal=[{R|B}:]<sig>[@sig_time]`."""

    signal: int
    time: int = 60
    batch_only: bool = False  # B: only the batch shell
    reservation: bool = False  # R: at the reservation's end

    def render(self) -> str:
        """`signal_opts_to_cmdline`: the canonical option value."""
        flags = ("R" if self.reservation else "") + ("B" if self.batch_only else "")
        text = f"{flags}:" if flags else ""
        text += signal_num_to_name(self.signal)
        return text if self.time == 60 else f"{text}@{self.time}"
