"""Accounts, users, QOS and associations as slurmdbd keeps them (typed, immutable).

`PolicyState` is the whole accounting configuration of one Caldera cluster; sacctmgr's
verbs are pure functions `PolicyState -> PolicyState` (`sacctmgr_apply`), the store keeps
it (`gateway/store/policy_store.py`). Limits use None for "not set" (slurmdbd's NO_VAL) and
are inherited down the account tree as slurmdbd does for Max* limits, QOS and DefaultQOS.
TRES amounts are kept as Slurm prints them after `=` (counts, memory in MiB).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

__all__ = [
    "Account",
    "Assoc",
    "PolicyState",
    "Qos",
    "TresMap",
    "User",
    "initial_state",
]

TresMap = Mapping[str, int]  # "cpu" -> 8, "mem" -> 4096 (MiB), "gres/gpu" -> 2


@dataclass(frozen=True, slots=True)
class Qos:
    """A quality of service (`sacctmgr show qos`)."""

    name: str
    id: int
    description: str = ""
    priority: int = 0
    preempt: tuple[str, ...] = ()
    preempt_mode: str = "cluster"
    preempt_exempt_s: int | None = None
    grace_time_s: int = 0
    usage_factor: float = 1.0
    flags: tuple[str, ...] = ()
    grp_tres: TresMap = field(default_factory=dict)
    grp_jobs: int | None = None
    grp_submit: int | None = None
    grp_wall: int | None = None  # minutes
    max_tres_pj: TresMap = field(default_factory=dict)
    max_tres_pu: TresMap = field(default_factory=dict)
    max_jobs_pu: int | None = None
    max_submit_pu: int | None = None
    max_wall: int | None = None  # minutes per job


@dataclass(frozen=True, slots=True)
class Account:
    """An account (`sacctmgr show account`)."""

    name: str
    description: str
    organization: str


@dataclass(frozen=True, slots=True)
class User:
    """A user (`sacctmgr show user`)."""

    name: str
    default_account: str
    admin_level: str = "None"


@dataclass(frozen=True, slots=True)
class Assoc:
    """An association: an account's place in the tree (`user` empty, `parent` its parent
    account) or a user's membership of an account (`parent` empty)."""

    id: int
    cluster: str
    account: str
    user: str = ""
    partition: str = ""
    parent: str = ""
    shares: int | None = 1  # None: FairShare=parent
    priority: int | None = None
    grp_jobs: int | None = None
    grp_submit: int | None = None
    grp_wall: int | None = None
    grp_tres: TresMap = field(default_factory=dict)
    max_jobs: int | None = None
    max_submit: int | None = None
    max_wall: int | None = None
    max_tres_pj: TresMap = field(default_factory=dict)
    qos: tuple[str, ...] | None = None  # None: inherited from the parent
    default_qos: str | None = None

    @property
    def is_user(self) -> bool:
        """Whether this is a user association."""
        return bool(self.user)


@dataclass(frozen=True, slots=True)
class PolicyState:
    """Everything sacctmgr manages for one cluster."""

    cluster: str
    accounts: Mapping[str, Account]
    users: Mapping[str, User]
    qos: Mapping[str, Qos]
    assocs: tuple[Assoc, ...]
    next_assoc_id: int
    next_qos_id: int

    def account_assoc(self, account: str) -> Assoc | None:
        """The account's own association (its place in the tree)."""
        for a in self.assocs:
            if a.account == account and not a.user:
                return a
        return None

    def children(self, account: str) -> list[Assoc]:
        """Associations directly below an account: its users, then its sub-accounts."""
        users = [a for a in self.assocs if a.account == account and a.user]
        subs = [a for a in self.assocs if a.parent == account and not a.user]
        return sorted(users, key=lambda a: (a.user, a.partition)) + sorted(
            subs, key=lambda a: a.account
        )

    def lineage(self, assoc: Assoc) -> list[Assoc]:
        """The association and its ancestors up to root (for inherited limits)."""
        out = [assoc]
        name = assoc.account if assoc.user else assoc.parent
        seen = {assoc.account} if not assoc.user else set()
        while name and name not in seen:
            seen.add(name)
            up = self.account_assoc(name)
            if up is None:
                break
            out.append(up)
            name = up.parent
        return out

    def tree_order(self) -> list[Assoc]:
        """Associations in slurmdbd's hierarchical order (root first; under each account
        its user associations, then its sub-accounts, by name). One pass to group, one
        walk: linear in the number of associations."""
        users: dict[str, list[Assoc]] = {}
        subs: dict[str, list[Assoc]] = {}
        root: Assoc | None = None
        for a in self.assocs:
            if a.user:
                users.setdefault(a.account, []).append(a)
            elif a.account == "root":
                root = a
            else:
                subs.setdefault(a.parent, []).append(a)
        if root is None:
            return sorted(self.assocs, key=lambda a: (a.account, a.user))
        out: list[Assoc] = []
        stack = [root]
        seen: set[str] = set()
        while stack:
            a = stack.pop()
            out.append(a)
            if a.user or a.account in seen:
                continue
            seen.add(a.account)
            below = sorted(users.get(a.account, ()), key=lambda x: (x.user, x.partition))
            below += sorted(subs.get(a.account, ()), key=lambda x: x.account)
            stack.extend(reversed(below))
        return out

    def with_assocs(self, assocs: tuple[Assoc, ...]) -> PolicyState:
        """The same state with other associations."""
        return replace(self, assocs=assocs)


def initial_state(cluster: str) -> PolicyState:
    """What `sacctmgr add cluster` leaves: QOS normal, account root with user root."""
    normal = Qos("normal", 1, "Normal QOS default")
    root_acct = Account("root", "default root account", "root")
    return PolicyState(
        cluster=cluster,
        accounts={"root": root_acct},
        users={"root": User("root", "root", "Administrator")},
        qos={"normal": normal},
        assocs=(
            Assoc(1, cluster, "root", qos=("normal",)),
            Assoc(2, cluster, "root", "root"),
        ),
        next_assoc_id=3,
        next_qos_id=2,
    )
