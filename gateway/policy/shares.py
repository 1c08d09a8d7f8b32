"""The fair-share tree of a PolicyState (associations + decayed usage), computed with the
configured algorithm, and `sshare` rendered from it (src/sshare/process.c, print_fields).

`build_tree` is the one place where associations become `ShareNode`s; the priority
refresh and sshare both use it, so they never disagree.
"""

from __future__ import annotations

import gc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from gateway.policy.fairshare import NO_VAL_F, ShareNode, classic, fair_tree
from gateway.policy.model import PolicyState
from gateway.policy.printfields import Column, Mode, render_table
from gateway.policy.priority import PriorityConfig

__all__ = [
    "ShareRow",
    "SshareError",
    "SshareOptions",
    "build_tree",
    "compute_shares",
    "parse_sshare",
    "render_sshare",
]


class ShareRow(NamedTuple):
    """One association in tree order with its depth (root 0)."""

    node: ShareNode
    depth: int
    parent: str  # parent account ("" for root)


def build_tree(state: PolicyState, usage: Mapping[int, float]) -> tuple[ShareNode, list[ShareRow]]:
    """The tree (root's node) and every association in sshare's order."""
    nodes: dict[int, ShareNode] = {}
    rows: list[ShareRow] = []
    depth_of: dict[str, int] = {}
    by_account: dict[str, ShareNode] = {}
    for a in state.tree_order():
        node = ShareNode(
            a.account, a.user or None, a.shares, usage.get(a.id, 0.0) if a.user else 0.0, [], a.id
        )
        if a.partition:
            node.partition = a.partition
        nodes[a.id] = node
        if a.user:
            parent = a.account
            depth = depth_of.get(a.account, 0) + 1
        else:
            parent = a.parent
            depth = 0 if a.account == "root" else depth_of.get(a.parent, 0) + 1
            depth_of[a.account] = depth
            by_account[a.account] = node
        up = by_account.get(parent)
        if up is not None and up is not node:
            up.children.append(node)
        rows.append(ShareRow(node, depth, parent))
    root = by_account.get("root") or ShareNode("root")
    return root, rows


def compute_shares(
    state: PolicyState, usage: Mapping[int, float], cfg: PriorityConfig
) -> tuple[ShareNode, list[ShareRow]]:
    """The tree with fair-share factors (Fair Tree or classic, as configured); the cyclic
    garbage collector waits meanwhile (see refresh.compute_priorities)."""
    paused = gc.isenabled()
    gc.disable()
    try:
        root, rows = build_tree(state, usage)
        if cfg.fair_tree:
            fair_tree(root)
        else:
            classic(root, cfg.dampening)
        return root, rows
    finally:
        if paused:
            gc.enable()


@dataclass(frozen=True, slots=True)
class SshareOptions:
    """What sshare was asked."""

    long: bool = False
    all_users: bool = False
    users: tuple[str, ...] = ()
    accounts: tuple[str, ...] = ()
    users_only: bool = False
    partitions: bool = False
    header: bool = True
    mode: Mode = Mode.COLUMNS
    fields: tuple[str, ...] = ()


_FIELDS: tuple[tuple[str, int], ...] = (
    ("Account", -20),
    ("Cluster", 10),
    ("EffectvUsage", 13),
    ("FairShare", 10),
    ("GrpTRESMins", 30),
    ("GrpTRESRaw", 30),
    ("ID", 6),
    ("LevelFS", 10),
    ("NormShares", 11),
    ("NormUsage", 11),
    ("Partition", 12),
    ("RawShares", 10),
    ("RawUsage", 11),
    ("TRESRunMins", 30),
    ("User", 10),
)


def _format(opts: SshareOptions, fair: bool) -> list[str]:
    if opts.fields:
        return list(opts.fields)
    part = ["P"] if opts.partitions else []
    if opts.long:
        tail = ["Fairshare", "LevelFS"] if fair else ["Fairshare"]
        head = ["A", "User", *part, "RawShares", "NormShares", "RawUsage", "NormUsage", "Eff"]
        return [*head, *tail, "GrpTRESMins", "TRESRunMins"]
    return ["A", "User", *part, "RawShares", "NormShares", "RawUsage", "Eff", "Fairshare"]


def _columns(names: Sequence[str]) -> list[Column]:
    out = []
    for item in names:
        word, _, width = item.partition("%")
        found = next((f for f in _FIELDS if f[0].lower().startswith(word.lower())), None)
        if found is None or not word:
            raise ValueError(f'Invalid field requested: "{word}"')
        out.append(Column(found[0], int(width) if width.lstrip("-").isdigit() else found[1]))
    return out


def _cells(
    row: ShareRow, cluster: str, cfg: PriorityConfig, tres: str
) -> dict[str, str | int | float | None]:
    n = row.node
    user = n.user is not None
    is_root = n.account == "root" and not user
    multi = cfg.multifactor
    name = row.parent if user else n.account
    level: float | None
    if not multi:
        level = 0.0
    elif n.shares_raw is None or n.level_fs == NO_VAL_F:
        level = None
    else:
        level = n.level_fs
    fs: float | None
    if cfg.fair_tree:
        fs = (n.fs_factor if multi else 0.0) if user else None
    else:
        fs = n.fs_factor if multi else 0.0
    return {
        "Account": " " * row.depth + name if not is_root else "root",
        "Cluster": cluster,
        "User": n.user,
        "Partition": n.partition or None,
        "RawShares": None if is_root else ("parent" if n.shares_raw is None else n.shares_raw),
        "NormShares": n.shares_norm if multi and not is_root else None,
        "RawUsage": int(n.total_usage),
        "NormUsage": n.usage_norm if multi else None,
        "EffectvUsage": (1.0 if is_root else n.usage_efctv) if multi else 0.0,
        "FairShare": fs,
        "LevelFS": level,
        "ID": n.assoc_id,
        "GrpTRESMins": None,
        "GrpTRESRaw": tres,
        "TRESRunMins": tres,
    }


def render_sshare(
    rows: Sequence[ShareRow],
    opts: SshareOptions,
    cfg: PriorityConfig,
    cluster: str,
    caller: str,
    tres_names: Sequence[str],
) -> str:
    """sshare's table: accounts always, user associations of the caller (or of `-u`
    users; every user with `-a`), `-U` users only, `-A` accounts only."""
    cols = _columns(_format(opts, cfg.fair_tree))
    zero = ",".join(f"{t}=0" for t in tres_names)
    users = set(opts.users) if opts.users else (None if opts.all_users else {caller})
    out_rows = []
    for row in rows:
        n = row.node
        if n.user is not None and users is not None and n.user not in users:
            continue
        if opts.users_only and n.user is None:
            continue
        if opts.accounts and n.account not in opts.accounts:
            continue
        cells = _cells(row, cluster, cfg, zero)
        if opts.users_only:  # the accounts are not listed, so nothing to indent under
            cells["Account"] = row.parent
        out_rows.append([cells.get(c.name) for c in cols])
    return render_table(cols, out_rows, opts.mode, opts.header)


class SshareError(Exception):
    """A bad sshare command line (the message; exit status 1)."""


def parse_sshare(argv: Sequence[str]) -> SshareOptions:
    """sshare's options (getopt: -a -A -l -m -n -o -p -P -u -U -v -M)."""
    vals: dict[str, object] = {}
    takes = {"A": "accounts", "u": "users", "o": "fields", "M": "clusters"}
    longs = {"--accounts": "accounts", "--users": "users", "--format": "fields",
             "--cluster": "clusters", "--clusters": "clusters"}  # fmt: skip
    flags = {"a": "all", "l": "long", "m": "partitions", "n": "noheader", "p": "parsable",
             "P": "parsable2", "U": "users_only", "v": "verbose"}  # fmt: skip
    lflags = {"--all": "all", "--long": "long", "--partition": "partitions",
              "--noheader": "noheader", "--parsable": "parsable", "--parsable2": "parsable2",
              "--Users": "users_only", "--verbose": "verbose"}  # fmt: skip
    args = list(argv)
    while args:
        word = args.pop(0)
        key = word.split("=", 1)[0]
        if word in lflags:
            vals[lflags[word]] = True
        elif key in longs:
            _, eq, val = word.partition("=")
            if not eq:
                if not args:
                    raise SshareError(f"sshare: option '{key}' requires an argument")
                val = args.pop(0)
            vals[longs[key]] = val
        elif word.startswith("-") and not word.startswith("--") and len(word) > 1:
            i = 1
            while i < len(word):
                ch = word[i]
                if ch in flags:
                    vals[flags[ch]] = True
                    i += 1
                elif ch in takes:
                    val = word[i + 1 :] or (args.pop(0) if args else "")
                    if not val:
                        raise SshareError(f"sshare: option requires an argument -- '{ch}'")
                    vals[takes[ch]] = val
                    break
                else:
                    raise SshareError(
                        f"sshare: invalid option -- '{ch}'\n"
                        'Try "sshare --help" for more information'
                    )
        else:
            raise SshareError(
                f"sshare: unrecognized option '{word}'\nTry \"sshare --help\" for more information"
            )
    mode = (
        Mode.PARSABLE2
        if vals.get("parsable2")
        else (Mode.PARSABLE if vals.get("parsable") else Mode.COLUMNS)
    )

    def split(key: str) -> tuple[str, ...]:
        return tuple(v for v in str(vals.get(key, "")).split(",") if v)

    fields = split("fields")
    try:
        _columns(fields)
    except ValueError as exc:
        raise SshareError(str(exc)) from None
    return SshareOptions(
        long=bool(vals.get("long")),
        all_users=bool(vals.get("all")),
        users=split("users"),
        accounts=tuple(a.lower() for a in split("accounts")),
        users_only=bool(vals.get("users_only")),
        partitions=bool(vals.get("partitions")),
        header=not vals.get("noheader"),
        mode=mode,
        fields=fields,
    )
