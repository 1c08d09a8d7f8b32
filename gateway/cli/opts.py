"""Command-line options of squeue, scancel, sinfo, sacct and scontrol, read with getopt_long
rules (permuted operands, unique-prefix long options, `--opt=v`/`--opt v`, clustered short
options) from one table per command, as Slurm declares them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["CmdOption", "CmdUsageError", "ParsedCmd", "parse_command"]


@dataclass(frozen=True, slots=True)
class CmdOption:
    """One option: names, whether it takes an argument (0 no, 1 required, 2 optional)."""

    long: str
    short: str | None
    arg: int
    dest: str
    repeat: bool = False  # collect every value in a list


class CmdUsageError(Exception):
    """Bad command line: `lines` are what glibc/Slurm print; exit status 1."""

    def __init__(self, *lines: str) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


@dataclass
class ParsedCmd:
    """Option values by dest and the operands."""

    values: dict[str, object] = field(default_factory=dict)
    operands: list[str] = field(default_factory=list)

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


def _resolve(name: str, table: Sequence[CmdOption], prog: str, word: str) -> CmdOption:
    exact = [o for o in table if o.long == name]
    if exact:
        return exact[0]
    found = [o for o in table if o.long.startswith(name)]
    if not found:
        raise CmdUsageError(
            f"{prog}: unrecognized option '{word}'", f'Try "{prog} --help" for more information'
        )
    if len({(o.dest, o.arg) for o in found}) > 1:
        names = "".join(f" '--{o.long}'" for o in found)
        raise CmdUsageError(
            f"{prog}: option '{word}' is ambiguous; possibilities:{names}",
            f'Try "{prog} --help" for more information',
        )
    return found[0]


def _store(parsed: ParsedCmd, opt: CmdOption, value: str | None) -> None:
    stored: object = True if value is None and opt.arg == 0 else value
    if opt.repeat:
        current = parsed.values.setdefault(opt.dest, [])
        assert isinstance(current, list)
        current.append(stored)
    elif opt.arg == 0 and isinstance(parsed.values.get(opt.dest), int) and opt.dest == "verbose":
        parsed.values[opt.dest] = int(parsed.values[opt.dest]) + 1  # type: ignore[call-overload]
    else:
        parsed.values[opt.dest] = stored


def parse_command(
    argv: Sequence[str], table: Sequence[CmdOption], prog: str, permute: bool = True
) -> ParsedCmd:
    """Parse argv[1:] against a command's table."""
    parsed = ParsedCmd()
    shorts = {o.short: o for o in table if o.short}
    i = 1
    while i < len(argv):
        word = argv[i]
        if word == "--":
            parsed.operands.extend(argv[i + 1 :])
            break
        if not word.startswith("-") or word == "-":
            parsed.operands.append(word)
            if not permute:
                parsed.operands.extend(argv[i + 1 :])
                break
            i += 1
            continue
        i += 1
        if word.startswith("--"):
            name, eq, value = word[2:].partition("=")
            opt = _resolve(name, table, prog, word.split("=", 1)[0])
            if opt.arg == 0 and eq:
                raise CmdUsageError(
                    f"{prog}: option '--{opt.long}' doesn't allow an argument",
                    f'Try "{prog} --help" for more information',
                )
            if opt.arg == 1 and not eq:
                if i >= len(argv):
                    raise CmdUsageError(
                        f"{prog}: option '--{opt.long}' requires an argument",
                        f'Try "{prog} --help" for more information',
                    )
                value, i = argv[i], i + 1
            _store(parsed, opt, value if (eq or opt.arg == 1) else None)
            continue
        j = 1
        while j < len(word):
            ch = word[j]
            j += 1
            opt_or_none = shorts.get(ch)
            if opt_or_none is None:
                raise CmdUsageError(
                    f"{prog}: invalid option -- '{ch}'", f'Try "{prog} --help" for more information'
                )
            opt = opt_or_none
            if opt.arg == 0:
                _store(parsed, opt, None)
                continue
            rest = word[j:]
            if rest:
                _store(parsed, opt, rest)
            elif opt.arg == 2:
                _store(parsed, opt, None)
            elif i < len(argv):
                _store(parsed, opt, argv[i])
                i += 1
            else:
                raise CmdUsageError(
                    f"{prog}: option requires an argument -- '{ch}'",
                    f'Try "{prog} --help" for more information',
                )
            break
    return parsed
