"""After a gateway (re)start: the preemption victims that were inside their GraceTime.

The victims in progress live in the Preempter's memory. A victim whose grace was running when
the gateway stopped is still RUNNING in the store, with its PreemptTime set; without this, the
next cycle would choose it again, signal it again and give it a whole new grace, and its
preemptor would wait that long for nothing: on Kubernetes its pods were deleted with the first
grace (the API server keeps the shorter of two deletions' graces), so they are gone when that
one ends. The victim's last `preempt` event says who preempts it, how, and when the grace
began; the grace goes on from there, as WillEvict notices do (control/will_evict.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.model.job import Job
from gateway.model.state import JobState
from gateway.policy.preempt_rules import Mode
from gateway.store.base import Store

if TYPE_CHECKING:
    from gateway.control.gateway import Gateway

__all__ = ["InGrace", "in_grace"]


@dataclass(frozen=True, slots=True)
class InGrace:
    """A victim whose grace goes on: its run, preemptor, mode and the grace's end."""

    job: Job
    preemptor: int
    mode: Mode
    deadline: float  # gateway clock


async def in_grace(gw: Gateway) -> list[InGrace]:
    """The victims the store shows inside their grace (read once, at the first tick)."""
    jobs = [
        j
        for j in gw.jobs.active.values()
        if j.state is JobState.RUNNING and j.preempt_time is not None
    ]
    if not jobs:
        return []
    return await asyncio.to_thread(_read, gw.store, jobs, gw.config.time_scale)


def _read(store: Store, jobs: Sequence[Job], time_scale: float) -> list[InGrace]:
    out: list[InGrace] = []
    for job in jobs:
        last = None
        for event in store.events(job.job_id):
            if event.kind in ("start", "preempt-end"):
                last = None  # a later run, or a preemption that was carried out
            elif event.kind == "preempt":
                last = event
        if last is None:
            continue
        by, grace, mode = (last.detail.get(k) for k in ("by", "grace_s", "mode"))
        if not isinstance(by, int) or not isinstance(grace, int) or not isinstance(mode, str):
            continue
        try:
            how = Mode(mode.lower())
        except ValueError:
            continue
        if how in (Mode.CANCEL, Mode.REQUEUE):
            out.append(InGrace(job, by, how, last.time + grace * time_scale))
    return out
