"""Volcano's queue semantics on Slurm's nouns (docs/policy.md, "Volcano's queues").

A Volcano queue is a Slurm account directly under root: its `weight` is the account's
Fairshare shares, its `capability` the association's GrpTRES (enforced live by the
limits gate: AssocGrpCpuLimit and friends). `deserved` and `guarantee` have no Slurm
column; they are given here explicitly (capacity plugin) or derived from the weights
(proportion plugin). What is computed here is pure and follows Volcano's documented
behaviour:

- `proportion`: each queue's deserved share, weight-proportional and capped at what the
  queue asks for and at its capability, the rest handed out again until nothing is left
  (the proportion plugin's water-filling); never below the queue's guarantee.
- `reclaim`: the whole jobs a pending job of one queue takes back from queues using more
  than they deserve (the reclaim action with the capacity plugin's rules: the preemptor's
  queue must stay within its deserved share; a victim's queue must be above its own).
- `drf_fill`: Dominant Resource Fairness among the jobs of one queue (the drf plugin's
  job order): the next task goes to the job with the lowest dominant share.

The live scheduler does not call `reclaim` or `drf_fill`: Slurm's nouns for them are
preemption by QOS and TRES billing with PriorityFlags=MAX_TRES (see docs/policy.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gateway.policy.model import PolicyState

__all__ = [
    "Queue",
    "Running",
    "dominant_share",
    "drf_fill",
    "proportion",
    "queues_from_accounts",
    "reclaim",
]

Res = Mapping[str, float]  # "cpu" -> 4, "mem" -> 16384 (MiB)


@dataclass(frozen=True, slots=True)
class Queue:
    """A Volcano queue as a Slurm account: weight = shares, capability = GrpTRES."""

    name: str
    weight: int = 1
    capability: Res = field(default_factory=dict)  # empty: unlimited
    deserved: Res | None = None  # capacity plugin: given; proportion: computed
    guarantee: Res = field(default_factory=dict)
    reclaimable: bool = True


@dataclass(frozen=True, slots=True)
class Running:
    """A running job as reclaim sees it; `rank` orders victims (lowest first)."""

    job_id: int
    queue: str
    res: Res
    rank: float = 0.0


def queues_from_accounts(state: PolicyState) -> list[Queue]:
    """The queues the association tree stands for: root's child accounts, weight = their
    shares (FairShare=parent counts 1), capability = their GrpTRES."""
    return [
        Queue(a.account, a.shares or 1, {k: float(v) for k, v in a.grp_tres.items()})
        for a in state.assocs
        if not a.user and a.parent == "root" and a.account != "root"
    ]


def _add(a: Res, b: Res, sign: float = 1.0) -> dict[str, float]:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0.0) + sign * v
    return out


def _le(a: Res, b: Res, eps: float = 1e-9) -> bool:
    """a <= b in every dimension a names (b lacking one: 0)."""
    return all(v <= b.get(k, 0.0) + eps for k, v in a.items())


def _min(a: Res, b: Res) -> dict[str, float]:
    return {k: min(v, b[k]) if k in b else v for k, v in a.items()}


def proportion(
    total: Res, queues: Sequence[Queue], requests: Mapping[str, Res]
) -> dict[str, dict[str, float]]:
    """Each queue's deserved resources under the proportion plugin: the remaining
    cluster is split by weight among the queues not yet satisfied; a queue's share is
    capped at its capability and its request (a queue that is capped is satisfied and
    drops out), and the loop repeats with what the capped queues left."""
    deserved: dict[str, dict[str, float]] = {q.name: {k: 0.0 for k in total} for q in queues}
    met: set[str] = set()
    remaining = dict(total)
    while True:
        open_queues = [q for q in queues if q.name not in met]
        weight = sum(q.weight for q in open_queues)
        if not open_queues or weight == 0 or all(v <= 1e-9 for v in remaining.values()):
            break
        for q in open_queues:
            share = {k: remaining[k] * q.weight / weight for k in total}
            want = _add(deserved[q.name], share)
            cap = dict(requests.get(q.name, {}))
            cap = {k: cap.get(k, 0.0) for k in total}
            if q.capability:
                cap = _min(cap, q.capability)
            if _le(cap, want):
                met.add(q.name)
            deserved[q.name] = _min(want, cap)
        used = {k: sum(d[k] for d in deserved.values()) for k in total}
        left = {k: total[k] - used[k] for k in total}
        if all(abs(left[k] - remaining[k]) <= 1e-9 for k in total):
            break  # nothing more could be handed out
        remaining = left
    for q in queues:  # never below the guarantee
        for k, v in q.guarantee.items():
            deserved[q.name][k] = max(deserved[q.name].get(k, 0.0), v)
    return deserved


def reclaim(
    queue: str,
    request: Res,
    free: Res,
    deserved: Mapping[str, Res],
    running: Iterable[Running],
    reclaimable: Mapping[str, bool] | None = None,
) -> tuple[int, ...] | None:
    """The whole jobs a pending job of `queue` asking for `request` takes back (empty:
    it fits in `free`), or None when it must wait: its queue would then use more than it
    deserves, or the jobs other queues run beyond their deserved share do not free
    enough. Victims are taken lowest rank first, from a queue only while that queue
    still uses more than it deserves (the last one may bring it below)."""
    jobs = list(running)
    allocated: dict[str, dict[str, float]] = {}
    for r in jobs:
        allocated[r.queue] = _add(allocated.get(r.queue, {}), r.res)
    if _le(request, free):
        return ()
    mine = _add(allocated.get(queue, {}), request)
    if not _le(mine, deserved.get(queue, {})):
        return None  # overused: a queue reclaims only up to its deserved share
    victims: list[int] = []
    room = dict(free)
    for r in sorted(jobs, key=lambda r: (r.rank, -r.job_id)):
        if r.queue == queue or not (reclaimable or {}).get(r.queue, True):
            continue
        if _le(allocated[r.queue], deserved.get(r.queue, {})):
            continue  # within its deserved share: not reclaimable
        allocated[r.queue] = _add(allocated[r.queue], r.res, -1.0)
        room = _add(room, r.res)
        victims.append(r.job_id)
        if _le(request, room):
            return tuple(victims)
    return None


def dominant_share(allocated: Res, total: Res) -> float:
    """DRF's dominant share: the largest fraction of any resource held."""
    return max((v / total[k] for k, v in allocated.items() if total.get(k)), default=0.0)


def drf_fill(total: Res, demands: Mapping[str, Res], tasks: Mapping[str, int]) -> dict[str, int]:
    """Progressive filling (Ghodsi et al., NSDI 2011): repeatedly give one more task to
    the job with the lowest dominant share whose next task still fits, up to its task
    count; ties go to the job named first. Returns the tasks each job runs."""
    given = {j: 0 for j in demands}
    used: dict[str, float] = {k: 0.0 for k in total}
    while True:
        open_jobs = [
            j for j in demands if given[j] < tasks.get(j, 0) and _le(_add(used, demands[j]), total)
        ]
        if not open_jobs:
            return given
        pick = min(
            open_jobs,
            key=lambda j: dominant_share({k: v * given[j] for k, v in demands[j].items()}, total),
        )
        given[pick] += 1
        used = _add(used, demands[pick])
