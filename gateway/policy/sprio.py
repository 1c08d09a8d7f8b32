"""`sprio` (src/sprio): options, Slurm's default formats (only the factors whose weight is
set; `-l` all of them; `-n` normalised), `-w` (the weights), `-o` format letters and the
sort (`-S`, default by job id), from the factors the priority refresh computed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gateway.policy.priority import Factors, PriorityConfig

__all__ = ["SprioOptions", "SprioRow", "parse_sprio", "render_sprio"]


@dataclass(frozen=True, slots=True)
class SprioRow:
    """One pending job's factors with what sprio prints beside them."""

    factors: Factors
    partition: str
    user: str
    uid: int


@dataclass(frozen=True, slots=True)
class SprioOptions:
    """What sprio was asked."""

    long: bool = False
    normalized: bool = False
    weights: bool = False
    header: bool = True
    jobs: tuple[int, ...] = ()
    users: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    fmt: str | None = None
    sort: str = "i"


class SprioError(Exception):
    """A bad command line: the message and the exit status."""


def _split(value: str) -> tuple[str, ...]:
    return tuple(v for v in value.split(",") if v)


def parse_sprio(argv: Sequence[str]) -> SprioOptions:
    """sprio's getopt options; SprioError for a bad one."""
    opts: dict[str, object] = {}
    args = list(argv)
    takes = {"-j": "jobs", "-u": "users", "-p": "partitions", "-o": "fmt", "-S": "sort"}
    longs = {
        "--jobs": "jobs", "--user": "users", "--users": "users", "--partition": "partitions",
        "--format": "fmt", "--sort": "sort",
    }  # fmt: skip
    flags = {"-l": "long", "-n": "normalized", "-w": "weights", "-h": "noheader"}
    lflags = {"--long": "long", "--norm": "normalized", "--weights": "weights",
              "--noheader": "noheader"}  # fmt: skip
    while args:
        word = args.pop(0)
        if word in lflags:
            opts[lflags[word]] = True
        elif word.split("=", 1)[0] in longs:
            key, eq, val = word.partition("=")
            if not eq:
                if not args:
                    raise SprioError(f"sprio: option '{key}' requires an argument")
                val = args.pop(0)
            opts[longs[key]] = val
        elif word.startswith("-") and len(word) > 1 and not word.startswith("--"):
            i = 1
            while i < len(word):
                flag = "-" + word[i]
                if flag in flags:
                    opts[flags[flag]] = True
                    i += 1
                    continue
                if flag in takes:
                    val = word[i + 1 :]
                    if not val:
                        if not args and flag != "-j":
                            raise SprioError(f"sprio: option requires an argument -- '{word[i]}'")
                        val = args.pop(0) if args else ""
                    opts[takes[flag]] = val
                    break
                raise SprioError(f"sprio: invalid option -- '{word[i]}'")
        else:
            raise SprioError(f"sprio: unrecognized option '{word}'")
    jobs: tuple[int, ...] = ()
    for j in _split(str(opts.get("jobs", ""))):
        if not j.isdigit():
            raise SprioError(f"Invalid job id: {j}")
        jobs = (*jobs, int(j))
    sort = str(opts.get("sort", "i"))
    for ch in sort:
        if ch not in ",+-ciNruAaFfJjPpQqTtYy":
            raise SprioError(f"sprio: error: Invalid sort specification: {ch}")
    return SprioOptions(
        long=bool(opts.get("long")),
        normalized=bool(opts.get("normalized")),
        weights=bool(opts.get("weights")),
        header=not opts.get("noheader"),
        jobs=jobs,
        users=_split(str(opts.get("users", ""))),
        partitions=_split(str(opts.get("partitions", ""))),
        fmt=str(opts["fmt"]) if "fmt" in opts else None,
        sort=sort,
    )


def _default_format(o: SprioOptions, cfg: PriorityConfig) -> str:
    if o.normalized:
        if o.long:
            return "%.15i %9r %.8u %10y %10a %10b %10f %10j %10p %10q %20t"
        parts = ["%.15i %9r", *([" %.8u"] if o.users else []), " %10y"]
        letters = "abfjpq"
    else:
        if o.long:
            return "%.15i %9r %.8u %.10Y %.10S %.10A %.10B %.10F %.10J %.10P %.10Q %.11N %.20T"
        parts = ["%.15i %9r", *([" %.8u"] if o.users else []), " %.10Y %.10S"]
        letters = "ABFJPQ"
    weights = (
        cfg.weight_age,
        cfg.weight_assoc,
        cfg.weight_fairshare,
        cfg.weight_jobsize,
        cfg.weight_partition,
        cfg.weight_qos,
    )
    width = "10" if o.normalized else ".10"
    parts.extend(f" %{width}{ch}" for ch, w in zip(letters, weights, strict=True) if w)
    if cfg.weight_tres:
        parts.append(" %20t" if o.normalized else " %.20T")
    return "".join(parts)


def _pad(text: str, width: int, right: bool) -> str:
    """sprio's `_print_str`: `%Ns` (right) or `%.Ns` (left), cut to the width, padded."""
    if width == 0:
        return text
    return (text.rjust(width) if right else text)[:width].ljust(width)


_HEAD = {
    "a": "AGE", "A": "AGE", "b": "ASSOC", "B": "ASSOC", "c": "CLUSTER", "f": "FAIRSHARE",
    "F": "FAIRSHARE", "i": "JOBID", "j": "JOBSIZE", "J": "JOBSIZE", "N": "NICE",
    "p": "PARTITION", "P": "PARTITION", "r": "PARTITION", "q": "QOS", "Q": "QOS", "S": "SITE",
    "t": "TRES", "T": "TRES", "u": "USER", "y": "PRIORITY", "Y": "PRIORITY",
}  # fmt: skip


def _weighted(f: Factors) -> dict[str, float]:
    return {"A": f.age, "B": f.assoc, "F": f.fairshare, "J": f.jobsize, "P": f.partition,
            "Q": f.qos}  # fmt: skip


def _value(ch: str, row: SprioRow, cfg: PriorityConfig) -> str:
    f = row.factors
    weights = {"A": cfg.weight_age, "B": cfg.weight_assoc, "F": cfg.weight_fairshare,
               "J": cfg.weight_jobsize, "P": cfg.weight_partition, "Q": cfg.weight_qos}  # fmt: skip
    if ch in weights:
        return f"{_weighted(f)[ch]:.0f}"
    if ch.upper() in weights:
        w = weights[ch.upper()]
        return f"{(_weighted(f)[ch.upper()] / w if w else 0.0):.7f}"
    if ch == "i":
        return str(f.job_id)
    if ch == "r":
        return row.partition
    if ch == "u":
        return row.user
    if ch == "c":
        return ""
    if ch == "S":
        return str(f.site)
    if ch == "N":
        return str(f.nice)
    if ch == "Y":
        return str(f.priority)
    if ch == "y":
        return f"{f.priority / 0xFFFFFFFF:16.14f}"
    if ch == "T":
        return ",".join(f"{k}={v:.0f}" for k, v in f.tres.items() if v)
    if ch == "t":
        return ",".join(
            f"{k}={v / cfg.weight_tres[k]:.2f}"
            for k, v in f.tres.items()
            if v and cfg.weight_tres.get(k)
        )
    raise AssertionError(ch)


def _weights_value(ch: str, cfg: PriorityConfig) -> str:
    table = {"A": cfg.weight_age, "B": cfg.weight_assoc, "F": cfg.weight_fairshare,
             "J": cfg.weight_jobsize, "P": cfg.weight_partition, "Q": cfg.weight_qos}  # fmt: skip
    if (ch.upper() in table and ch not in ("p",)) or ch == "p":
        return str(table[ch.upper()])
    if ch == "i":
        return "Weights"
    if ch == "S":
        return "1"
    if ch in ("T", "t"):
        return ",".join(
            f"{k.upper() if k in ('cpu', 'mem') else k}={v:g}" for k, v in cfg.weight_tres.items()
        )
    return ""


_TOKEN = re.compile(r"%(\.?)(\d*)([a-zA-Z])")


def _fields(fmt: str) -> list[tuple[str, int, bool, str]]:
    """(letter, width, right-justified, text that follows) of a format string."""
    out: list[tuple[str, int, bool, str]] = []
    pos = 0
    prefix = ""
    for m in _TOKEN.finditer(fmt):
        if not out:
            prefix = fmt[pos : m.start()]
        else:
            letter, width, right, _ = out[-1]
            out[-1] = (letter, width, right, fmt[pos : m.start()])
        if m.group(3) not in _HEAD:
            raise SprioError(f"Invalid job format specification: {m.group(3)}")
        out.append((m.group(3), int(m.group(2) or 0), bool(m.group(1)), ""))
        pos = m.end()
    if out:
        letter, width, right, _ = out[-1]
        out[-1] = (letter, width, right, fmt[pos:])
    if prefix:
        out.insert(0, ("", 0, False, prefix))
    return out


def _sort(rows: list[SprioRow], spec: str, cfg: PriorityConfig) -> list[SprioRow]:
    keys: dict[str, Callable[[SprioRow], object]] = {
        "i": lambda r: r.factors.job_id, "c": lambda r: "", "N": lambda r: r.factors.nice,
        "r": lambda r: r.partition, "u": lambda r: r.user, "a": lambda r: r.factors.age,
        "f": lambda r: r.factors.fairshare, "j": lambda r: r.factors.jobsize,
        "p": lambda r: r.factors.partition, "q": lambda r: r.factors.qos,
        "t": lambda r: sum(r.factors.tres.values()), "y": lambda r: r.factors.priority,
    }  # fmt: skip
    out = list(rows)
    for i in range(len(spec) - 1, -1, -1):  # from the end: the first key sorts last
        ch = spec[i]
        if ch in ",+-":
            continue
        key = keys[ch if ch in keys else ch.lower()]
        out.sort(key=key, reverse=i > 0 and spec[i - 1] == "-")  # type: ignore[arg-type]
    return out


def render_sprio(rows: Sequence[SprioRow], o: SprioOptions, cfg: PriorityConfig) -> str:
    """The table (or "Unable to find jobs matching user/id(s) specified")."""
    fields = _fields(o.fmt if o.fmt is not None else _default_format(o, cfg))
    lines: list[str] = []

    def line(value: Callable[[str], str], head: bool = False) -> str:
        text = ""
        for letter, width, right, suffix in fields:
            if letter:
                text += _pad(value(letter), width, right)
            text += suffix
        return text

    if o.header:
        lines.append(line(lambda ch: _HEAD[ch]))
    if o.weights:
        lines.append(line(lambda ch: _weights_value(ch, cfg)))
        return "".join(x + "\n" for x in lines)
    picked = [
        r
        for r in rows
        if (not o.jobs or r.factors.job_id in o.jobs)
        and (not o.users or r.user in o.users)
        and (not o.partitions or r.partition in o.partitions)
    ]
    if o.jobs and not picked:
        return "Unable to find jobs matching user/id(s) specified\n"
    for r in _sort(picked, o.sort, cfg):
        lines.append(line(lambda ch, r=r: _value(ch, r, cfg)))  # type: ignore[misc]
    return "".join(x + "\n" for x in lines)
