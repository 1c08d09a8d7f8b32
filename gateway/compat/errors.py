"""Typed errors of the Slurm compatibility layer.

Every parser in `gateway.compat` either returns a value or raises a `CompatError`. A
`CompatError` carries the exact lines real Slurm prints for the same input and its exit
status, so that the CLI can reproduce Slurm's behaviour byte for byte and the API can
return the same text as a message.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = [
    "CompatError",
    "Diagnostic",
    "Level",
    "OptionError",
    "ScriptError",
    "SpecError",
]


class Level(Enum):
    """How Slurm's logger prefixes a line (`sbatch: error: ...`)."""

    ERROR = "error"
    FATAL = "fatal"
    INFO = "info"
    RAW = "raw"  # printed as is (getopt's messages, `Try "sbatch --help"...`)


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One line of Slurm's stderr output, before the program name is known."""

    level: Level
    text: str

    def render(self, prog: str) -> str:
        """The line as `prog` prints it."""
        if self.level is Level.RAW:
            return self.text.replace("{prog}", prog)
        if self.level is Level.INFO:
            return f"{prog}: {self.text}"
        return f"{prog}: {self.level.value}: {self.text}"


class CompatError(Exception):
    """Input that Slurm rejects; `lines` and `exit_code` are what Slurm would print and return."""

    def __init__(self, *lines: Diagnostic, exit_code: int = 255) -> None:
        self.lines: tuple[Diagnostic, ...] = lines
        self.exit_code = exit_code
        super().__init__(self.message)

    @property
    def message(self) -> str:
        """The diagnostics joined as one text, without the program prefix."""
        return "\n".join(d.text.replace("{prog}", "sbatch") for d in self.lines)

    def render(self, prog: str = "sbatch") -> str:
        """Every line as `prog` would print it, newline-terminated."""
        return "".join(d.render(prog) + "\n" for d in self.lines)

    @classmethod
    def error(cls, text: str, exit_code: int = 255) -> CompatError:
        """An `error()` line followed by `exit(exit_code)`."""
        return cls(Diagnostic(Level.ERROR, text), exit_code=exit_code)

    @classmethod
    def fatal(cls, text: str) -> CompatError:
        """Slurm's `fatal()`: one line, exit status 1."""
        return cls(Diagnostic(Level.FATAL, text), exit_code=1)


class OptionError(CompatError):
    """A command-line or `#SBATCH` option with a bad name or value."""


class ScriptError(CompatError):
    """A batch script that sbatch refuses before reading its options."""


class SpecError(CompatError):
    """A value (time, memory, array, dependency, hostlist...) that does not parse."""
