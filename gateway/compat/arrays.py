"""Job array index expressions (`--array=0-15:4,20%2`) as slurmctld reads them.

The spec is kept as ranges, never expanded, so that a million-task array costs a few
integers until its tasks are dispatched. The types (`ArraySpec`, `IndexRange`) live in
`gateway.model.values`; this module reads them.
"""

from __future__ import annotations

import itertools
from functools import lru_cache

from gateway.compat.cnum import strtol
from gateway.model.values import ArraySpec, IndexRange

__all__ = ["DEFAULT_MAX_ARRAY_SIZE", "parse_array"]

DEFAULT_MAX_ARRAY_SIZE = 1001  # Slurm's MaxArraySize default
_EXPAND_LIMIT = 4_000_001  # Slurm's own ceiling for MaxArraySize


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
