"""`sacctmgr show account|user|qos|association|cluster` with Slurm's default formats,
`format=` fields (matched as `_get_print_field` in src/sacctmgr/common.c matches them,
`%N` widths included), `-n`, `-p`, `-P`, and the `where` conditions that matter.

Max* limits, QOS and DefaultQOS are shown as slurmdbd stores them: inherited from the
nearest ancestor that sets them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from gateway.compat.duration import secs_to_str
from gateway.policy.model import Assoc, PolicyState, Qos
from gateway.policy.printfields import Column, render_table
from gateway.policy.sacctmgr_parse import Entity, Pair, Request, keyword
from gateway.policy.values import SacctmgrError, format_tres, wall_str

__all__ = ["FIELDS", "show"]

Cell = str | int | float | None

# (keyword, min length, header, width) in _get_print_field's order
FIELDS: tuple[tuple[str, int, str, int], ...] = (
    ("Account", 3, "Account", 10),
    ("Acct", 4, "Account", 10),
    ("AdminLevel", 2, "Admin", 9),
    ("Clusters", 2, "Cluster", 10),
    ("ControlHost", 8, "ControlHost", 15),
    ("ControlPort", 8, "ControlPort", 12),
    ("DefaultAccount", 8, "Def Acct", 10),
    ("DefaultQOS", 8, "Def QOS", 9),
    ("Description", 3, "Descr", 20),
    ("Flags", 2, "Flags", 20),
    ("GraceTime", 3, "GraceTime", 10),
    ("GrpCPUs", 6, "GrpCPUs", 8),
    ("GrpCPUMins", 7, "GrpCPUMins", 11),
    ("GrpTRES", 7, "GrpTRES", 13),
    ("GrpTRESMins", 7, "GrpTRESMins", 13),
    ("GrpTRESRunMins", 7, "GrpTRESRunMins", 13),
    ("GrpJobs", 4, "GrpJobs", 7),
    ("GrpMemory", 4, "GrpMem", 7),
    ("GrpNodes", 4, "GrpNodes", 8),
    ("GrpSubmitJobs", 4, "GrpSubmit", 9),
    ("GrpWall", 4, "GrpWall", 11),
    ("ID", 2, "ID", 6),
    ("LFT", 1, "LFT", 6),
    ("MaxCPUMinsPerJob", 7, "MaxCPUMins", 11),
    ("MaxCPUsPerJob", 7, "MaxCPUs", 8),
    ("MaxTRES", 7, "MaxTRES", 13),
    ("MaxTRESPerJob", 11, "MaxTRES", 13),
    ("MaxTRESPerNode", 11, "MaxTRESPerNode", 14),
    ("MaxTRESMinsPerJob", 8, "MaxTRESMins", 13),
    ("MaxTRESPerAccount", 11, "MaxTRESPA", 13),
    ("MaxTRESPerAcct", 11, "MaxTRESPA", 13),
    ("MaxTRESPA", 9, "MaxTRESPA", 13),
    ("MaxTRESPerUser", 11, "MaxTRESPU", 13),
    ("MaxTRESPU", 9, "MaxTRESPU", 13),
    ("MaxJobs", 4, "MaxJobs", 7),
    ("MaxJobsPerAccount", 11, "MaxJobsPA", 9),
    ("MaxJobsPerAcct", 11, "MaxJobsPA", 9),
    ("MaxJobsPA", 9, "MaxJobsPA", 9),
    ("MaxJobsPerUser", 11, "MaxJobsPU", 9),
    ("MaxJobsPU", 9, "MaxJobsPU", 9),
    ("MaxNodesPerJob", 4, "MaxNodes", 8),
    ("MaxSubmitJobs", 4, "MaxSubmit", 9),
    ("MaxSubmitJobsPerAccount", 17, "MaxSubmitPA", 11),
    ("MaxSubmitJobsPerAcct", 17, "MaxSubmitPA", 11),
    ("MaxSubmitJobsPA", 15, "MaxSubmitPA", 11),
    ("MaxSubmitPA", 11, "MaxSubmitPA", 11),
    ("MaxSubmitJobsPerUser", 10, "MaxSubmitPU", 11),
    ("MaxSubmitJobsPU", 10, "MaxSubmitPU", 11),
    ("MaxSubmitPU", 6, "MaxSubmitPU", 11),
    ("MaxWallDurationPerJob", 4, "MaxWall", 11),
    ("MinTRESPerJob", 7, "MinTRES", 13),
    ("Name", 2, "Name", 10),
    ("Organization", 1, "Org", 20),
    ("ParentID", 7, "ParentID", 8),
    ("ParentName", 7, "ParentName", 10),
    ("Partition", 4, "Partition", 10),
    ("PreemptMode", 8, "PreemptMode", 11),
    ("Preempt", 7, "Preempt", 10),
    ("PreemptExemptTime", 8, "PreemptExemptTime", 19),
    ("Priority", 3, "Priority", 10),
    ("QOSLevel", 3, "QOS", 20),
    ("RGT", 1, "RGT", 6),
    ("RPC", 1, "RPC", 5),
    ("Share", 1, "Share", 9),
    ("FairShare", 2, "Share", 9),
    ("UsageFactor", 6, "UsageFactor", 11),
    ("UsageThreshold", 6, "UsageThres", 10),
    ("User", 1, "User", 10),
)

_DEFAULT = {
    Entity.ACCOUNT: "Acc,Des,O",
    Entity.USER: "U,DefaultA,Ad",
    Entity.QOS: "Name,Prio,GraceT,Preempt,PreemptE,PreemptM,Flags%40,UsageThres,UsageFactor,"
    "GrpTRES,GrpTRESMins,GrpTRESRunMins,GrpJ,GrpS,GrpW,MaxTRES,MaxTRESPerN,MaxTRESMins,MaxW,"
    "MaxTRESPerUser,MaxJobsPerUser,MaxSubmitJobsPerUser,MaxTRESPerAcct,MaxJobsPerAcct,"
    "MaxSubmitJobsPerAcct,MinTRES",
    Entity.ASSOC: "Cluster,Account,User,Part,Share,Priority,GrpJ,GrpTRES,GrpS,GrpWall,"
    "GrpTRESMins,MaxJ,MaxTRES,MaxTRESPerN,MaxS,MaxW,MaxTRESMins,QOS,DefaultQOS,GrpTRESRunMins",
    Entity.CLUSTER: "Cl,ControlH,ControlP,RPC,Share,GrpJ,GrpTRES,GrpS,MaxJ,MaxTRES,MaxS,MaxW,"
    "QOS,DefaultQOS",
}
_WITHASSOC = {
    Entity.ACCOUNT: ",Cl,ParentN,U,Share,Priority,GrpJ,GrpN,GrpCPUs,GrpMEM,GrpS,GrpWall,"
    "GrpCPUMins,MaxJ,MaxN,MaxCPUs,MaxS,MaxW,MaxCPUMins,QOS,DefaultQOS",
    Entity.USER: ",Cl,Acc,Part,Share,Priority,MaxJ,MaxN,MaxCPUs,MaxS,MaxW,MaxCPUMins,QOS,"
    "DefaultQOS",
}


def _columns(spec: Sequence[str], tree: bool) -> list[tuple[Column, str]]:
    out: list[tuple[Column, str]] = []
    for item in spec:
        word, _, width_s = item.partition("%")
        row = next((f for f in FIELDS if keyword(word, f[0], f[1])), None)
        if row is None:
            raise SacctmgrError(f"Unknown field '{word}'")
        width = row[3]
        if row[2] == "Account" and tree:
            width = -20
        if width_s:
            width = int(width_s) if width_s.lstrip("-").isdigit() else width
        out.append((Column(row[2], width), row[0]))
    return out


def _qos_cells(q: Qos) -> dict[str, Cell]:
    return {
        "Name": q.name,
        "ID": q.id,
        "Description": q.description,
        "Priority": q.priority,
        "GraceTime": secs_to_str(q.grace_time_s),
        "Preempt": ",".join(sorted(q.preempt)) or None,
        "PreemptExemptTime": None
        if q.preempt_exempt_s is None
        else secs_to_str(q.preempt_exempt_s),
        "PreemptMode": q.preempt_mode,
        "Flags": ",".join(q.flags) or None,
        "UsageFactor": q.usage_factor,
        "GrpTRES": format_tres(dict(q.grp_tres)),
        "GrpJobs": q.grp_jobs,
        "GrpSubmitJobs": q.grp_submit,
        "GrpWall": wall_str(q.grp_wall),
        "MaxTRES": format_tres(dict(q.max_tres_pj)),
        "MaxTRESPerJob": format_tres(dict(q.max_tres_pj)),
        "MaxWallDurationPerJob": wall_str(q.max_wall),
        "MaxTRESPerUser": format_tres(dict(q.max_tres_pu)),
        "MaxTRESPU": format_tres(dict(q.max_tres_pu)),
        "MaxJobsPerUser": q.max_jobs_pu,
        "MaxJobsPU": q.max_jobs_pu,
        "MaxSubmitJobsPerUser": q.max_submit_pu,
        "MaxSubmitJobsPU": q.max_submit_pu,
        "MaxSubmitPU": q.max_submit_pu,
    }


def _inherited(state: PolicyState, a: Assoc, attr: str) -> object:
    for up in state.lineage(a):
        value = getattr(up, attr)
        if value not in (None, {}):
            return value
    return None


def assoc_cells(state: PolicyState, a: Assoc, lft: int = 0) -> dict[str, Cell]:
    """Every field of one association row (Max* limits and QOS inherited)."""
    max_tres = _inherited(state, a, "max_tres_pj")
    qos = _inherited(state, a, "qos")
    grp = dict(a.grp_tres)
    mt = dict(max_tres) if isinstance(max_tres, Mapping) else {}
    max_wall = _inherited(state, a, "max_wall")
    return {
        "Clusters": a.cluster,
        "Account": a.account,
        "Acct": a.account,
        "User": a.user or None,
        "Partition": a.partition or None,
        "Share": "parent" if a.shares is None else a.shares,
        "FairShare": "parent" if a.shares is None else a.shares,
        "Priority": a.priority,
        "GrpJobs": a.grp_jobs,
        "GrpTRES": format_tres(grp),
        "GrpSubmitJobs": a.grp_submit,
        "GrpWall": wall_str(a.grp_wall),
        "GrpCPUs": grp.get("cpu"),
        "GrpMemory": grp.get("mem"),
        "GrpNodes": grp.get("node"),
        "MaxJobs": _num(_inherited(state, a, "max_jobs")),
        "MaxSubmitJobs": _num(_inherited(state, a, "max_submit")),
        "MaxTRES": format_tres(mt),
        "MaxTRESPerJob": format_tres(mt),
        "MaxCPUsPerJob": mt.get("cpu"),
        "MaxNodesPerJob": mt.get("node"),
        "MaxWallDurationPerJob": wall_str(max_wall if isinstance(max_wall, int) else None),
        "QOSLevel": ",".join(sorted(qos)) if isinstance(qos, tuple) and qos else None,
        "DefaultQOS": _str(_inherited(state, a, "default_qos")),
        "ParentName": a.parent or None,
        "ID": a.id,
        "LFT": lft or None,
    }


def _num(value: object) -> int | None:
    return value if isinstance(value, int) else None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _where(req: Request) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    keys = (
        ("Names", 1, "names"),
        ("Accounts", 2, "accounts"),
        ("Users", 1, "users"),
        ("Clusters", 1, "clusters"),
        ("Partitions", 4, "partitions"),
        ("Parent", 6, "parents"),
        ("ID", 2, "ids"),
        ("DefaultAccount", 8, "defaccts"),
        ("QOSLevel", 1, "qos"),
    )
    for pair in req.where:
        key = next((k for name, n, k in keys if keyword(pair.key, name, n)), None)
        if key is None:
            raise _unknown(pair)
        out.setdefault(key, []).extend(v.lower() for v in pair.value.split(",") if v)
    return out


def _unknown(pair: Pair) -> SacctmgrError:
    return SacctmgrError(f" Unknown condition: {pair.raw}\n Use keyword 'set' to modify value")


def _ok(values: list[str] | None, value: str) -> bool:
    return values is None or value.lower() in values


def show(state: PolicyState, req: Request) -> str:
    """The listing, or SacctmgrError (unknown field, unknown condition)."""
    tree = any(f.startswith("tree") for f in req.flags)
    withassoc = any(f.startswith("witha") for f in req.flags)
    spec = list(req.format) or (
        _DEFAULT[req.entity] + (_WITHASSOC.get(req.entity, "") if withassoc else "")
    ).split(",")
    cols = _columns(spec, tree)
    where = _where(req)
    names = [n.lower() for n in req.names] or None
    rows = _ROWS[req.entity](state, where, names, withassoc, tree)
    data = [[r.get(key) for _, key in cols] for r in rows]
    return render_table([c for c, _ in cols], data, req.mode, req.header)


def _qos_rows(
    state: PolicyState, w: dict[str, list[str]], names: list[str] | None, wa: bool, tree: bool
) -> list[dict[str, Cell]]:
    sel = names or w.get("names")
    return [
        _qos_cells(q)
        for q in sorted(state.qos.values(), key=lambda q: q.id)
        if _ok(sel, q.name) and _ok(w.get("ids"), str(q.id))
    ]


def _assoc_rows(
    state: PolicyState, w: dict[str, list[str]], names: list[str] | None, wa: bool, tree: bool
) -> list[dict[str, Cell]]:
    out: list[dict[str, Cell]] = []
    depth: dict[str, int] = {}
    for lft, a in enumerate(state.tree_order(), start=1):
        level = 0 if a.account == "root" and not a.user else depth.get(a.parent, 0) + 1
        if not a.user:
            depth[a.account] = level
        if not (
            _ok(w.get("accounts") or names, a.account)
            and _ok(w.get("users"), a.user)
            and _ok(w.get("clusters"), a.cluster)
            and _ok(w.get("partitions"), a.partition)
            and _ok(w.get("parents"), a.parent)
            and _ok(w.get("ids"), str(a.id))
        ):
            continue
        cells = assoc_cells(state, a, lft)
        if tree:
            indent = depth.get(a.account, 0) + (1 if a.user else 0)
            cells["Account"] = " " * indent + a.account
        out.append(cells)
    return out


def _account_rows(
    state: PolicyState, w: dict[str, list[str]], names: list[str] | None, wa: bool, tree: bool
) -> list[dict[str, Cell]]:
    sel = names or w.get("names") or w.get("accounts")
    out: list[dict[str, Cell]] = []
    for acct in sorted(state.accounts.values(), key=lambda a: a.name):
        if not _ok(sel, acct.name):
            continue
        base: dict[str, Cell] = {
            "Account": acct.name,
            "Acct": acct.name,
            "Description": acct.description,
            "Organization": acct.organization,
        }
        if not wa:
            out.append(base)
            continue
        for a in state.tree_order():
            if a.account == acct.name:
                out.append({**assoc_cells(state, a), **base})
    return out


def _user_rows(
    state: PolicyState, w: dict[str, list[str]], names: list[str] | None, wa: bool, tree: bool
) -> list[dict[str, Cell]]:
    sel = names or w.get("names") or w.get("users")
    out: list[dict[str, Cell]] = []
    for user in sorted(state.users.values(), key=lambda u: u.name):
        if not _ok(sel, user.name) or not _ok(w.get("defaccts"), user.default_account):
            continue
        base: dict[str, Cell] = {
            "User": user.name,
            "DefaultAccount": user.default_account or None,
            "AdminLevel": user.admin_level,
        }
        if not wa:
            out.append(base)
            continue
        for a in state.tree_order():
            if a.user == user.name and _ok(w.get("accounts"), a.account):
                out.append({**assoc_cells(state, a), **base})
    return out


def _cluster_rows(
    state: PolicyState, w: dict[str, list[str]], names: list[str] | None, wa: bool, tree: bool
) -> list[dict[str, Cell]]:
    root = state.account_assoc("root")
    cells: dict[str, Cell] = assoc_cells(state, root) if root else {}
    cells["Clusters"] = state.cluster
    return [cells] if _ok(names, state.cluster) else []


_ROWS: dict[
    Entity,
    Callable[
        [PolicyState, dict[str, list[str]], list[str] | None, bool, bool], list[dict[str, Cell]]
    ],
] = {
    Entity.QOS: _qos_rows,
    Entity.ASSOC: _assoc_rows,
    Entity.ACCOUNT: _account_rows,
    Entity.USER: _user_rows,
    Entity.CLUSTER: _cluster_rows,
}
