"""Slurm's hostlist limits, the C character constants, and the ways scontrol fails
(an error it prints, a loop it never leaves, a fatal exit)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from gateway.compat.errors import Diagnostic, Level, SpecError

MAX_RANGE: Final = 64 * 1024
"""Most hosts one bracketed range (`lo-hi`) may hold; more is `Too many hosts in range`."""
MAX_RANGES: Final = 256 * 1024
"""Most comma-separated ranges inside one pair of brackets; more is a fatal error."""
MAX_PREFIX_CNT: Final = 64 * 1024
"""Most values a range in a prefix (`rack[1-4]-n[1-2]`) may expand to, per bracket."""

EXIT_SEGFAULT: Final = 128 + 11
"""The shell's exit status for scontrol dying of SIGSEGV."""

_ULONG_MAX: Final = (1 << 64) - 1
_SPACES: Final = frozenset(b" \t\n\v\f\r")
_COMMA: Final = ord(",")
_ZERO: Final = ord("0")
_NINE: Final = ord("9")
_DASH: Final = ord("-")
_PLUS: Final = ord("+")


class HostlistError(SpecError):
    """A hostlist expression that scontrol rejects (or that crashes or hangs it).

    `lines` are scontrol's stderr lines; `render()` prints them as scontrol does
    (`scontrol: error: ...` then `Invalid hostlist: <expr>`). `exit_code` is scontrol's exit
    status for the command that raised it: 1 for `show hostlist[sorted]`, but 0 for
    `show hostnames`, which reports the error and still exits 0. `reason` says in words
    what went wrong when scontrol prints nothing useful (crash, endless loop).
    """

    def __init__(self, *lines: Diagnostic, exit_code: int = 1, reason: str = "") -> None:
        self.reason = reason
        super().__init__(*lines, exit_code=exit_code)

    @property
    def message(self) -> str:
        """The stderr lines as one text (no program prefix), or the reason if none."""
        text = "\n".join(d.text for d in self.lines)
        return text or self.reason

    def render(self, prog: str = "scontrol") -> str:
        """Every stderr line as `prog` prints it, newline-terminated (`{prog}` is not expanded)."""
        return "".join(
            (d.text if d.level is Level.RAW else d.render(prog)) + "\n" for d in self.lines
        )


@dataclass(frozen=True, slots=True)
class ShowResult:
    """What `scontrol show <command> <arg>` prints and returns."""

    stdout: str
    stderr: str
    exit_code: int


class _Hang(Exception):
    """Slurm would loop forever (or for hours, until it runs out of memory) on this input."""


_MAX_OVERLAP: Final = 1 << 20
"""Overlaps beyond this many hosts under `hostlist_sort` make scontrol insert that many
ranges into its array one at a time (quadratic): hours of work or `malloc failed`."""


class _Fatal(Exception):
    """Slurm calls fatal(): message, exit status 1."""
