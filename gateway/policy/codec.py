"""PolicyState <-> JSON-able dict (the store keeps one document per cluster), versioned."""

from __future__ import annotations

from typing import Any

from gateway.policy.model import Account, Assoc, PolicyState, Qos, User

__all__ = ["POLICY_DOC_VERSION", "policy_from_dict", "policy_to_dict"]

POLICY_DOC_VERSION = 1


def _qos_to(q: Qos) -> dict[str, Any]:
    return {
        "name": q.name,
        "id": q.id,
        "description": q.description,
        "priority": q.priority,
        "preempt": list(q.preempt),
        "preempt_mode": q.preempt_mode,
        "preempt_exempt_s": q.preempt_exempt_s,
        "grace_time_s": q.grace_time_s,
        "usage_factor": q.usage_factor,
        "flags": list(q.flags),
        "grp_tres": dict(q.grp_tres),
        "grp_jobs": q.grp_jobs,
        "grp_submit": q.grp_submit,
        "grp_wall": q.grp_wall,
        "max_tres_pj": dict(q.max_tres_pj),
        "max_tres_pu": dict(q.max_tres_pu),
        "max_jobs_pu": q.max_jobs_pu,
        "max_submit_pu": q.max_submit_pu,
        "max_wall": q.max_wall,
    }


def _qos_from(d: dict[str, Any]) -> Qos:
    return Qos(
        **{
            **d,
            "preempt": tuple(d["preempt"]),
            "flags": tuple(d["flags"]),
            "usage_factor": float(d["usage_factor"]),
        }
    )


def _assoc_to(a: Assoc) -> dict[str, Any]:
    return {
        "id": a.id,
        "cluster": a.cluster,
        "account": a.account,
        "user": a.user,
        "partition": a.partition,
        "parent": a.parent,
        "shares": a.shares,
        "priority": a.priority,
        "grp_jobs": a.grp_jobs,
        "grp_submit": a.grp_submit,
        "grp_wall": a.grp_wall,
        "grp_tres": dict(a.grp_tres),
        "max_jobs": a.max_jobs,
        "max_submit": a.max_submit,
        "max_wall": a.max_wall,
        "max_tres_pj": dict(a.max_tres_pj),
        "qos": None if a.qos is None else list(a.qos),
        "default_qos": a.default_qos,
    }


def _assoc_from(d: dict[str, Any]) -> Assoc:
    return Assoc(**{**d, "qos": None if d["qos"] is None else tuple(d["qos"])})


def policy_to_dict(state: PolicyState) -> dict[str, Any]:
    """The stored document."""
    return {
        "version": POLICY_DOC_VERSION,
        "cluster": state.cluster,
        "accounts": [[a.name, a.description, a.organization] for a in state.accounts.values()],
        "users": [[u.name, u.default_account, u.admin_level] for u in state.users.values()],
        "qos": [_qos_to(q) for q in state.qos.values()],
        "assocs": [_assoc_to(a) for a in state.assocs],
        "next_assoc_id": state.next_assoc_id,
        "next_qos_id": state.next_qos_id,
    }


def policy_from_dict(d: dict[str, Any]) -> PolicyState:
    """The state of a stored document; ValueError for a version this code does not know."""
    if d.get("version") != POLICY_DOC_VERSION:
        raise ValueError(f"policy document version {d.get('version')!r} is not supported")
    return PolicyState(
        cluster=d["cluster"],
        accounts={a[0]: Account(a[0], a[1], a[2]) for a in d["accounts"]},
        users={u[0]: User(u[0], u[1], u[2]) for u in d["users"]},
        qos={q["name"]: _qos_from(q) for q in d["qos"]},
        assocs=tuple(_assoc_from(a) for a in d["assocs"]),
        next_assoc_id=int(d["next_assoc_id"]),
        next_qos_id=int(d["next_qos_id"]),
    )
