"""glibc `getopt_long`, the one option reader of Caldera's Slurm commands.

`getopt_long` is sbatch's: Slurm's option string ("+": stop at the first non-option).
Long options may be abbreviated to a unique prefix; `--opt=value` and `--opt value` both
work for required arguments, only `--opt=value` for optional ones. Error lines are glibc's
(printed with argv[0]), followed by sbatch's `Try "sbatch --help"` and exit status 255.
Plugin and Caldera options never change how a Slurm option name resolves: they are only
tried when no Slurm option matches.

`scan` is the same reader over the table of squeue, sacct, scancel, sinfo or scontrol, which
permute (options may follow operands) unless POSIXLY_CORRECT is set.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import NamedTuple

from gateway.compat.errors import Diagnostic, Level, OptionError
from gateway.compat.options import BY_SHORT, OPTIONS
from gateway.compat.optypes import Arg, Option, Origin

__all__ = ["CmdSpec", "GetoptError", "ParsedArg", "Scanned", "getopt_long", "scan"]

# Slurm's common_options[] order: the order glibc lists ambiguous candidates in.
_SLURM_ORDER = [
    "account",
    "acctg-freq",
    "array",
    "batch",
    "begin",
    "bb",
    "bbf",
    "cluster-constraint",
    "chdir",
    "cluster",
    "clusters",
    "comment",
    "container",
    "context",
    "contiguous",
    "constraint",
    "core-spec",
    "cores-per-socket",
    "cpu-freq",
    "cpus-per-gpu",
    "cpus-per-task",
    "deadline",
    "delay-boot",
    "dependency",
    "distribution",
    "error",
    "exclude",
    "exclusive",
    "export",
    "export-file",
    "extra-node-info",
    "get-user-env",
    "gid",
    "gpu-bind",
    "gpu-freq",
    "gpus",
    "gpus-per-node",
    "gpus-per-socket",
    "gpus-per-task",
    "gres",
    "gres-flags",
    "help",
    "hint",
    "hold",
    "ignore-pbs",
    "input",
    "job-name",
    "kill-on-invalid-dep",
    "licenses",
    "mail-type",
    "mail-user",
    "mcs-label",
    "mem",
    "mem-bind",
    "mem-per-cpu",
    "mem-per-gpu",
    "mincpus",
    "network",
    "nice",
    "no-kill",
    "no-requeue",
    "nodefile",
    "nodelist",
    "nodes",
    "ntasks",
    "ntasks-per-core",
    "ntasks-per-gpu",
    "ntasks-per-node",
    "ntasks-per-socket",
    "ntasks-per-tres",
    "open-mode",
    "output",
    "overcommit",
    "oversubscribe",
    "parsable",
    "partition",
    "power",
    "prefer",
    "priority",
    "profile",
    "propagate",
    "qos",
    "quiet",
    "reboot",
    "requeue",
    "reservation",
    "signal",
    "sockets-per-node",
    "spread-job",
    "switches",
    "tasks-per-node",
    "test-only",
    "thread-spec",
    "threads-per-core",
    "time",
    "time-min",
    "tmp",
    "uid",
    "use-min-nodes",
    "verbose",
    "version",
    "usage",
    "wait",
    "wait-all-nodes",
    "wckey",
    "wrap",
]
# Options that share one getopt `val` with another (glibc does not call them ambiguous).
_SAME_VAL = {"tasks-per-node": "ntasks-per-node"}

_BY_NAME = {o.long: o for o in OPTIONS if o.long}
_SLURM_TABLE: tuple[Option, ...] = tuple(_BY_NAME[n] for n in _SLURM_ORDER)
_EXTRA_TABLE: tuple[Option, ...] = tuple(
    o for o in OPTIONS if o.long and o.origin is not Origin.SLURM
)

_TRY = Diagnostic(Level.RAW, 'Try "{prog} --help" for more information')


class ParsedArg(NamedTuple):
    """One option occurrence: the option and its argument (None when absent)."""

    option: Option
    arg: str | None


class GetoptError(NamedTuple):
    """A bad option word; glibc prints `text` and getopt goes on with the next word."""

    text: str

    def diagnostic(self) -> Diagnostic:
        """The line glibc prints."""
        return Diagnostic(Level.RAW, "{prog}: " + self.text)

    def error(self) -> OptionError:
        """What sbatch does when it processes this '?': the line, `Try ...`, exit 255."""
        return OptionError(self.diagnostic(), _TRY, exit_code=255)


class _Bad(Exception):
    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def _fail(text: str) -> _Bad:
    return _Bad(text)


def _match(name: str, table: Sequence[Option]) -> list[Option]:
    """glibc's long option search: an exact name wins, otherwise every prefix match."""
    for o in table:
        if o.long == name:
            return [o]
    return [o for o in table if o.long and o.long.startswith(name)]


def _ambiguous(found: list[Option]) -> bool:
    first = found[0]
    key = _SAME_VAL.get(first.long or "", first.long)
    return any(
        _SAME_VAL.get(o.long or "", o.long) != key or o.arg is not first.arg for o in found[1:]
    )


@lru_cache(maxsize=4096)
def _candidates(name: str, origins: frozenset[Origin]) -> tuple[Option, ...]:
    """The options a (possibly abbreviated) long name may mean, for these origins."""
    found = _match(name, _SLURM_TABLE) if Origin.SLURM in origins else []
    if not found:
        extra = [o for o in _EXTRA_TABLE if o.origin in origins]
        found = _match(name, extra)
    return tuple(found)


def _resolve(body: str, origins: frozenset[Origin]) -> Option:
    found = list(_candidates(body.partition("=")[0], origins))
    if not found:
        raise _fail(f"unrecognized option '--{body}'")
    if len(found) > 1 and _ambiguous(found):
        names = "".join(f" '--{o.long}'" for o in found)
        raise _fail(f"option '--{body}' is ambiguous; possibilities:{names}")
    return found[0]


@lru_cache(maxsize=4096)
def _long_word(body: str, origins: frozenset[Origin]) -> ParsedArg | GetoptError:
    """One `--name[=value]` word on its own: the option and its `=` value, or the error.

    A required argument without `=` comes back with arg None; the caller takes the next word.
    """
    try:
        opt = _resolve(body, origins)
    except _Bad as bad:
        return GetoptError(bad.text)
    _, eq, after = body.partition("=")
    if opt.arg is Arg.NONE and eq:
        return GetoptError(f"option '--{opt.long}' doesn't allow an argument")
    return ParsedArg(opt, after if eq else None)


def _long(
    word: str, argv: Sequence[str], i: int, origins: frozenset[Origin]
) -> tuple[ParsedArg | GetoptError, int]:
    item = _long_word(word[2:], origins)
    if item.__class__ is GetoptError:
        return item, i
    opt, value = item  # type: ignore[misc]
    if value is None and opt.arg is Arg.REQUIRED and "=" not in word:
        if i >= len(argv):
            return GetoptError(f"option '--{opt.long}' requires an argument"), i
        return ParsedArg(opt, argv[i]), i + 1
    return item, i


def getopt_long(
    argv: Sequence[str],
    origins: frozenset[Origin] | Sequence[frozenset[Origin]],
    start: int = 1,
) -> tuple[list[ParsedArg | GetoptError], int]:
    """Parse argv[start:]: the options (and errors) in order, and the first operand's index.

    `origins` says which options exist: one set for the whole argv, or one per word (the
    `#SBATCH` and `#CALDERA` lines of a script allow different options).
    """

    single = origins if isinstance(origins, frozenset) else None
    out: list[ParsedArg | GetoptError] = []
    i = start
    n = len(argv)
    while i < n:
        word = argv[i]
        if word[:1] != "-" or word == "-":
            return out, i
        word_origins = single if single is not None else origins[i]  # type: ignore[index]
        if word[1] == "-":
            if word == "--":
                return out, i + 1
            item = _long_word(word[2:], word_origins)
            if item.__class__ is ParsedArg and (
                item[1] is not None or item[0].arg is not Arg.REQUIRED
            ):
                out.append(item)  # the common `--name=value` or flag: nothing more to read
                i += 1
                continue
            item, i = _long(word, argv, i + 1, word_origins)
            out.append(item)
            continue
        # a cluster of short options
        j = 1
        i += 1
        while j < len(word):
            ch = word[j]
            opt = BY_SHORT.get(ch)
            j += 1
            if opt is None or opt.origin not in word_origins:
                out.append(GetoptError(f"invalid option -- '{ch}'"))
                continue
            if opt.arg is Arg.NONE:
                out.append(ParsedArg(opt, None))
                continue
            rest = word[j:]
            if rest:
                out.append(ParsedArg(opt, rest))
            elif opt.arg is Arg.OPTIONAL:
                out.append(ParsedArg(opt, None))
            elif i < n:
                out.append(ParsedArg(opt, argv[i]))
                i += 1
            else:
                out.append(GetoptError(f"option requires an argument -- '{ch}'"))
            break
    return out, i


# The other commands (squeue, sacct, scancel, sinfo, scontrol): the same glibc rules over a
# command's own table, with permutation (the default optstring of those commands).


@dataclass(frozen=True, slots=True)
class CmdSpec:
    """One entry of a command's `struct option` table (and its short letter).

    `val` is getopt's val: entries with the same val and has_arg are one option to glibc
    (`--node`, `--nodes`, `--nodelist`), so a prefix of several of them is not ambiguous.
    """

    long: str | None
    short: str | None
    arg: Arg
    val: Hashable


@dataclass
class Scanned:
    """Options in argv order (stopping after the first error, as Slurm's `case '?'` exits)
    and the operands in getopt's permuted order."""

    items: list[tuple[CmdSpec, str | None]] = field(default_factory=list)
    error: GetoptError | None = None
    operands: list[str] = field(default_factory=list)


def _glibc_long(body: str, table: Sequence[CmdSpec]) -> CmdSpec | GetoptError:
    """glibc's process_long_option: exact name, else prefixes; ambiguous when a later match
    differs from the first in has_arg or val (only those, and the first, are listed)."""
    name = body.partition("=")[0]
    exact = [o for o in table if o.long == name]
    if exact:
        return exact[0]
    found = [o for o in table if o.long and o.long.startswith(name)]
    if not found:
        return GetoptError(f"unrecognized option '--{body}'")
    first = found[0]
    differ = [o for o in found[1:] if o.arg is not first.arg or o.val != first.val]
    if differ:
        names = "".join(f" '--{o.long}'" for o in (first, *differ))
        return GetoptError(f"option '--{body}' is ambiguous; possibilities:{names}")
    return first


def scan(
    argv: Sequence[str], table: Sequence[CmdSpec], *, start: int = 1, permute: bool = True
) -> Scanned:
    """getopt_long over argv[start:] with `table`, permuting unless POSIXLY_CORRECT is set.

    An optional argument is taken only when attached (`-jLIST`, `--jobs=LIST`); `--` ends
    the options; a lone `-` is an operand.
    """
    permute = permute and "POSIXLY_CORRECT" not in os.environ
    shorts = {o.short: o for o in table if o.short}
    out = Scanned()
    i, n = start, len(argv)
    while i < n and out.error is None:
        word = argv[i]
        i += 1
        if word == "--":
            out.operands.extend(argv[i:])
            return out
        if word[:1] != "-" or word == "-":
            out.operands.append(word)
            if not permute:
                out.operands.extend(argv[i:])
                return out
            continue
        if word[1] == "-":
            body = word[2:]
            found = _glibc_long(body, table)
            if isinstance(found, GetoptError):
                out.error = found
                break
            eq, value = "=" in body, body.partition("=")[2]
            if found.arg is Arg.NONE and eq:
                out.error = GetoptError(f"option '--{found.long}' doesn't allow an argument")
            elif found.arg is Arg.REQUIRED and not eq:
                if i >= n:
                    out.error = GetoptError(f"option '--{found.long}' requires an argument")
                else:
                    out.items.append((found, argv[i]))
                    i += 1
            else:
                out.items.append((found, value if eq else None))
            continue
        for j in range(1, len(word)):
            opt = shorts.get(word[j])
            if opt is None:
                out.error = GetoptError(f"invalid option -- '{word[j]}'")
                break
            if opt.arg is Arg.NONE:
                out.items.append((opt, None))
                continue
            rest = word[j + 1 :]
            if rest or opt.arg is Arg.OPTIONAL:
                out.items.append((opt, rest or None))
            elif i < n:
                out.items.append((opt, argv[i]))
                i += 1
            else:
                out.error = GetoptError(f"option requires an argument -- '{word[j]}'")
            break
    return out
