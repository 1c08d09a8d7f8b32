"""Command-line options of squeue, scancel, sinfo, sacct and scontrol: one table per command,
as Slurm declares it, read by the one getopt_long of `gateway.compat.getopt` (permuted
operands, unique-prefix long options, optional arguments only when attached).

Slurm handles each option as getopt returns it: `--help`/`--usage`/`--version` exit at once,
some values are checked in the handler (so before a later bad option is seen), and the first
bad option exits with glibc's line and the command's `Try "... --help"`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from gateway.compat.getopt import CmdSpec, scan
from gateway.compat.optypes import Arg

__all__ = ["CmdOption", "CmdUsageError", "ParsedCmd", "parse_command"]

_ARGS = (Arg.NONE, Arg.REQUIRED, Arg.OPTIONAL)
_EXITS = frozenset({"help", "usage", "version"})


@dataclass(frozen=True, slots=True)
class CmdOption:
    """One option: names, whether it takes an argument (0 no, 1 required, 2 optional)."""

    long: str | None
    short: str | None
    arg: int
    dest: str
    repeat: bool = False  # collect every value in a list

    @property
    def spec(self) -> CmdSpec:
        """The getopt entry (getopt's val is the destination)."""
        return CmdSpec(self.long, self.short, _ARGS[self.arg], self.dest)


class CmdUsageError(Exception):
    """Bad command line: `lines` are what glibc/Slurm print; exit status 1."""

    def __init__(self, *lines: str) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


@dataclass
class ParsedCmd:
    """Option values by dest, the operands, and the option that exits at once, if any."""

    values: dict[str, object] = field(default_factory=dict)
    operands: list[str] = field(default_factory=list)
    exit_option: str | None = None

    def get(self, dest: str, default: object = None) -> object:
        """A value, or the default."""
        return self.values.get(dest, default)

    def flag(self, dest: str) -> bool:
        """Whether a flag was given."""
        return bool(self.values.get(dest))

    def text(self, dest: str) -> str | None:
        """A string value."""
        v = self.values.get(dest)
        return v if isinstance(v, str) else None


def _store(parsed: ParsedCmd, opt: CmdOption, value: str | None) -> None:
    stored: object = True if value is None and opt.arg != 1 else value
    if opt.repeat:
        current = parsed.values.setdefault(opt.dest, [])
        assert isinstance(current, list)
        current.append(stored)
    elif value is None and opt.arg == 2:
        parsed.values.setdefault(opt.dest, True)  # `-j` alone keeps an earlier `-jLIST`
    elif opt.dest == "verbose":
        previous = parsed.values.get("verbose", 0)
        parsed.values["verbose"] = (previous if isinstance(previous, int) else 0) + 1
    else:
        parsed.values[opt.dest] = stored


def parse_command(
    argv: Sequence[str],
    table: Sequence[CmdOption],
    prog: str,
    *,
    check: Mapping[str, Callable[[str | None], object]] | None = None,
    try_help: bool = True,
    exits: frozenset[str] = _EXITS,
) -> ParsedCmd:
    """Parse argv[1:] against a command's table, handling options in order as Slurm does.

    `check` runs a handler's validation when its option is seen (it raises CmdUsageError).
    Stops at the first option of `exits` (recorded in `exit_option`): the options whose
    handler prints and exits.
    """
    by_spec = {o.spec: o for o in table}
    scanned = scan(argv, list(by_spec))
    parsed = ParsedCmd(operands=scanned.operands)
    for spec, value in scanned.items:
        opt = by_spec[spec]
        _store(parsed, opt, value)
        if opt.dest in exits:
            parsed.exit_option = opt.dest
            return parsed
        if check and opt.dest in check:
            check[opt.dest](value)
    if scanned.error is not None:
        lines = [f"{prog}: {scanned.error.text}"]
        if try_help:
            lines.append(f'Try "{prog} --help" for more information')
        raise CmdUsageError(*lines)
    return parsed
