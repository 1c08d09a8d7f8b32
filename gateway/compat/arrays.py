"""Job array index expressions (`--array=0-15:4,20%2`) as slurmctld reads them.

The spec is kept as ranges, never expanded, so that a million-task array costs a few
integers until its tasks are dispatched.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

from gateway.compat.cnum import strtol

__all__ = ["DEFAULT_MAX_ARRAY_SIZE", "ArraySpec", "IndexRange", "parse_array"]

DEFAULT_MAX_ARRAY_SIZE = 1001  # Slurm's MaxArraySize default
_EXPAND_LIMIT = 4_000_001  # Slurm's own ceiling for MaxArraySize


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


def _parse_token(tok: str, max_size: int) -> IndexRange | None:
    """`_parse_array_tok`: one comma item, allowing `[`/`]` and a trailing `%...`."""
    if tok.startswith("["):
        tok = tok[1:]
    first, end = strtol(tok)
    rest = tok[end:]
    if rest.startswith("]"):
        rest = rest[1:]
    if first < 0:
        return None
    step = 1
    if rest.startswith("-"):
        last, end2 = strtol(rest, 1)
        rest = rest[end2:]
        if rest.startswith("]"):
            rest = rest[1:]
        if rest.startswith(":"):
            step, end3 = strtol(rest, 1)
            rest = rest[end3:]
            if rest.startswith("]"):
                rest = rest[1:]
            if rest and not rest.startswith("%"):
                return None
            if step <= 0 or step >= max_size:
                return None
        elif rest and not rest.startswith("%"):
            return None
        if last < first:
            return None
    elif rest and not rest.startswith("%"):
        return None
    else:
        last = first
    if last >= max_size:
        return None
    # A step larger than the span leaves one index; keep the canonical form.
    last = first + ((last - first) // step) * step
    return IndexRange(first, last, step if last > first else 1)


def _atoi(s: str) -> int:
    value, _ = strtol(s)
    return max(min(value, 2**31 - 1), -(2**31))


def _normalise(ranges: list[IndexRange]) -> tuple[IndexRange, ...]:
    ranges.sort(key=lambda r: (r.first, r.last))
    disjoint = all(a.last < b.first for a, b in itertools.pairwise(ranges))
    if disjoint:
        merged: list[IndexRange] = []
        for r in ranges:
            prev = merged[-1] if merged else None
            if prev and prev.step == 1 and r.step == 1 and prev.last + 1 == r.first:
                merged[-1] = IndexRange(prev.first, r.last, 1)
            else:
                merged.append(r)
        return tuple(merged)
    members = sorted({i for r in ranges for i in range(r.first, r.last + 1, r.step)})
    runs: list[IndexRange] = []
    for i in members:
        if runs and runs[-1].last + 1 == i:
            runs[-1] = IndexRange(runs[-1].first, i, 1)
        else:
            runs.append(IndexRange(i, i, 1))
    return tuple(runs)


@lru_cache(maxsize=4096)
def parse_array(spec: str, max_array_size: int = DEFAULT_MAX_ARRAY_SIZE) -> ArraySpec | None:
    """Parse `--array`; None where slurmctld answers "Invalid job array specification".

    Indices must be below `max_array_size` (the cluster's MaxArraySize).
    """
    if not spec or max_array_size <= 0:
        return None
    max_size = min(max_array_size, _EXPAND_LIMIT)
    ranges: list[IndexRange] = []
    for tok in spec.split(","):
        if tok == "":
            continue
        r = _parse_token(tok, max_size)
        if r is None:
            return None
        ranges.append(r)
    if not ranges:
        return None
    pct = spec.find("%")
    throttle = max(_atoi(spec[pct + 1 :]), 0) if pct >= 0 else 0
    return ArraySpec(_normalise(ranges), throttle)
