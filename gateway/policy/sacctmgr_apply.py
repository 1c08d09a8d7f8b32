"""sacctmgr's add/modify/delete as pure functions `PolicyState -> Outcome`, with the
messages `src/sacctmgr/{account,user,qos}_functions.c` print (checked against the real
sacctmgr 22.05 of testenv/slurm; see tests/unit/test_policy_sacctmgr.py).

Nothing is half-applied: every value is parsed and every name resolved before the new
state is built; any refusal leaves the state as it was.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from gateway.policy.model import Account, Assoc, PolicyState, User
from gateway.policy.outcome import Outcome
from gateway.policy.sacctmgr_echo import assoc_echo
from gateway.policy.sacctmgr_keys import Change, assoc_changes, unknown_option
from gateway.policy.sacctmgr_parse import Entity, Pair, Request, Verb, keyword
from gateway.policy.sacctmgr_qos import add_qos, delete_qos, modify_qos
from gateway.policy.values import CLEAR, SacctmgrError, merge_tres

__all__ = ["Outcome", "apply_change", "update_assoc"]


_DENIED_ADD = {
    Entity.ACCOUNT: " Problem adding accounts: Access/permission denied\n",
    Entity.USER: " Problem adding users: Access/permission denied\n",
    Entity.QOS: " Problem adding QOS: Access/permission denied\n",
}
_DENIED = (
    "sacctmgr: error: Your user doesn't have privilege to perform this action\n"
    " Error with request: Access/permission denied\n"
)


def apply_change(state: PolicyState, req: Request, operator: bool) -> Outcome:
    """Run one add/modify/delete; a non-operator's change is refused as slurmdbd does."""
    try:
        outcome = _dispatch(state, req)
    except SacctmgrError as exc:
        return Outcome(None, "", exc.message + "\n", 1)
    if outcome.state is not None and not operator:
        if req.verb is Verb.ADD:
            return Outcome(None, outcome.out, _DENIED_ADD[req.entity], 1)
        return Outcome(None, "", _DENIED, 1)
    return outcome


def _dispatch(state: PolicyState, req: Request) -> Outcome:
    table: dict[tuple[Verb, Entity], Any] = {
        (Verb.ADD, Entity.ACCOUNT): _add_account,
        (Verb.ADD, Entity.USER): _add_user,
        (Verb.ADD, Entity.QOS): add_qos,
        (Verb.MODIFY, Entity.ACCOUNT): _modify_account,
        (Verb.MODIFY, Entity.USER): _modify_user,
        (Verb.MODIFY, Entity.QOS): modify_qos,
        (Verb.DELETE, Entity.ACCOUNT): _delete_account,
        (Verb.DELETE, Entity.USER): _delete_user,
        (Verb.DELETE, Entity.QOS): delete_qos,
    }
    result: Outcome = table[(req.verb, req.entity)](state, req)
    return result


def _names(pairs: Sequence[Pair], names: Sequence[str], *keys: tuple[str, int]) -> list[str]:
    """Bare names plus `Names=`-style lists (in order, without repeats)."""
    out = list(names)
    for pair in pairs:
        if any(keyword(pair.key, k, n) for k, n in keys):
            out.extend(v for v in pair.value.split(",") if v)
    return list(dict.fromkeys(out))


def _take(pairs: Sequence[Pair], name: str, min_len: int) -> tuple[str | None, list[Pair]]:
    """The value of one key (the last given) and the other pairs."""
    found, rest = None, []
    for pair in pairs:
        if keyword(pair.key, name, min_len):
            found = pair.value.strip("'\"")
        else:
            rest.append(pair)
    return found, rest


def _check_cluster(state: PolicyState, value: str | None) -> None:
    for name in (value or "").split(","):
        if name and name.lower() != state.cluster.lower():
            raise SacctmgrError(
                f" This cluster '{name}' doesn't exist.\n"
                "        Contact your admin to add it to accounting."
            )


def update_assoc(state: PolicyState, assoc: Assoc, changes: Sequence[Change]) -> Assoc:
    """An association with the changes applied (lists: replace, += or -=)."""
    out = assoc
    for ch in changes:
        current = getattr(out, ch.field)
        value: Any = ch.value
        if isinstance(value, dict):
            value = merge_tres(dict(current), value)
        elif ch.field == "qos":
            base = set(current if current is not None else _effective_qos(state, assoc))
            if ch.op == "+":
                value = tuple(sorted(base | set(value)))
            elif ch.op == "-":
                value = tuple(sorted(base - set(value)))
        elif ch.field == "shares" and value == CLEAR:
            value = 1
        elif value == CLEAR:
            value = None
        out = replace(out, **{ch.field: value})
    return out


def _effective_qos(state: PolicyState, assoc: Assoc) -> tuple[str, ...]:
    for a in state.lineage(assoc):
        if a.qos is not None:
            return a.qos
    return ()


def _assoc_line(a: Assoc, width: int = 20) -> str:
    """How slurmdbd names a modified (account padded to 20) or deleted (to 10)
    association."""
    if a.user:
        line = f"  C = {a.cluster:<10} A = {a.account:<{width}} U = {a.user:<9}"
        return line + (f" P = {a.partition}" if a.partition else "")
    return f"  C = {a.cluster:<10} A = {a.account} of {a.parent}"


# --- accounts -----------------------------------------------------------------------


def _add_account(state: PolicyState, req: Request) -> Outcome:
    names = [n.lower() for n in _names(req.values, req.names, ("Names", 1), ("Accounts", 1))]
    pairs = [p for p in req.values if not keyword(p.key, "Names", 1)]
    pairs = [p for p in pairs if not keyword(p.key, "Accounts", 1)]
    desc, pairs = _take(pairs, "Description", 1)
    org, pairs = _take(pairs, "Organization", 1)
    cluster, pairs = _take(pairs, "Clusters", 1)
    parent, pairs = _take(pairs, "Parent", 1)
    changes = assoc_changes(pairs, state.qos)
    if not names:
        raise SacctmgrError(" Need name of account to add.")
    if any(not n for n in names):
        raise SacctmgrError(" No blank names are allowed when adding.")
    _check_cluster(state, cluster)
    given_parent = parent is not None
    parent = (parent or "root").lower()
    if state.account_assoc(parent) is None:
        raise SacctmgrError(
            f" Parent account '{parent}' doesn't exist on cluster {state.cluster}\n"
            "        Contact your admin to add this account.\n No associations created."
        )
    new_accts = [n for n in names if n not in state.accounts]
    new_assocs = [n for n in names if state.account_assoc(n) is None]
    if not new_accts and not new_assocs:
        return Outcome(None, " Nothing new added.\n", "", 1)
    accounts = dict(state.accounts)
    for n in new_accts:
        organization = org or (parent if parent != "root" else n)
        accounts[n] = Account(n, desc or n, organization)
    assocs = list(state.assocs)
    next_id = state.next_assoc_id
    for n in new_assocs:
        assoc = Assoc(next_id, state.cluster, n, parent=parent, qos=None)
        assocs.append(update_assoc(state, assoc, changes))
        next_id += 1
    out = ""
    if new_accts:
        out += " Adding Account(s)\n" + "".join(f"  {n}\n" for n in new_accts)
        out += " Settings\n"
        out += f"  Description     = {desc or 'Account Name'}\n"
        out += f"  Organization    = {org or 'Parent/Account Name'}\n"
    out += " Associations\n"
    out += "".join(f"  A = {n[:10]:<10} C = {state.cluster[:10]:<10}\n" for n in new_assocs)
    if desc is not None or org is not None or given_parent or changes:  # sacctmgr's limit_set
        out += " Settings\n" + assoc_echo([*changes, Change("parent", parent, "", "Parent")])
    new = replace(state, accounts=accounts, assocs=tuple(assocs), next_assoc_id=next_id)
    return Outcome(new, out)


def _matching_accounts(state: PolicyState, req: Request) -> tuple[list[str], list[Pair]]:
    names = [n.lower() for n in _names(req.where, req.names, ("Names", 1), ("Accounts", 1))]
    rest = [p for p in req.where if not keyword(p.key, "Names", 1)]
    rest = [p for p in rest if not keyword(p.key, "Accounts", 1)]
    cluster, rest = _take(rest, "Clusters", 1)
    parent, rest = _take(rest, "Parent", 1)
    for pair in rest:
        raise SacctmgrError(f" Unknown condition: {pair.raw}\n Use keyword 'set' to modify value")
    found = [n for n in state.accounts if not names or n in names]
    if cluster and cluster.lower() != state.cluster.lower():
        found = []
    if parent:
        found = [n for n in found if (state.account_assoc(n) or Assoc(0, "", "")).parent == parent]
    return found, rest


def _modify_account(state: PolicyState, req: Request) -> Outcome:
    desc, pairs = _take(list(req.values), "Description", 1)
    org, pairs = _take(pairs, "Organization", 1)
    changes = assoc_changes(pairs, state.qos, modify=True)
    if desc is None and org is None and not changes:
        raise SacctmgrError(" You didn't give me anything to set")
    found, _ = _matching_accounts(state, req)
    if not found:
        return Outcome(None, " Nothing modified\n", "", 1)
    out = ""
    accounts = dict(state.accounts)
    if desc is not None or org is not None:
        for n in found:
            a = accounts[n]
            accounts[n] = replace(
                a, description=desc or a.description, organization=org or a.organization
            )
        out += " Modified accounts...\n" + "".join(f"  {n}\n" for n in found)
    assocs = list(state.assocs)
    if changes:
        parent = next((c.value for c in changes if c.field == "parent"), None)
        if parent is not None:
            parent = str(parent).lower()
            if state.account_assoc(parent) is None:
                raise SacctmgrError(f" Parent Account {parent} doesn't exist.")
            for n in found:
                if parent == n or n in _ancestors(state, parent):
                    raise SacctmgrError(
                        f" Error with request: Can't set parent of {n} to {parent}: "
                        "it is below it in the tree"
                    )
            changes = [replace(c, value=parent) if c.field == "parent" else c for c in changes]
        # the accounts' own associations change; below them the inherited Max* limits and
        # QOS follow by inheritance (slurmdbd lists those associations as modified too)
        own = {a.id for a in assocs if a.account in found and not a.user}
        assocs = [update_assoc(state, a, changes) if a.id in own else a for a in assocs]
        touched = _touched(state, found, changes)
        out += " Modified account associations...\n"
        out += "".join(_assoc_line(a) + "\n" for a in state.tree_order() if a.id in touched)
    return Outcome(replace(state, accounts=accounts, assocs=tuple(assocs)), out)


def _ancestors(state: PolicyState, account: str) -> set[str]:
    a = state.account_assoc(account)
    return {x.account for x in state.lineage(a)} if a else set()


_INHERITED = {"max_jobs", "max_submit", "max_wall", "max_tres_pj", "qos", "default_qos"}


def _touched(state: PolicyState, accounts: Sequence[str], changes: Sequence[Change]) -> set[int]:
    """The associations a change to these accounts modifies: their own, and below them
    every association that inherits a changed Max* limit or QOS (slurmdbd writes it into
    those that had not set it themselves)."""
    out = {a.id for a in state.assocs if a.account in accounts and not a.user}
    inherited = [c.field for c in changes if c.field in _INHERITED]
    if not inherited:
        return out
    for account in accounts:
        stack = list(state.children(account))
        while stack:
            a = stack.pop()
            own = [f for f in inherited if getattr(a, f) not in (None, {}, ())]
            if len(own) < len(inherited):
                out.add(a.id)
            if not a.user:
                stack.extend(state.children(a.account))
    return out


def _delete_account(state: PolicyState, req: Request) -> Outcome:
    if req.values:
        raise unknown_option(req.values[0])
    found, _ = _matching_accounts(state, req)
    if not req.names and not req.where:
        raise SacctmgrError(" No conditions given to remove, not executing.")
    if "root" in found:
        raise SacctmgrError(" You are not allowed to remove the root account.")
    if not found:
        return Outcome(None, " Nothing deleted\n", "", 1)
    gone = set(found)
    for n in found:
        a = state.account_assoc(n)
        if a is not None:
            gone |= {x.account for x in _subtree(state, a) if not x.user}
    assocs = tuple(a for a in state.assocs if a.account not in gone)
    accounts = {k: v for k, v in state.accounts.items() if k not in gone}
    users = {
        k: (replace(u, default_account="") if u.default_account in gone else u)
        for k, u in state.users.items()
    }
    out = " Deleting accounts...\n" + "".join(f"  {n}\n" for n in found)
    return Outcome(replace(state, accounts=accounts, users=users, assocs=assocs), out)


def _subtree(state: PolicyState, top: Assoc) -> list[Assoc]:
    out, stack = [], [top]
    while stack:
        a = stack.pop()
        out.append(a)
        if not a.user:
            stack.extend(state.children(a.account))
    return out


# --- users --------------------------------------------------------------------------

_CONTACT = "        Contact your admin to add this account.\n"
_ADMIN_LEVELS = {"none": "None", "operator": "Operator", "administrator": "Administrator"}


def _admin(value: str | None) -> str | None:
    if value is None:
        return None
    level = next((v for k, v in _ADMIN_LEVELS.items() if keyword(value, k, 1)), None)
    if level is None:
        raise SacctmgrError(f" Bad AdminLevel given: {value}")
    return level


def _add_user(state: PolicyState, req: Request) -> Outcome:
    names = _names(req.values, req.names, ("Names", 1), ("Users", 1))
    pairs = [p for p in req.values if not keyword(p.key, "Names", 1)]
    pairs = [p for p in pairs if not keyword(p.key, "Users", 1)]
    accounts_s, pairs = _take(pairs, "Accounts", 2)
    default, pairs = _take(pairs, "DefaultAccount", 8)
    admin, pairs = _take(pairs, "AdminLevel", 2)
    cluster, pairs = _take(pairs, "Clusters", 1)
    partition, pairs = _take(pairs, "Partitions", 4)
    level = _admin(admin)
    changes = assoc_changes(pairs, state.qos)
    if not names:
        raise SacctmgrError(" Need name of user to add.")
    _check_cluster(state, cluster)
    accts = [a.lower() for a in (accounts_s or default or "").split(",") if a]
    if not accts:
        raise SacctmgrError(" Need name of account to add user to.")
    default = default.lower() if default else None
    err = ""
    users = dict(state.users)
    new_users: list[str] = []
    for name in names:
        if name in users:
            continue
        if default is not None and default not in state.accounts:
            err += f" This account '{default}' doesn't exist.\n" + _CONTACT
            continue
        users[name] = User(name, default or accts[0], level or "None")
        new_users.append(name)
    assocs = list(state.assocs)
    next_id = state.next_assoc_id
    lines = ""
    missing = [a for a in accts if state.account_assoc(a) is None]
    for a in missing:
        err += (
            f" This account '{a}' doesn't exist.\n        Contact your admin to add this account.\n"
        )
    for name in names:
        if name not in users:
            continue
        for acct in (a for a in accts if a not in missing):
            part = (partition or "").lower()
            if any(x.user == name and x.account == acct and x.partition == part for x in assocs):
                continue
            assoc = Assoc(next_id, state.cluster, acct, name, part, qos=None)
            assocs.append(update_assoc(state, assoc, changes))
            next_id += 1
            lines += f"  U = {name[:9]:<9} A = {acct[:10]:<10} C = {state.cluster[:10]:<10}"
            lines += (f" P = {part[:10]:<10}" if part else "") + "\n"
    if not new_users and not lines:
        if missing and names and all(n in state.users for n in names):
            return Outcome(None, "", err + " No associations or wckeys created.\n", 1)
        return Outcome(None, " Nothing new added.\n", err, 1)
    if not lines:
        return Outcome(None, "", err + " No associations or wckeys created.\n", 1)
    out = ""
    if new_users:
        out += " Adding User(s)\n" + "".join(f"  {n}\n" for n in new_users)
        if default or level:
            out += " Settings =\n"
        if default:
            out += f"  Default Account = {default}\n"
        if level:
            out += f"  Admin Level     = {level}\n"
    out += " Associations =\n" + lines
    if req.values:
        out += " Non Default Settings\n" + assoc_echo(changes)
    new = replace(state, users=users, assocs=tuple(assocs), next_assoc_id=next_id)
    return Outcome(new, out, err)


def _matching_user_assocs(state: PolicyState, req: Request) -> tuple[list[str], list[Assoc]]:
    names = _names(req.where, req.names, ("Names", 1), ("Users", 1))
    rest = [p for p in req.where if not keyword(p.key, "Names", 1)]
    rest = [p for p in rest if not keyword(p.key, "Users", 1)]
    accts, rest = _take(rest, "Accounts", 2)
    cluster, rest = _take(rest, "Clusters", 1)
    part, rest = _take(rest, "Partitions", 4)
    for pair in rest:
        raise SacctmgrError(f" Unknown condition: {pair.raw}\n Use keyword 'set' to modify value")
    users = [u for u in state.users if not names or u in names]
    if cluster and cluster.lower() != state.cluster.lower():
        users = []
    acct_list = [a.lower() for a in (accts or "").split(",") if a]
    found = [
        a
        for a in state.tree_order()
        if a.user in users
        and (not acct_list or a.account in acct_list)
        and (part is None or a.partition == part.lower())
    ]
    return (users if not acct_list else []), found


def _modify_user(state: PolicyState, req: Request) -> Outcome:
    default, pairs = _take(list(req.values), "DefaultAccount", 8)
    admin, pairs = _take(pairs, "AdminLevel", 2)
    level = _admin(admin)
    changes = assoc_changes(pairs, state.qos, modify=True)
    if default is None and level is None and not changes:
        raise SacctmgrError(" You didn't give me anything to set")
    users_found, assocs_found = _matching_user_assocs(state, req)
    names = users_found or sorted({a.user for a in assocs_found})
    if not names:
        return Outcome(None, " Nothing modified\n", "", 1)
    out = ""
    users = dict(state.users)
    if default is not None or level is not None:
        default = default.lower() if default else None
        for n in names:
            if default and not any(a.user == n and a.account == default for a in state.assocs):
                raise SacctmgrError(
                    f" Error with request: User {n} has no association with account {default}"
                )
            u = users[n]
            users[n] = replace(
                u, default_account=default or u.default_account, admin_level=level or u.admin_level
            )
        out += " Modified users...\n" + "".join(f"  {n}\n" for n in names)
    assocs = state.assocs
    if changes:
        if not assocs_found:
            return Outcome(None, " Nothing modified\n", "", 1)
        ids = {a.id for a in assocs_found}
        assocs = tuple(update_assoc(state, a, changes) if a.id in ids else a for a in assocs)
        out += " Modified user associations...\n"
        out += "".join(_assoc_line(a) + "\n" for a in assocs_found)
    return Outcome(replace(state, users=users, assocs=assocs), out)


def _delete_user(state: PolicyState, req: Request) -> Outcome:
    if req.values:
        raise unknown_option(req.values[0])
    if not req.names and not req.where:
        raise SacctmgrError(" No conditions given to remove, not executing.")
    users_found, assocs_found = _matching_user_assocs(state, req)
    if users_found:
        names = set(users_found)
        assocs = tuple(a for a in state.assocs if a.user not in names)
        users = {k: v for k, v in state.users.items() if k not in names}
        out = " Deleting users...\n" + "".join(f"  {n}\n" for n in users_found)
        return Outcome(replace(state, users=users, assocs=assocs), out)
    if not assocs_found:
        return Outcome(None, " Nothing deleted\n", "", 1)
    ids = {a.id for a in assocs_found}
    assocs = tuple(a for a in state.assocs if a.id not in ids)
    out = " Deleting user associations...\n"
    out += "".join(_assoc_line(a, 10) + "\n" for a in assocs_found)
    return Outcome(replace(state, assocs=assocs), out)
