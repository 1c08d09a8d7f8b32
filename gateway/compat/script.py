"""Batch scripts as sbatch reads them: sanity checks and the `#SBATCH` directive reader.

Directives are re-tokenised into one argv (so an option and its value may even sit on two
lines, as in Slurm) and fed to the same option table as the command line. Reading stops at
the first line that is not blank and not a comment. `#CALDERA` lines are read the same way
and may also carry Caldera's own options; to real Slurm they are comments.
"""

from __future__ import annotations

import re

from gateway.compat.cnum import c_isspace
from gateway.compat.errors import CompatError, Diagnostic, Level, ScriptError
from gateway.compat.optypes import Origin

__all__ = [
    "DIRECTIVE_ORIGINS",
    "MAX_SCRIPT_BYTES",
    "PACKJOB_WARNING",
    "Directives",
    "check_script",
    "read_directives",
    "script_too_long",
    "wrap_script",
]

_SBATCH = "#SBATCH"
_SLURM = "#SLURM"
_CALDERA = "#CALDERA"
DIRECTIVE_ORIGINS: dict[str, frozenset[Origin]] = {
    _SBATCH: frozenset({Origin.SLURM, Origin.PLUGIN}),
    _SLURM: frozenset({Origin.SLURM, Origin.PLUGIN}),
    _CALDERA: frozenset(Origin),
}


_NON_BLANK = re.compile(r"[^ \t\n\v\f\r]")


def check_script(body: str) -> None:
    """sbatch's `_get_script_buffer` checks; raises ScriptError (exit 1) like sbatch."""

    def fail(*texts: str) -> ScriptError:
        return ScriptError(*(Diagnostic(Level.ERROR, t) for t in texts), exit_code=1)

    if body == "":
        raise fail("Batch script is empty!")
    nul = body.find("\0")
    if _NON_BLANK.search(body, 0, nul if nul >= 0 else len(body)) is None:
        raise fail("Batch script contains only whitespace!")
    if not body.startswith("#!"):
        raise fail(
            "This does not look like a batch script.  The first",
            "line must start with #! followed by the path to an interpreter.",
            "For instance: #!/bin/sh",
        )
    if "\0" in body:
        raise fail(
            "The Slurm controller does not allow scripts that",
            "contain a NULL character '\\0'.",
        )
    if "\r\n" in body:
        raise fail(
            "Batch script contains DOS line breaks (\\r\\n)",
            "instead of expected UNIX line breaks (\\n).",
        )


MAX_SCRIPT_BYTES = 4 * 1024 * 1024  # slurmctld's default max_script_size


def script_too_long(body: str) -> bool:
    """Whether slurmctld refuses the script's size (in bytes: text read with
    surrogateescape counts one byte per escaped byte)."""
    if len(body) > MAX_SCRIPT_BYTES:
        return True
    if len(body) * 4 <= MAX_SCRIPT_BYTES:
        return False
    return len(body.encode("utf-8", "surrogateescape")) > MAX_SCRIPT_BYTES


def wrap_script(command: str) -> str:
    """The script sbatch builds for `--wrap`."""
    return f"#!/bin/sh\n# This script was created by sbatch --wrap.\n\n{command}\n"


class Directives:
    """The argv of one component's directives and the origins allowed for each token."""

    __slots__ = ("argv", "more_components", "origins", "packjob", "warnings")

    def __init__(self) -> None:
        self.argv: list[str] = ["sbatch"]
        self.origins: list[frozenset[Origin]] = [frozenset()]
        self.more_components = False
        self.warnings: list[Diagnostic] = []
        self.packjob = False  # a `packjob` separator was read (sbatch warns once per run)


def _is_component_separator(text: str) -> bool:
    if text[:1] not in ("h", "H", "p", "P"):
        return False
    for word in ("packjob", "hetjob"):
        n = len(word)
        if text[:n].lower() == word and (len(text) == n or c_isspace(text[n])):
            return True
    return False


PACKJOB_WARNING = Diagnostic(
    Level.INFO,
    'Warning: the "packjob" component separator is being deprecated. Please, use "hetjob" instead.',
)


def _get_argument(fname: str, lineno: int, line: str) -> tuple[str | None, int, bool]:
    """Slurm's `get_argument`: the next token, the characters it consumed, and whether a
    `packjob` separator was skipped (sbatch warns about it once)."""
    i, n = 0, len(line)
    while i < n and c_isspace(line[i]):
        i += 1
    if _is_component_separator(line[i:]):
        # Slurm blanks the word in place and then finds no token: the rest of the line
        # (even a `:`) is never read.
        return None, i, line[i : i + 7].lower() == "packjob"
    if line[i : i + 1] == ":":
        raise CompatError.fatal(f"{fname}: line {lineno}: Unexpected `:` in [{line}]")
    if i >= n:
        return None, i, False
    out: list[str] = []
    quote = ""
    escape = False
    while i < n and (quote or not c_isspace(line[i])):
        ch = line[i]
        if escape:
            escape = False
        elif ch == "\\":
            escape = True
            i += 1
            continue
        elif quote:
            if ch == quote:
                quote = ""
                i += 1
                continue
        elif ch in "\"'":
            quote = ch
            i += 1
            continue
        elif ch == "#":
            break
        out.append(ch)
        i += 1
    if quote:
        raise CompatError.fatal(f"{fname}: line {lineno}: Unmatched `{quote}` in [{line}]")
    return ("".join(out) if out else None), i, False


def _magic(line: str) -> str | None:
    if line[:1] != "#":
        return None
    for word in (_SBATCH, _SLURM, _CALDERA):
        if line.startswith(word):
            return word
    return None


_BLANKS = " \t\n\v\f\r"  # C isspace()
_QUOTES = re.compile(r"[\"'\\]")
_WORDS = re.compile(r"[^ \t\n\v\f\r]+")


def _tokens(fname: str, lineno: int, rest: str) -> tuple[list[str], bool]:
    """Every token of a directive line (and whether a `packjob` separator was seen)."""
    if _QUOTES.search(rest) is None:
        # no quotes or escapes: blank-separated words up to the first `#`
        text = rest.partition("#")[0]
        low = text.lower()
        plain = ":" not in text or not any(w[0] == ":" for w in _WORDS.findall(text))
        if plain and "hetjob" not in low and "packjob" not in low:
            return _WORDS.findall(text), False
    out: list[str] = []
    packjob = False
    while True:
        token, used, sep = _get_argument(fname, lineno, rest)
        packjob = packjob or sep
        if token is None:
            return out, packjob
        out.append(token)
        rest = rest[used:]


# The directives are read from the leading lines that are blank or comments (optional
# blanks, then `#`); among them, those that start with a magic word in column 0.
_HEAD = re.compile(r"(?:[ \t\v\f\r]*(?:#[^\n]*)?\n)*[ \t\v\f\r]*(?:#[^\n]*)?")
_MAGIC_LINE = re.compile(r"^#(?:SBATCH|SLURM|CALDERA)[^\n]*", re.MULTILINE)


# preceded by "\n" rather than anchored with ^: a literal prefix lets `re` skip ahead fast
_DIRECTIVE = re.compile(r"\n#(SBATCH|SLURM|CALDERA)[ \t\v\f\r]*([^\n]*)")
_NOT_C_BLANK = re.compile(r"[\x1c-\x1f]")  # str.split() blanks that isspace() is not


def _split_words(text: str) -> list[str]:
    """Blank-separated words (C isspace), with str.split when that means the same."""
    if text.isascii() and _NOT_C_BLANK.search(text) is None:
        return text.split()
    return _WORDS.findall(text)


def _word_colon(text: str) -> bool:
    """Whether a word starts with `:` (get_argument refuses it)."""
    if text[:1] == ":" or " :" in text or "\n:" in text or "\t:" in text:
        return True
    return "\v:" in text or "\f:" in text or "\r:" in text


def _plain(head: str) -> list[str] | None:
    """The tokens of a header whose directives are all plain `#SBATCH` words (the common
    case, read without the general tokenizer); None when it needs the general one."""
    found = _DIRECTIVE.findall("\n" + head)
    if any(word != "SBATCH" for word, _ in found):
        return None
    text = "\n".join([rest.partition("#")[0] for _, rest in found])
    if _QUOTES.search(text) or (":" in text and _word_colon(text)):
        return None
    low = text.lower()
    if "hetjob" in low or "packjob" in low:
        return None
    return _split_words(text)


def read_directives(body: str, fname: str, component: int = 0) -> Directives:
    """Slurm's `_opt_batch_script`: the directives of hetjob component `component`."""
    result = Directives()
    head_match = _HEAD.match(body)
    head = head_match.group() if head_match else ""
    if component == 0 and (tokens := _plain(head)) is not None:
        result.argv += tokens
        result.origins += [DIRECTIVE_ORIGINS[_SBATCH]] * len(tokens)
        return result
    scan = 0
    warned = False
    lineno, counted = 1, 0
    for found in _MAGIC_LINE.finditer(head):
        line = found.group()
        word = _magic(line) or _CALDERA
        if word == _SLURM and not warned:
            warned = True
            result.warnings.append(
                Diagnostic(
                    Level.ERROR,
                    "Change from #SLURM to #SBATCH in your script and verify the options "
                    "are valid in sbatch",
                )
            )
        rest = line[len(word) :].lstrip(_BLANKS)
        if word != _CALDERA and _is_component_separator(rest):
            scan += 1
        if scan < component:
            continue
        if scan > component:
            result.more_components = True
            break
        lineno += head.count("\n", counted, found.start())
        counted = found.start()
        tokens, packjob = _tokens(fname, lineno, rest)
        result.packjob = result.packjob or packjob
        result.argv += tokens
        result.origins += [DIRECTIVE_ORIGINS[word]] * len(tokens)
    return result
