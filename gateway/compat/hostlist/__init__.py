"""Slurm 22.05 hostlist expressions, as `scontrol show hostnames|hostlist|hostlistsorted` see them.

A port of the behaviour of Slurm's `src/common/hostlist.c` (one-dimensional clusters, not
Cray) and of the three `scontrol show` commands built on it:

* `expand("rack[1-2]-node[01-02]")` lists every host in order, duplicates kept, like
  `scontrol show hostnames`;
* `compress(["n1", "n2", "n4"])` gives the ranged string `n[1-2,4]` like
  `scontrol show hostlist n1,n2,n4` (input order kept, only neighbours merge);
* `compress_sorted(...)` is `scontrol show hostlistsorted` (Slurm's `hostlist_sort`);
* `uniq(...)` is `hostlist_uniq` (sort, then drop duplicates), `count(...)` is
  `hostlist_count`;
* `show(command, arg)` reproduces the whole command: stdout, stderr and exit status.

Slurm works on C strings, so this module works on the UTF-8 bytes of its input
(`surrogateescape`, as Python passes arguments to a program): widths are byte counts, the
input stops at a NUL, `isdigit`/`isspace` are those of the C locale, numbers are C
`unsigned long` (64 bits, `strtoul` saturates) and host counts are C `int`. Sorting is
glibc 2.36's `qsort` (a merge sort) called with Slurm's compare, which is not a strict
order and may change a range's zero-padding width as it compares; `compress_sorted` and
`uniq` replay it compare by compare where a plain `sorted()` could differ. Slurm's own
oddities are kept on purpose; `show` lists the known ones.

Where scontrol itself misbehaves rather than answers, `HostlistError` is raised instead: a
prefix range ending at 2**64-1, or overlapping ranges ending there under a sort (Slurm
loops forever), and a host range ending at 2**64-1 under `show hostnames` (scontrol dies
of SIGSEGV, exit status 139).

Layout: `common` (limits, how scontrol fails), `cstring` (C string helpers, `strnatcmp`),
`ranges` (one host range, its compares and sorts), `rangelist` (the list: push, coalesce,
uniq, format), `parser` (`hostlist_create`); this module is the public API.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from gateway.compat.errors import Diagnostic, Level
from gateway.compat.hostlist.common import (
    EXIT_SEGFAULT,
    MAX_PREFIX_CNT,
    MAX_RANGE,
    MAX_RANGES,
    HostlistError,
    ShowResult,
    _Fatal,
    _Hang,
)
from gateway.compat.hostlist.cstring import _to_bytes
from gateway.compat.hostlist.parser import _Parser
from gateway.compat.hostlist.rangelist import _Hostlist

__all__ = [
    "EXIT_SEGFAULT",
    "MAX_PREFIX_CNT",
    "MAX_RANGE",
    "MAX_RANGES",
    "HostlistError",
    "ShowResult",
    "compress",
    "compress_sorted",
    "count",
    "expand",
    "show",
    "uniq",
]


def _join_hosts(hosts: str | Iterable[str]) -> str:
    return hosts if isinstance(hosts, str) else ",".join(hosts)


def _build(expr: str, exit_code: int) -> tuple[_Hostlist, list[Diagnostic], str]:
    """Parse like scontrol; raise `HostlistError` where scontrol prints `Invalid hostlist`."""
    raw, handler = _to_bytes(expr)
    parser = _Parser()
    try:
        hl = parser.create(raw)
    except _Fatal as exc:
        lines = _diagnostics(parser.diags, handler)
        raise HostlistError(*lines, Diagnostic(Level.FATAL, str(exc)), exit_code=1) from None
    except _Hang as exc:
        lines = _diagnostics(parser.diags, handler)
        raise HostlistError(*lines, exit_code=exit_code, reason=str(exc)) from None
    diags = _diagnostics(parser.diags, handler)
    if hl is None:
        text = "Invalid hostlist: " + raw.decode("utf-8", handler)
        raise HostlistError(*diags, Diagnostic(Level.RAW, text), exit_code=exit_code)
    return hl, diags, handler


def _diagnostics(lines: list[bytes], handler: str) -> list[Diagnostic]:
    return [Diagnostic(Level.ERROR, line.decode("utf-8", handler)) for line in lines]


def _shift_all(hl: _Hostlist, diags: list[Diagnostic], handler: str, exit_code: int) -> list[str]:
    hosts = hl.shift_all(handler)
    if hosts is None:
        raise HostlistError(
            *diags,
            exit_code=exit_code,
            reason="scontrol crashes (SIGSEGV): a range ending at 2**64-1 miscounts its hosts",
        )
    return hosts


def _sort(hl: _Hostlist, diags: list[Diagnostic]) -> None:
    try:
        hl.sort()
    except _Hang as exc:
        raise HostlistError(*diags, exit_code=1, reason=str(exc)) from None


def expand(expr: str) -> list[str]:
    """Every host of `expr` in order, duplicates kept: `scontrol show hostnames <expr>`.

    Raises `HostlistError` where scontrol prints `Invalid hostlist` (its `exit_code` is 0,
    as scontrol's), or would crash (139) or loop forever.
    """
    hl, diags, handler = _build(expr, 0)
    return _shift_all(hl, diags, handler, EXIT_SEGFAULT)


def compress(hosts: str | Iterable[str]) -> str:
    """The ranged string of `hosts` in input order: `scontrol show hostlist a,b,c`.

    `hosts` is joined with commas and read as one hostlist expression, so its items may be
    expressions themselves (`["n[1-3]", "n5"]` gives `n[1-3,5]`); a plain `str` is taken as
    the expression itself. Only neighbouring ranges merge: `n3,n1,n2` gives `n[3,1-2]`.
    Raises `HostlistError` (exit status 1) where scontrol prints `Invalid hostlist`.
    """
    hl, _, handler = _build(_join_hosts(hosts), 1)
    return hl.ranged_string().decode("utf-8", handler)


def compress_sorted(hosts: str | Iterable[str]) -> str:
    """`scontrol show hostlistsorted`: Slurm's `hostlist_sort`, then the ranged string.

    Slurm's sort is natural order by prefix, then by number; it does *not* drop duplicates:
    `n1,n1,n2` gives `n[1,1-2]`, overlapping ranges are split (`n[1-5],n[3-8]` gives
    `n[1-3,3-4,4-5,5-8]`). Use `compress_sorted(uniq(...))` for a duplicate-free string.
    """
    hl, diags, handler = _build(_join_hosts(hosts), 1)
    _sort(hl, diags)
    return hl.ranged_string().decode("utf-8", handler)


def uniq(hosts: str | Iterable[str]) -> list[str]:
    """`hostlist_uniq`: the hosts sorted as Slurm sorts them, each once."""
    hl, diags, handler = _build(_join_hosts(hosts), 1)
    hl.uniq()
    return _shift_all(hl, diags, handler, 1)


def count(expr: str) -> int:
    """`hostlist_count` after `hostlist_create`: how many hosts `expr` holds (a C int)."""
    hl, _, _ = _build(expr, 1)
    return hl.nhosts


def show(command: Literal["hostnames", "hostlist", "hostlistsorted"], arg: str) -> ShowResult:
    """What `scontrol show <command> <arg>` prints and returns, byte for byte.

    `arg` is always read as an expression (scontrol's `show hostlist /path` reads a file;
    this does no IO). Behaviour kept from scontrol that may surprise:

    * `show hostnames` exits 0 even after `Invalid hostlist: ...`;
    * errors in a range of a prefix (`a[x]b[1-2]c[3]`) are printed once per prefix value
      but the expression is still accepted (with those hosts left out);
    * nothing may follow the last `]`: `n[1-2]x` is invalid, `n[1-2]x[1]` is not;
    * a token with `[` and no `]` keeps its prefix and gains a `]`: `n[1-3` is host `n]`;
    * a range's width is the byte length of its low bound as written, so `n[ 1-3]`,
      `n[+1-3]` and `n[1a-3]` all give `n01,n02,n03`;
    * numbers beyond 2**64-1 saturate: `n99999999999999999999999` is
      `n00018446744073709551615`;
    * `hostlistsorted` keeps duplicates and splits overlaps (`n[1-5],n[3-8]` gives
      `n[1-3,3-4,4-5,5-8]`), and its compare may rename hosts of mixed zero-padding
      (`[00-00,0-10],[0-10]` gives `[0,0-1,1-2,...]`: `00` became `0`).
    """
    exit_code = 0 if command == "hostnames" else 1
    try:
        hl, diags, handler = _build(arg, exit_code)
        if command == "hostnames":
            hosts = _shift_all(hl, diags, handler, EXIT_SEGFAULT)
            stdout = "".join(h + "\n" for h in hosts)
        else:
            if command == "hostlistsorted":
                _sort(hl, diags)
            stdout = hl.ranged_string().decode("utf-8", handler) + "\n"
    except HostlistError as exc:
        if exc.reason and exc.exit_code != EXIT_SEGFAULT:
            raise
        return ShowResult("", exc.render(), exc.exit_code)
    stderr = HostlistError(*diags).render() if diags else ""
    return ShowResult(stdout, stderr, 0)
