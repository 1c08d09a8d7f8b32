"""sacctmgr's command line, as `src/sacctmgr/sacctmgr.c` and the entity files read it:
options (`-i -n -p -P -Q`), a verb (add/create, modify/update, delete/remove, show/list),
an entity, then bare names, `where` conditions, `set` values and `format=`.

Keywords match as sacctmgr matches them (`xstrncasecmp(NAME, word, MAX(len, N))`): any
case-insensitive prefix at least N long, first entry of the table wins. The result is a
`Request` of typed pieces; what each key means is decided by `sacctmgr_apply`/`_show`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

from gateway.compat.options_help import version_text
from gateway.policy.printfields import Mode
from gateway.policy.values import SacctmgrError

__all__ = ["VERSION", "Entity", "Pair", "Request", "Verb", "keyword", "parse_argv"]

VERSION = version_text().rstrip("\n")  # `sacctmgr -V` / `--version`, as every command


class Verb(Enum):
    """What to do."""

    ADD = "add"
    MODIFY = "modify"
    DELETE = "delete"
    SHOW = "list"


class Entity(Enum):
    """What to do it to."""

    ACCOUNT = "account"
    USER = "user"
    QOS = "qos"
    ASSOC = "association"
    CLUSTER = "cluster"


@dataclass(frozen=True, slots=True)
class Pair:
    """`Key=value` (`op` is "+" or "-" for `+=`/`-=`); `raw` is the word as typed."""

    key: str
    value: str
    op: str
    raw: str


@dataclass(frozen=True, slots=True)
class Request:
    """One parsed sacctmgr invocation."""

    verb: Verb
    entity: Entity
    names: tuple[str, ...] = ()  # bare words before `where`/`set` (and `names=`)
    where: tuple[Pair, ...] = ()
    values: tuple[Pair, ...] = ()  # `set` part (everything given to add)
    flags: tuple[str, ...] = ()  # bare keywords: withassoc, tree...
    format: tuple[str, ...] = ()
    immediate: bool = False
    header: bool = True
    mode: Mode = Mode.COLUMNS
    quiet: bool = False
    extra: dict[str, str] = field(default_factory=dict)


_VERBS: tuple[tuple[str, int, Verb], ...] = (
    ("add", 3, Verb.ADD),
    ("create", 3, Verb.ADD),
    ("show", 3, Verb.SHOW),
    ("list", 3, Verb.SHOW),
    ("modify", 1, Verb.MODIFY),
    ("update", 1, Verb.MODIFY),
    ("delete", 3, Verb.DELETE),
    ("remove", 3, Verb.DELETE),
)
_OTHER_COMMANDS = (("help", 2), ("version", 4), ("dump", 3), ("load", 2), ("archive", 3))

_ENTITIES: dict[Verb, tuple[tuple[str, int, Entity], ...]] = {
    Verb.ADD: (
        ("account", 1, Entity.ACCOUNT),
        ("acct", 4, Entity.ACCOUNT),
        ("cluster", 2, Entity.CLUSTER),
        ("qos", 1, Entity.QOS),
        ("user", 1, Entity.USER),
    ),
    Verb.SHOW: (
        ("accounts", 2, Entity.ACCOUNT),
        ("acct", 4, Entity.ACCOUNT),
        ("associations", 2, Entity.ASSOC),
        ("clusters", 2, Entity.CLUSTER),
        ("qos", 1, Entity.QOS),
        ("users", 1, Entity.USER),
    ),
    Verb.MODIFY: (
        ("accounts", 1, Entity.ACCOUNT),
        ("acct", 4, Entity.ACCOUNT),
        ("qoss", 1, Entity.QOS),
        ("users", 1, Entity.USER),
    ),
    Verb.DELETE: (
        ("accounts", 1, Entity.ACCOUNT),
        ("acct", 4, Entity.ACCOUNT),
        ("qos", 1, Entity.QOS),
        ("users", 1, Entity.USER),
    ),
}

_NO_ENTITY = {
    Verb.ADD: 'No valid entity in add command\nInput line must include "Account", "Cluster", '
    '"Coordinator", "Federation", "QOS", "Resource", or "User"',
    Verb.SHOW: 'No valid entity in list command\nInput line must include "Account", '
    '"Association", "Cluster", "Configuration",\n"Event", "Federation", "Problem", "QOS", '
    '"Resource", "Reservation",\n"RunAwayJobs", "Stats", "Transaction", "TRES", "User", '
    'or "WCKey"',
    Verb.MODIFY: 'No valid entity in modify command\nInput line must include "Account", '
    '"Cluster", "Federation", "Job", "QOS", "Resource" or "User"',
    Verb.DELETE: 'No valid entity in delete command\nInput line must include "Account", '
    '"Cluster", "Coordinator", "Federation", "QOS", "Resource", or "User"',
}

_SUPPORTED = {
    Verb.SHOW: {Entity.ACCOUNT, Entity.USER, Entity.QOS, Entity.ASSOC, Entity.CLUSTER},
    Verb.ADD: {Entity.ACCOUNT, Entity.USER, Entity.QOS},
    Verb.MODIFY: {Entity.ACCOUNT, Entity.USER, Entity.QOS},
    Verb.DELETE: {Entity.ACCOUNT, Entity.USER, Entity.QOS},
}

_SHORT = {"i": "immediate", "n": "noheader", "p": "parsable", "P": "parsable2", "Q": "quiet"}
_LONG = {
    "--immediate": "immediate",
    "--noheader": "noheader",
    "--parsable": "parsable",
    "--parsable2": "parsable2",
    "--quiet": "quiet",
    "--verbose": "verbose",
    "--version": "version",
    "--readonly": "readonly",
    "--associations": "",
    "--oneliner": "",
}


def keyword(word: str, name: str, min_len: int) -> bool:
    """sacctmgr's `!xstrncasecmp(name, word, MAX(strlen(word), min_len))`."""
    n = max(len(word), min_len)
    return word.lower()[:n] == name.lower()[:n] and len(word) <= len(name)


def _pair(word: str) -> Pair | None:
    """`parse_option_end`: `Key=value`, `Key+=value`, `Key-=value`; None for a bare word."""
    eq = word.find("=")
    if eq <= 0:
        return None
    key, op = word[:eq], ""
    if key.endswith(("+", "-")):
        key, op = key[:-1], key[-1]
    return Pair(key, word[eq + 1 :], op, word)


def _options(argv: Sequence[str]) -> tuple[dict[str, bool], list[str]]:
    opts: dict[str, bool] = {}
    rest = list(argv)
    while rest and rest[0].startswith("-") and rest[0] != "-":
        word = rest.pop(0)
        if word == "--":
            break
        if word.startswith("--"):
            name = _LONG.get(word.split("=", 1)[0])
            if name is None:
                raise SacctmgrError(
                    f"sacctmgr: unrecognized option '{word}'\n"
                    'Try "sacctmgr --help" for more information'
                )
            if name:
                opts[name] = True
            continue
        for ch in word[1:]:
            if ch in ("v", "h", "V"):
                opts[{"v": "verbose", "h": "help", "V": "version"}[ch]] = True
                continue
            if ch not in _SHORT:
                raise SacctmgrError(
                    f"sacctmgr: invalid option -- '{ch}'\n"
                    'Try "sacctmgr --help" for more information'
                )
            opts[_SHORT[ch]] = True
    return opts, rest


def parse_argv(argv: Sequence[str]) -> Request:
    """The request, or SacctmgrError with sacctmgr's message."""
    opts, words = _options(argv)
    if opts.get("version"):
        raise SacctmgrError(VERSION)  # printed on stdout by the caller
    if not words:
        raise SacctmgrError(
            "sacctmgr: error: no command given (Caldera's sacctmgr has no interactive mode)"
        )
    verb_word = words[0]
    verb = next((v for name, n, v in _VERBS if keyword(verb_word, name, n)), None)
    if verb is None:
        if any(keyword(verb_word, name, n) for name, n in _OTHER_COMMANDS):
            raise SacctmgrError(f"sacctmgr: error: '{verb_word}' is not supported by Caldera")
        raise SacctmgrError(f"invalid keyword: {verb_word}")
    if len(words) < 2:
        raise SacctmgrError(_NO_ENTITY[verb])
    ent_word = words[1]
    entity = next((e for name, n, e in _ENTITIES[verb] if keyword(ent_word, name, n)), None)
    if entity is None:
        raise SacctmgrError(_NO_ENTITY[verb])
    if entity not in _SUPPORTED[verb]:
        raise SacctmgrError(f"sacctmgr: error: {verb.value} {entity.value} is not supported")
    mode = Mode.COLUMNS
    if opts.get("parsable"):
        mode = Mode.PARSABLE
    if opts.get("parsable2"):
        mode = Mode.PARSABLE2
    return _split(
        words[2:],
        Request(
            verb,
            entity,
            immediate=bool(opts.get("immediate")),
            header=not opts.get("noheader"),
            mode=mode,
            quiet=bool(opts.get("quiet")),
        ),
    )


def _split(words: Sequence[str], base: Request) -> Request:
    """Sort the words into names, where-conditions, set-values, flags and format."""
    names: list[str] = []
    where: list[Pair] = []
    values: list[Pair] = []
    flags: list[str] = []
    fmt: list[str] = []
    part = "values" if base.verb is Verb.ADD else "where"
    for word in words:
        if keyword(word, "where", 5):
            part = "where"
            continue
        if keyword(word, "set", 3):
            part = "values"
            continue
        pair = _pair(word)
        if pair is None:
            if base.verb is Verb.SHOW and _is_flag(word):
                flags.append(word.lower())
            else:
                names.extend(n for n in word.split(",") if n)
            continue
        if keyword(pair.key, "format", 1) and base.verb is Verb.SHOW:
            fmt.extend(f for f in pair.value.split(",") if f)
            continue
        (where if part == "where" else values).append(pair)
    return Request(
        base.verb,
        base.entity,
        tuple(names),
        tuple(where),
        tuple(values),
        tuple(flags),
        tuple(fmt),
        base.immediate,
        base.header,
        base.mode,
        base.quiet,
    )


_FLAGS = (("withassoc", 5), ("withdeleted", 5), ("tree", 4), ("wopinfo", 4), ("wolimits", 3))


def _is_flag(word: str) -> bool:
    return any(keyword(word, name, n) for name, n in _FLAGS)
