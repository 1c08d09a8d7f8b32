"""Generic resources (`--gres`, `--gpus*`) as Slurm 22.05 records and parses them.

sbatch turns each option into a TRES string that slurmctld stores verbatim and
`scontrol show job` prints (`TresPerNode=gres:gpu:2k,gres:craynetwork`):

* `--gres=a,b` becomes `gres:a,gres:b` (`gres_prepend_tres_type`, a leading `gres:` is
  not doubled); `--gres=none` sends nothing;
* `--gpus*=x,y` becomes `gres:gpu:x,gres:gpu:y` (`xfmt_tres`, empty items dropped).

Each item is then read by `_get_next_gres`: `name[:type][:count]`, the count a number
with an optional k/m/g/t/p suffix (powers of 1024, `kb`... powers of 1000), a count that
is not a number being a type with count 1, and a count of 0 dropping the item from the
request (the text keeps it). A GresItem keeps the item's text so that what Caldera
prints and renders is what Slurm would. `GresItem` lives in `gateway.model.values`.
"""

from __future__ import annotations

from functools import lru_cache

from gateway.compat.cnum import strtoul
from gateway.model.values import GresItem

__all__ = [
    "format_tres",
    "gpus_tres",
    "gres_tres",
    "parse_gpus",
    "parse_gres",
    "parse_tres_item",
    "suffix_mult",
]

_UINT64 = 2**64
_SUFFIX: dict[str, int] = {"": 1}
for _i, _u in enumerate("kmgtp", start=1):
    _SUFFIX[_u] = _SUFFIX[_u + "ib"] = 1024**_i
    _SUFFIX[_u + "b"] = 1000**_i


def suffix_mult(suffix: str) -> int | None:
    """Slurm's `suffix_mult`: the multiplier of a count suffix, None when unknown."""
    return _SUFFIX.get(suffix.lower())


def _number(tok: str) -> int | None:
    """`_is_valid_number`: strtoull plus an optional size suffix; None when invalid."""
    value, end = strtoul(tok)
    mult = suffix_mult(tok[end:])
    if mult is None or value == _UINT64 - 1:
        return None
    return (value * mult) % _UINT64


@lru_cache(maxsize=4096)
def parse_tres_item(text: str) -> GresItem | None:
    """One item of a TRES string, without its `gres:` prefix; None when malformed.

    The name is not checked against the site's GRES here (see `gres_check`).
    """
    name, colon, rest = text.partition(":")
    if not colon:
        return GresItem(name, None, 1, text)
    gtype, colon2, count_text = rest.partition(":")
    if colon2:  # name:type:count
        if gtype == "" or count_text == "":
            return None
        count = _number(count_text)
        return None if count is None else GresItem(name, gtype, count, text)
    if rest == "":
        return None
    count = _number(rest)
    if count is None:
        return GresItem(name, rest, 1, text)
    return GresItem(name, None, count, text)


def gres_tres(arg: str) -> list[str] | None:
    """The TRES items sbatch sends for `--gres=arg` (without `gres:`); None for `none`."""
    if arg.lower() == "none":
        return None
    text = ("gres:" + arg).replace(",", ",gres:").replace("gres:gres:", "gres:")
    return [tok[5:] if tok.startswith("gres:") else tok for tok in text.split(",")]


def gpus_tres(arg: str) -> list[str]:
    """The TRES items sbatch sends for `--gpus*=arg` (without `gres:`)."""
    return ["gpu:" + tok for tok in arg.split(",") if tok]


def _items(tokens: list[str]) -> tuple[GresItem, ...] | None:
    items: list[GresItem] = []
    for tok in tokens:
        if tok == "":
            continue  # "Nothing but a comma" (slurmctld refuses it later, see gres_check)
        item = parse_tres_item(tok)
        if item is None:
            return None
        items.append(item)
    return tuple(items)


def parse_gres(spec: str) -> tuple[GresItem, ...] | None:
    """Parse a `--gres` value; None where Slurm answers "Invalid generic resource".

    `none` (any case) is the empty request. Items with a zero count are kept (Slurm
    records them) but request nothing.
    """
    tokens = gres_tres(spec)
    return () if tokens is None else _items(tokens)


def parse_gpus(spec: str) -> tuple[GresItem, ...] | None:
    """Parse a `--gpus*` value (`[type:]count[,...]`) into `gpu` items."""
    return _items(gpus_tres(spec))


def format_tres(items: tuple[GresItem, ...]) -> str:
    """`gres:gpu:2,gres:craynetwork:1` as in `TresPerNode=`."""
    return ",".join(item.tres() for item in items)
