"""`sacctmgr add|modify|delete qos` (src/sacctmgr/qos_functions.c) as pure functions.

A QOS named in another QOS's Preempt list, or in an association's QOS list, is taken out
of those lists when it is deleted (slurmdbd does the same); a QOS may not preempt itself.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gateway.policy.model import PolicyState, Qos
from gateway.policy.outcome import Outcome
from gateway.policy.sacctmgr_echo import qos_echo
from gateway.policy.sacctmgr_keys import Change, qos_changes, unknown_option
from gateway.policy.sacctmgr_parse import Pair, Request, keyword
from gateway.policy.values import CLEAR, SacctmgrError, merge_tres

__all__ = ["add_qos", "delete_qos", "modify_qos", "update_qos"]

_DEFAULTS: dict[str, Any] = {
    "priority": 0,
    "grace_time_s": 0,
    "usage_factor": 1.0,
    "preempt_mode": "cluster",
    "preempt": (),
    "flags": (),
}


def update_qos(qos: Qos, changes: list[Change]) -> Qos:
    """A QOS with the changes applied (Preempt: replace, += or -=)."""
    out = qos
    for ch in changes:
        value: Any = ch.value
        current = getattr(out, ch.field)
        if isinstance(value, dict):
            value = merge_tres(dict(current), value)
        elif ch.field == "preempt" and ch.op:
            value = tuple(
                sorted(set(current) | set(value) if ch.op == "+" else set(current) - set(value))
            )
        elif value == CLEAR:
            value = _DEFAULTS.get(ch.field)
        out = replace(out, **{ch.field: value})
    if out.name in out.preempt:
        raise SacctmgrError(f" Error with request: QOS {out.name} can not preempt itself")
    return out


def _names(req: Request, pairs: tuple[Pair, ...]) -> list[str]:
    out = [n.lower() for n in req.names]
    for pair in pairs:
        if keyword(pair.key, "Names", 1):
            out.extend(v.lower() for v in pair.value.split(",") if v)
    return list(dict.fromkeys(out))


def add_qos(state: PolicyState, req: Request) -> Outcome:
    """`sacctmgr add qos NAME [Key=value...]`."""
    names = _names(req, req.values)
    pairs = [p for p in req.values if not keyword(p.key, "Names", 1)]
    changes = qos_changes(pairs, state.qos)
    if not names:
        raise SacctmgrError(" Need name of qos to add.")
    new = [n for n in names if n not in state.qos]
    if not new:
        return Outcome(None, " Nothing new added.\n", "", 1)
    qos = dict(state.qos)
    next_id = state.next_qos_id
    desc = next((c.value for c in changes if c.field == "description"), None)
    for n in new:
        qos[n] = update_qos(Qos(n, next_id, n), changes)
        next_id += 1
    out = " Adding QOS(s)\n" + "".join(f"  {n}\n" for n in new) + " Settings\n"
    out += f"  Description    = {desc if desc is not None else new[0]}\n"
    out += qos_echo([c for c in changes if c.field != "description"])
    return Outcome(replace(state, qos=qos, next_qos_id=next_id), out)


def _matching(state: PolicyState, req: Request) -> list[str]:
    names = _names(req, req.where)
    for pair in req.where:
        if not keyword(pair.key, "Names", 1) and not keyword(pair.key, "ID", 2):
            raise SacctmgrError(
                f" Unknown condition: {pair.raw}\n Use keyword 'set' to modify value"
            )
    ids = {
        v.strip()
        for p in req.where
        if keyword(p.key, "ID", 2)
        for v in p.value.split(",")
        if v.strip()
    }
    return [
        q.name
        for q in state.qos.values()
        if (not names or q.name in names) and (not ids or str(q.id) in ids)
    ]


def modify_qos(state: PolicyState, req: Request) -> Outcome:
    """`sacctmgr modify qos NAME|where ... set Key=value...`."""
    if not req.values:
        raise SacctmgrError(" You didn't give me anything to set")
    changes = qos_changes(req.values, state.qos, modify=True)
    found = _matching(state, req)
    if not found:
        return Outcome(None, " Nothing modified\n", "", 1)
    qos = dict(state.qos)
    for n in found:
        qos[n] = update_qos(qos[n], changes)
    out = " Modified qos...\n" + "".join(f"  {n}\n" for n in found)
    return Outcome(replace(state, qos=qos), out)


def delete_qos(state: PolicyState, req: Request) -> Outcome:
    """`sacctmgr delete qos NAME|where name=...`."""
    if req.values:
        raise unknown_option(req.values[0])
    if not req.names and not req.where:
        raise SacctmgrError(" No conditions given to remove, not executing.")
    found = _matching(state, req)
    if not found:
        return Outcome(None, " Nothing deleted\n", "", 1)
    gone = set(found)
    qos = {
        k: replace(v, preempt=tuple(p for p in v.preempt if p not in gone))
        for k, v in state.qos.items()
        if k not in gone
    }
    assocs = tuple(
        replace(
            a,
            qos=None if a.qos is None else tuple(q for q in a.qos if q not in gone),
            default_qos=None if a.default_qos in gone else a.default_qos,
        )
        for a in state.assocs
    )
    out = " Deleting QOS(s)...\n" + "".join(f"  {n}\n" for n in found)
    return Outcome(replace(state, qos=qos, assocs=assocs), out)
