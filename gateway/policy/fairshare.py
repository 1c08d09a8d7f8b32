"""Fair share as Slurm 22.05's priority/multifactor computes it: Fair Tree (the default) and
the classic algorithm (PriorityFlags=NO_FAIR_TREE), plus the half-life decay of usage.

Ported from `src/plugins/priority/multifactor/fair_tree.c` and `priority_multifactor.c`
(`_set_usage_efctv`, `priority_p_calc_fs_factor`, `set_assoc_usage_norm`) and
`src/common/assoc_mgr.c` (`_normalize_assoc_shares_*`) rather than from the HTML pages,
where the two differ: the code is what sites run. One known difference: the HTML says that
sibling accounts with equal Level FS have their children merged; the 22.05 code never merges
them (`_count_tied_accounts` stops at the first account), and the first user below a tied
account keeps the rank of the user ranked just before. `fair_tree` does what the code does.

The tree is a plain structure (`ShareNode`) so that 10,000 users are recomputed in a few
tens of milliseconds: one bottom-up pass for usage, one top-down pass for the factors.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

__all__ = [
    "NO_VAL_F",
    "ShareNode",
    "classic",
    "decay_factor",
    "decayed",
    "fair_tree",
    "fs_factor",
    "iter_tree",
]

NO_VAL_F = float(0xFFFFFFFE)  # Slurm's NO_VAL as a long double (an account with parent shares)


@dataclass(slots=True, eq=False)
class ShareNode:
    """One association in the fair-share tree: an account (`user` None) or a user.

    `shares_raw` None is `FairShare=parent`. `usage_raw` is the decayed usage charged to the
    association itself (users); accounts get the sum of their subtree in `total_usage`.
    The other fields are outputs, as `sshare -l` prints them.
    """

    account: str
    user: str | None = None
    shares_raw: int | None = 1
    usage_raw: float = 0.0
    children: list[ShareNode] = field(default_factory=list)
    assoc_id: int = 0
    partition: str = ""
    # outputs
    total_usage: float = 0.0
    level_shares: int = 0  # sum of the siblings' shares (self included)
    shares_norm: float = 0.0
    usage_norm: float = 0.0
    usage_efctv: float = 0.0
    level_fs: float = 0.0
    fs_factor: float = 0.0

    @property
    def name(self) -> str:
        """The user for a user association, else the account."""
        return self.user if self.user is not None else self.account


def iter_tree(root: ShareNode) -> Iterator[tuple[ShareNode, ShareNode | None]]:
    """Every node with its parent, depth first in children order (root first)."""
    stack: list[tuple[ShareNode, ShareNode | None]] = [(root, None)]
    while stack:
        node, parent = stack.pop()
        yield node, parent
        stack.extend((c, node) for c in reversed(node.children))


def decay_factor(half_life_s: float) -> float:
    """The per-second decay of PriorityDecayHalfLife: `1 - 0.693 / hl` (Slurm's linearised
    `e^(ln(1/2)/hl)`); 1 (no decay) when the half-life is 0."""
    return 1.0 - (0.693 / half_life_s) if half_life_s > 0 else 1.0


def decayed(usage: float, seconds: float, half_life_s: float) -> float:
    """Usage after `seconds` of decay, as the decay thread applies it (`_apply_decay`:
    `usage * decay_factor ** seconds`, never below DBL_MIN of the factor)."""
    if seconds <= 0:
        return usage
    real: float = decay_factor(half_life_s) ** seconds
    return usage * max(real, 2.2250738585072014e-308)


def fs_factor(usage_efctv: float, shares_norm: float, dampening: int = 1) -> float:
    """Classic fair-share factor `2^(-(UE/S)/dampening)` (`priority_p_calc_fs_factor`); 0
    when the association has no shares."""
    if shares_norm <= 0:
        return 0.0
    return float(2.0 ** (-((usage_efctv / shares_norm) / dampening)))


def _prepare(root: ShareNode) -> tuple[list[tuple[ShareNode, ShareNode | None]], int]:
    """Sum usage up the tree and the level shares of each sibling group; the nodes in
    pre-order with their fair-share parent (the nearest ancestor that does not take its
    parent's shares), and the number of user associations. Plain loops: this runs over
    every association at every calculation."""
    order: list[tuple[ShareNode, ShareNode | None]] = []
    stack: list[tuple[ShareNode, ShareNode | None]] = [(root, None)]
    pop, push, add = stack.pop, stack.append, order.append
    while stack:
        item = pop()
        add(item)
        node = item[0]
        if node.children:
            # fair-share parent of the children: this node, or (FairShare=parent) its own
            fs = node if node.shares_raw is not None or item[1] is None else item[1]
            for child in reversed(node.children):
                push((child, fs))
    users = 0
    for node, _ in reversed(order):
        if node.user is not None:
            node.total_usage = node.usage_raw
            users += 1
            continue
        total = node.usage_raw
        level = 0
        for child in node.children:
            total += child.total_usage
            if child.shares_raw is not None:
                level += child.shares_raw
        node.total_usage = total
        for child in node.children:
            child.level_shares = level
    return order, users


def _usage_norm(node: ShareNode, root_usage: float) -> float:
    if not root_usage:
        return 0.0
    return min(1.0, node.total_usage / root_usage)


def classic(root: ShareNode, dampening: int = 1) -> None:
    """PriorityFlags=NO_FAIR_TREE: normalised shares (the product of share ratios up the
    tree), effective usage `UE = UA + (UE_parent - UA) * S_child / S_siblings` below the first
    tier, and `FairShare = 2^(-(UE/S)/dampening)` for every association."""
    nodes, _ = _prepare(root)
    root.usage_norm = 1.0 if root.total_usage else 0.0
    root.usage_efctv = 1.0
    root.shares_norm = 1.0
    root_usage = root.total_usage
    for node, fs in nodes[1:]:
        assert fs is not None
        node.usage_norm = _usage_norm(node, root_usage)
        if node.shares_raw is None:
            node.shares_norm = fs.shares_norm
        elif not node.level_shares:
            node.shares_norm = 0.0
        else:
            node.shares_norm = _traditional_norm(node, fs)
        if fs is root:
            node.usage_efctv = node.usage_norm
        elif node.shares_raw is None or not node.level_shares:
            node.usage_efctv = fs.usage_efctv
        else:
            ua = node.usage_norm
            node.usage_efctv = ua + (fs.usage_efctv - ua) * (node.shares_raw / node.level_shares)
        node.fs_factor = fs_factor(node.usage_efctv, node.shares_norm, dampening)
        node.level_fs = 0.0


def _traditional_norm(node: ShareNode, fs: ShareNode) -> float:
    """`_normalize_assoc_shares_traditional`: this level's ratio times the parent's
    normalised shares (the parent was visited first, pre-order)."""
    assert node.shares_raw is not None
    return fs.shares_norm * node.shares_raw / node.level_shares


def fair_tree(root: ShareNode) -> None:
    """Fair Tree: Level FS = S/U per sibling group, siblings sorted by it (users before
    accounts on a tie), users ranked in that pre-order; FairShare = rank / user count."""
    nodes, users = _prepare(root)
    root_usage = root.total_usage
    root.level_fs = NO_VAL_F
    for node, fs in nodes[1:]:
        assert fs is not None
        node.usage_norm = _usage_norm(node, root_usage)
        src = fs if node.shares_raw is None else node
        src_shares = src.shares_raw if src.shares_raw is not None else 0
        node.shares_norm = src_shares / src.level_shares if src.level_shares else 0.0
        node.usage_efctv = node.total_usage / fs.total_usage if fs.total_usage else 0.0
        if node.shares_raw is None:
            node.level_fs = math.inf if node.user is not None else NO_VAL_F
        elif node.shares_norm == 0:
            node.level_fs = 0.0
        elif node.usage_efctv == 0:
            node.level_fs = math.inf
        else:
            node.level_fs = node.shares_norm / node.usage_efctv
    state = [users, users]  # rank, rank-next-to-give (Slurm's rank and rnt)
    _rank(root.children, state, users, False)


def _sort_key(node: ShareNode) -> tuple[float, int]:
    return (-node.level_fs, 0 if node.user is not None else 1)


def _rank(siblings: list[ShareNode], state: list[int], users: int, account_tied: bool) -> None:
    """`_calc_tree_fs`: visit siblings by Level FS (descending), rank users, descend into
    accounts; a tie with the previous sibling keeps the previous rank."""
    ordered = sorted(siblings, key=_sort_key)  # stable, as qsort on distinct keys
    prev = NO_VAL_F
    for i, node in enumerate(ordered):
        tied = True if (i == 0 and account_tied) else prev == node.level_fs
        if node.user is not None:
            if not tied:
                state[0] = state[1]
            node.fs_factor = state[0] / users if users else 0.0
            state[1] -= 1
        else:
            _rank(node.children, state, users, tied)
        prev = node.level_fs
