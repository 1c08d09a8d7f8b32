"""Slurm's `print_fields.c` (sacctmgr, sshare): the column printer of the accounting
commands. A negative width left-aligns; values longer than the width end in `+`; `-p`
ends every field with `|`, `-P` all but the last; `-n` drops the header.

Cells are typed: `None` is unset (blank), `str`, `int` (uint32/uint64 printing) or `float`
(`%f`, or `%*.*e` when `%f` does not fit, as `print_fields_double` does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

__all__ = ["Column", "Mode", "render_table"]

Cell = str | int | float | None


class Mode(Enum):
    """Output mode: columns, `-p` (each field ends in |), `-P` (no trailing |)."""

    COLUMNS = 0
    PARSABLE = 1
    PARSABLE2 = 2


@dataclass(frozen=True, slots=True)
class Column:
    """A printed field: header and width (negative: left-aligned)."""

    name: str
    width: int


def _cut(text: str, width: int) -> str:
    """A string cell: cut to the width with `+` as the last kept character."""
    w = abs(width)
    if len(text) > w:
        text = text[: w - 1] + "+"
    return text.rjust(w) if width >= 0 else text.ljust(w)


def _head(text: str, width: int) -> str:
    """A header: `%*.*s`, cut without a `+`."""
    w = abs(width)
    return text[:w].rjust(w) if width >= 0 else text[:w].ljust(w)


def _double(value: float, width: int) -> str:
    w = abs(width)
    text = f"{value:{w}f}"
    if len(text) > w:
        exp = f"{value:{w}.{w}e}"
        new_w = w
        if len(exp) > w:
            new_w -= len(exp) - w
        new_w = max(new_w, 0)
        text = f"{value:{new_w}.{new_w}e}"
        return text.rjust(new_w) if width >= 0 else text.ljust(new_w)
    return text.rjust(w) if width >= 0 else text.ljust(w)


def _parsable(value: Cell) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:f}"
    return str(value)


def _column(value: Cell, width: int) -> str:
    if value is None:
        return " " * abs(width)
    if isinstance(value, float):
        return _double(value, width)
    if isinstance(value, int):
        text = str(value)
        return text.rjust(abs(width)) if width >= 0 else text.ljust(abs(width))
    return _cut(value, width) if value else " ".rjust(abs(width))


def render_table(
    columns: Sequence[Column], rows: Sequence[Sequence[Cell]], mode: Mode, header: bool
) -> str:
    """The table as the command prints it."""
    lines: list[str] = []
    if mode is Mode.COLUMNS:
        if header:
            lines.append("".join(_head(c.name, c.width) + " " for c in columns))
            lines.append("".join("-" * abs(c.width) + " " for c in columns))
        for row in rows:
            lines.append(
                "".join(_column(v, c.width) + " " for v, c in zip(row, columns, strict=True))
            )
    else:
        sep_last = "|" if mode is Mode.PARSABLE else ""
        if header:
            names = [c.name for c in columns]
            lines.append("|".join(names) + sep_last)
        for row in rows:
            lines.append("|".join(_parsable(v) for v in row) + sep_last)
    return "".join(line + "\n" for line in lines)
